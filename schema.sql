-- The current agent volume format (SPEC section 2).
--
-- This file is the reference; volumetool/migrations.py is how files get here. A test proves
-- that applying every migration to an empty file yields exactly these tables and indexes
-- (sqlite-utils' own _sqlite_migrations table aside). Timestamps are ISO-8601 UTC text with
-- milliseconds and Z: 2026-11-30T05:27:20.123Z.

-- Facts about the agent: at least name and created_at.
CREATE TABLE identity (key TEXT PRIMARY KEY, value TEXT NOT NULL);

-- One row per thread; /new archives the active row and starts another under the same key.
CREATE TABLE sessions (
  id INTEGER PRIMARY KEY,
  conversation_key TEXT NOT NULL,
  channel TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('active', 'archived')),
  summary TEXT,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  archived_at TEXT
);

-- The transcript, in append order. folded_by names the compaction run that folded a message
-- into its thread's summary; NULL means the message is live.
CREATE TABLE messages (
  id INTEGER PRIMARY KEY,
  session_id INTEGER NOT NULL REFERENCES sessions (id),
  role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
  content TEXT NOT NULL,
  tool_calls TEXT,
  tool_call_id TEXT,
  created_at TEXT NOT NULL,
  folded_by INTEGER REFERENCES runs (id)
);

-- One row per run; token figures as the provider reported them, NULL when not reported.
CREATE TABLE runs (
  id INTEGER PRIMARY KEY,
  session_id INTEGER REFERENCES sessions (id),
  trigger TEXT NOT NULL,
  model TEXT,
  status TEXT NOT NULL CHECK (status IN ('ok', 'error')),
  input_tokens INTEGER,
  output_tokens INTEGER,
  last_input_tokens INTEGER,
  error TEXT,
  started_at TEXT NOT NULL,
  finished_at TEXT
);

-- The audit trail (GET /audit); detail is a JSON object.
CREATE TABLE audit (
  id INTEGER PRIMARY KEY,
  ts TEXT NOT NULL,
  event TEXT NOT NULL,
  detail TEXT NOT NULL,
  session_id INTEGER,
  run_id INTEGER,
  actor TEXT NOT NULL DEFAULT 'agent' CHECK (actor IN ('agent', 'volumetool'))
);

-- What each successful compaction run wrote (SPEC section 10): its summary (NULL: unknown, for
-- runs older than this table or written by the agent itself), the tokens it saved, how much of
-- the fold's hard facts it kept, when it was undone (its messages are live again), and the
-- summary it replaced, which undo restores: `replaced_kept` is 1 when `replaced_summary` holds
-- it (NULL: the thread had none), 0 for rows from before m007 (the summary before is then
-- that of the compaction before, when known). From m008 (SPEC section 14): the first 20 facts
-- its summary invented (JSON, as `missing_facts`), and the input tokens its server counted for
-- each one volumetool estimated (NULL: not reported), which sizes the next requests to its model.
CREATE TABLE compactions (
  run_id INTEGER PRIMARY KEY REFERENCES runs (id),
  session_id INTEGER NOT NULL REFERENCES sessions (id),
  summary TEXT,
  saved_tokens INTEGER,
  retention REAL,
  missing_facts TEXT,
  undone_at TEXT
, replaced_summary TEXT, replaced_kept INTEGER NOT NULL DEFAULT 0, invented_facts TEXT, tokens_per_estimate REAL);

-- Persistent memory: key -> fact.
CREATE TABLE memories (key TEXT PRIMARY KEY, value TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL);

CREATE UNIQUE INDEX sessions_one_active_per_key ON sessions (conversation_key) WHERE status = 'active';
CREATE INDEX sessions_by_status_updated ON sessions (status, updated_at);
CREATE INDEX messages_by_session ON messages (session_id, id);
CREATE INDEX messages_by_folding_run ON messages (folded_by);
CREATE INDEX runs_by_session ON runs (session_id, id);
CREATE INDEX runs_by_trigger ON runs (trigger, id);
CREATE INDEX runs_by_started ON runs (started_at);
CREATE INDEX audit_by_event ON audit (event, id);
CREATE INDEX audit_by_ts ON audit (ts);
CREATE INDEX audit_by_session ON audit (session_id);
CREATE INDEX compactions_by_session ON compactions (session_id, run_id);
