-- What a restart must not forget, and what retention needs.
-- The rendezvous token of a job's current attempt (a secret: kept out of the
-- job message, which users read).
ALTER TABLE jobs ADD COLUMN rendezvous_token TEXT;
-- Resources an attempt holds on a node until its ranks there have exited;
-- allocation is an xl.v1.Allocation whose ranks are the ones not yet gone.
-- Kept for ended and requeued attempts too, until their ranks really exit.
CREATE TABLE holds (
  node TEXT NOT NULL,
  job_id INTEGER NOT NULL,
  attempt INTEGER NOT NULL,
  allocation BLOB NOT NULL,
  PRIMARY KEY (node, job_id, attempt)
) WITHOUT ROWID;
-- One row, rewritten to find out whether the disk takes writes again.
CREATE TABLE probe (id INTEGER PRIMARY KEY, time_us INTEGER NOT NULL);
