-- Training metrics over time, downsampled (about one point a second per job).
CREATE TABLE metrics (
  seq INTEGER PRIMARY KEY,
  job_id INTEGER NOT NULL,
  time_us INTEGER NOT NULL,
  data BLOB NOT NULL  -- xl.v1.TrainMetrics
);
CREATE INDEX metrics_by_job ON metrics(job_id, seq);
