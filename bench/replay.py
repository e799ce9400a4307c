"""The floor beside the compaction rows: a bare client that replays the requests a `compact` run
sent (path, headers, body) to the same server at the same concurrency with httpx, and does
nothing else — no volume, no config, no planning, no writes. Its time against the ideal is
what any Python client of that server costs on this machine at that moment (process start,
imports, the HTTP client's work per request).

    python -m bench.replay URL REQUESTS.json CONCURRENCY
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import httpx

# What the replay may send of a request's headers: the rest (host, length, connection) is the
# client's own business.
KEPT_HEADERS = ("authorization", "x-api-key", "api-key", "anthropic-version", "user-agent")


async def replay(url: str, requests: list[dict], concurrency: int) -> None:
    slots = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:

        async def one(request: dict) -> None:
            headers = {k: v for k, v in request["headers"].items() if k in KEPT_HEADERS}
            async with slots:
                response = await client.post(
                    url + request["path"], json=request["body"], headers=headers
                )
                response.raise_for_status()
                response.json()

        await asyncio.gather(*(one(r) for r in requests))


if __name__ == "__main__":
    url, path, concurrency = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    asyncio.run(replay(url, json.loads(path.read_text()), concurrency))
