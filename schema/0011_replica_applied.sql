-- A replica of the scheduler (its state replicated on Raft) applies the log's
-- entries to this database; the index of the last one applied is written in
-- the same transaction, so an entry read again after a restart is applied
-- once. One row; absent on a scheduler that is not replicated.
CREATE TABLE replica_applied (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  log_index INTEGER NOT NULL
);
