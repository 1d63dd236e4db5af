-- Jobs, their events and the nodes the scheduler has seen.
-- A job row keeps the whole xl.v1.Job message; the other columns are the
-- ones queries filter on.
CREATE TABLE jobs (
  id INTEGER PRIMARY KEY,
  idempotency_key TEXT,
  user TEXT NOT NULL,
  queue TEXT NOT NULL,
  state INTEGER NOT NULL,
  create_time_us INTEGER NOT NULL,
  job BLOB NOT NULL
);
CREATE UNIQUE INDEX jobs_by_idempotency_key ON jobs(idempotency_key)
  WHERE idempotency_key IS NOT NULL;
CREATE INDEX jobs_by_state ON jobs(state);

CREATE TABLE job_events (
  job_id INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  time_us INTEGER NOT NULL,
  from_state INTEGER NOT NULL,
  to_state INTEGER NOT NULL,
  attempt INTEGER NOT NULL,
  reason TEXT NOT NULL,
  PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;

CREATE TABLE nodes (
  name TEXT PRIMARY KEY,
  inventory BLOB NOT NULL,
  drained INTEGER NOT NULL DEFAULT 0,
  state_reason TEXT NOT NULL DEFAULT '',
  register_time_us INTEGER NOT NULL
);
