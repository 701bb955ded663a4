-- Conversation contexts and their messages (extension `conversations`). A context belongs to
-- the API key that created it and is deleted with it; its messages are deleted with it.
-- Message content is encrypted with AES-256-GCM under TROVE_SECRET, like fragment text.

CREATE TABLE contexts (
    id          uuid PRIMARY KEY,
    api_key_id  uuid NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
    name        text,
    description text,
    metadata    jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- The owner's list (id order by default) and the deletion of a key's contexts with the key.
CREATE INDEX contexts_owner_idx ON contexts (api_key_id, id);
-- The retention sweep (TROVE_CONTEXT_RETENTION): contexts not updated since a time.
CREATE INDEX contexts_updated_at_idx ON contexts (updated_at);

CREATE TABLE context_messages (
    id           uuid PRIMARY KEY,
    context_id   uuid NOT NULL REFERENCES contexts (id) ON DELETE CASCADE,
    role         text NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    -- The text, encrypted: nonce (12 bytes) || ciphertext.
    content      bytea NOT NULL,
    -- The agent execution whose answer the message is; null for messages posted directly.
    execution_id uuid,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- A context's messages, oldest first (the list's default order).
CREATE INDEX context_messages_context_idx ON context_messages (context_id, created_at, id);
