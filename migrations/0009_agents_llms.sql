-- LLMs (registered connections to model servers), agents (prompt templates with
-- placeholders) and agent execution traces.

CREATE TABLE llms (
    id          uuid PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    description text,
    provider    text NOT NULL,
    endpoint    text NOT NULL,
    model       text,
    parameters  jsonb NOT NULL DEFAULT '{}',
    -- The API key, encrypted with AES-256-GCM under TROVE_SECRET; never returned.
    api_key     bytea,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE agents (
    id           uuid PRIMARY KEY,
    name         text NOT NULL UNIQUE,
    description  text,
    prompt       jsonb NOT NULL,
    placeholders jsonb NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- An execution's trace, readable by the executing key for 60 minutes. Retrievals, messages
-- and the answer hold fragment text, so they are stored encrypted like fragments.
CREATE TABLE agent_traces (
    id          uuid PRIMARY KEY,
    api_key_id  uuid NOT NULL,
    agent_id    uuid NOT NULL,
    pipeline_id uuid NOT NULL,
    llm_id      uuid NOT NULL,
    retrievals  bytea NOT NULL,
    messages    bytea NOT NULL,
    answer      bytea,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX agent_traces_created_at_idx ON agent_traces (created_at);
