-- The ranks' output, kept by the scheduler so it outlives the node.
CREATE TABLE logs (
  seq INTEGER PRIMARY KEY,
  job_id INTEGER NOT NULL,
  attempt INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  stream INTEGER NOT NULL,
  time_us INTEGER NOT NULL,
  data BLOB NOT NULL
);
CREATE INDEX logs_by_job ON logs(job_id, seq);
