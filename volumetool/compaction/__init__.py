"""Compaction: plan (pure), summarize (prompt and acceptance), store (SQLite), run (cron)."""
