-- Job ids are never given twice, also after retention deleted the newest
-- jobs and the scheduler restarted: the highest id given is kept here.
CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO meta (key, value) SELECT 'last_job_id', coalesce(max(id), 0) FROM jobs;
-- How each rank of an attempt ended, one row per rank: written as it
-- happens (a row, not the whole job), read back at start.
CREATE TABLE rank_exits (
  job_id INTEGER NOT NULL,
  attempt INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  exit BLOB NOT NULL,  -- xl.v1.RankExit
  PRIMARY KEY (job_id, attempt, rank)
) WITHOUT ROWID;
