-- Queues as objects: admins' specs (weight, quotas, limits) with a version,
-- every change to them, and each queue's and user's decayed GPU usage for
-- fair share (written about once a minute).
CREATE TABLE queues (
  name TEXT PRIMARY KEY,
  spec BLOB NOT NULL,           -- xl.v1.QueueSpec
  version INTEGER NOT NULL,
  updated_us INTEGER NOT NULL,
  updated_by TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE queue_changes (
  seq INTEGER PRIMARY KEY,      -- given by the scheduler, in order
  time_us INTEGER NOT NULL,
  queue TEXT NOT NULL,
  by_user TEXT NOT NULL,
  action TEXT NOT NULL,         -- 'create', 'update' or 'delete'
  spec BLOB NOT NULL,           -- after the change (before it, for delete)
  version INTEGER NOT NULL
);
CREATE TABLE usage (
  queue TEXT NOT NULL,
  user TEXT NOT NULL,           -- '' for the queue's own total
  gpu_seconds REAL NOT NULL,    -- decayed, as of as_of_us
  as_of_us INTEGER NOT NULL,
  PRIMARY KEY (queue, user)
) WITHOUT ROWID;
