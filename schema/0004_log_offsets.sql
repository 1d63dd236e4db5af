-- Each chunk of a rank's output is kept once: an agent that lost its
-- connection before the scheduler acknowledged a chunk sends it again.
-- end_offset is LogChunk.end_offset, NULL when the agent gave none.
ALTER TABLE logs ADD COLUMN end_offset INTEGER;
CREATE UNIQUE INDEX logs_once ON logs(job_id, attempt, rank, stream, end_offset)
  WHERE end_offset IS NOT NULL;
