-- API keys, their permission entries, and the installation record.

CREATE TABLE installation (
    id            integer PRIMARY KEY CHECK (id = 1),
    master_key_id uuid NOT NULL,
    installed_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
    id          uuid PRIMARY KEY,
    name        text NOT NULL,
    description text,
    -- HMAC-SHA256 of the secret (see src/crypto.rs); the secret itself is never stored.
    secret_hash bytea NOT NULL,
    active      boolean NOT NULL DEFAULT true,
    expiration  timestamptz,
    is_master   boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX api_keys_name_idx ON api_keys (name, id);
CREATE INDEX api_keys_created_at_idx ON api_keys (created_at, id);

-- One row per (key, object type, object); object_id is the all-zero UUID for a type entry.
CREATE TABLE permissions (
    api_key_id      uuid NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
    object_type     text NOT NULL,
    object_id       uuid NOT NULL,
    permission      smallint NOT NULL CHECK (permission BETWEEN 1 AND 7),
    classifications text[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (api_key_id, object_type, object_id)
);

-- Deleting an object removes every key's entries on it.
CREATE INDEX permissions_object_idx ON permissions (object_id, object_type);
