"""Splitting a fleet between N workers with no coordinator: `--shard I/N`.

Each worker is given the same VOLUME list and keeps the volumes whose path hashes to its
shard, so N Kubernetes Indexed Job pods, systemd template instances or cron hosts cover the
fleet once between them. The hash is sha256 (Python's `hash()` changes with every process).

The path hashed is the agent file the argument names, absolute and normalised: `vol`,
`vol/`, `./vol/agent.db` and `/srv/vol` (run from /srv) are one volume and land in one shard.
Symlinks are not followed, so the workers must see the fleet under the same absolute paths
(the same mount point), as the pods of one Job and the instances of one unit do.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from volumetool.text import plural

MAX_SHARDS = 1_000_000
_FORM = re.compile(r"([0-9]{1,20})/([0-9]{1,20})")


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count`, counted from 0 as Kubernetes' JOB_COMPLETION_INDEX is."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_SHARDS:
            raise ValueError(f"the number of shards must be from 1 to {MAX_SHARDS:,}")
        if not 0 <= self.index < self.count:
            raise ValueError(
                f"shard {self.index} of {self.count} does not exist: I counts from 0 to "
                f"{self.count - 1}"
            )

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """`I/N` as a Shard; ValueError with a one-line reason otherwise."""
    found = _FORM.fullmatch(text)
    if found is None:
        raise ValueError(f"{text!r} is not I/N (shard I of N, counted from 0: 0/4 to 3/4)")
    return Shard(int(found.group(1)), int(found.group(2)))


def in_shard(key: str, shard: Shard) -> bool:
    """Does the volume at `key` (a `shard_key`) belong to `shard`? Any text hashes, even one
    holding lone surrogates (a file name that is not UTF-8)."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % shard.count == shard.index


def note_empty(given: Sequence[str], shard: Shard | None, selected: Sequence[str]) -> str | None:
    """The line for stderr when a shard got none of the volumes: it succeeds, doing nothing."""
    if shard is None or selected:
        return None
    return f"shard {shard} holds none of the {plural(len(given), 'volume')} given: nothing to do"
