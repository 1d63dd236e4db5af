-- Idempotency keys are each user's own: the same key from two users names
-- two jobs.
DROP INDEX jobs_by_idempotency_key;
CREATE UNIQUE INDEX jobs_by_user_idempotency_key ON jobs(user, idempotency_key)
  WHERE idempotency_key IS NOT NULL;
