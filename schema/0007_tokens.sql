-- Credentials: users' bearer tokens and agents' single-use join tokens.
-- Only the SHA-256 of a token's secret is kept; the token itself is shown
-- once, when it is created.
CREATE TABLE tokens (
  id TEXT PRIMARY KEY,          -- public part of the token: "xl_<id>_<secret>"
  kind TEXT NOT NULL,           -- 'user' or 'join'
  user TEXT NOT NULL,           -- the user (kind 'user'); '' for join tokens
  admin INTEGER NOT NULL DEFAULT 0,
  hash TEXT NOT NULL,           -- hex SHA-256 of the secret
  created INTEGER NOT NULL,     -- unix seconds
  expires INTEGER NOT NULL,     -- unix seconds; 0: never
  revoked INTEGER NOT NULL DEFAULT 0,  -- unix seconds; 0: not revoked
  used_by TEXT NOT NULL DEFAULT ''     -- join tokens: the node that used it
) WITHOUT ROWID;
