"""An agent that keeps its volume's write lock: `BEGIN IMMEDIATE`, a line `locked` on stdout,
then the lock held until stdin closes (or SECONDS pass), then rolled back.

    python -m tests.support.holder DB [SECONDS]
"""

from __future__ import annotations

import sqlite3
import sys
import threading


def main() -> None:
    path = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else None
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    print("locked", flush=True)
    released = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), released.set()), daemon=True).start()
    released.wait(seconds)
    conn.execute("ROLLBACK")
    conn.close()


if __name__ == "__main__":
    main()
