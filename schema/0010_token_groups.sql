-- The groups a user token's user belongs to ("ml,vision"): queues may
-- admit users by group (QueueSpec.groups).
ALTER TABLE tokens ADD COLUMN groups TEXT NOT NULL DEFAULT '';
