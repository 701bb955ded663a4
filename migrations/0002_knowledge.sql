-- Knowledge: embedding and text splitter providers and instances, pipelines with their
-- classifications and metadata indexes, document versions, raw texts and fragments.
-- Vectors live in one table per pipeline–model association (see src/store/vectors.rs), created
-- with the pipeline, so that each has the model's fixed dimension and its own HNSW index.

CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE embedding_providers (
    id          uuid PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    description text,
    parameters  jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE text_splitter_providers (
    id          uuid PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    description text,
    parameters  jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE embedding_models (
    id                uuid PRIMARY KEY,
    name              text NOT NULL UNIQUE,
    description       text,
    provider          text NOT NULL REFERENCES embedding_providers (name),
    model_name        text NOT NULL,
    -- Parameters without secrets; secret ones are in `secret_parameters`, encrypted JSON.
    parameters        jsonb NOT NULL DEFAULT '{}',
    secret_parameters bytea,
    dimensions        integer NOT NULL CHECK (dimensions BETWEEN 1 AND 2000),
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE text_splitters (
    id          uuid PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    description text,
    provider    text NOT NULL REFERENCES text_splitter_providers (name),
    parameters  jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE pipelines (
    id                       uuid PRIMARY KEY,
    name                     text NOT NULL UNIQUE,
    description              text,
    -- RESTRICT: deleting a splitter still used by a pipeline is `Conflict related error`.
    default_text_splitter_id uuid NOT NULL REFERENCES text_splitters (id) ON DELETE RESTRICT,
    has_full_text_search     boolean NOT NULL,
    metadata_schema          jsonb NOT NULL,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now()
);

-- The association between a pipeline and its embedding model ("vector embedding").
CREATE TABLE vector_embeddings (
    id                 uuid PRIMARY KEY,
    pipeline_id        uuid NOT NULL UNIQUE REFERENCES pipelines (id) ON DELETE CASCADE,
    embedding_model_id uuid NOT NULL REFERENCES embedding_models (id) ON DELETE RESTRICT,
    dimensions         integer NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE classifications (
    pipeline_id uuid NOT NULL REFERENCES pipelines (id) ON DELETE CASCADE,
    name        text NOT NULL,
    PRIMARY KEY (pipeline_id, name)
);

-- (classification, inherited classification): a reader of `classification` also sees
-- documents of `inherited`, transitively.
CREATE TABLE classification_hierarchy (
    pipeline_id    uuid NOT NULL,
    classification text NOT NULL,
    inherited      text NOT NULL,
    PRIMARY KEY (pipeline_id, classification, inherited),
    FOREIGN KEY (pipeline_id, classification) REFERENCES classifications (pipeline_id, name) ON DELETE CASCADE,
    FOREIGN KEY (pipeline_id, inherited) REFERENCES classifications (pipeline_id, name) ON DELETE CASCADE
);

CREATE TABLE pipeline_indexes (
    id          uuid PRIMARY KEY,
    pipeline_id uuid NOT NULL REFERENCES pipelines (id) ON DELETE CASCADE,
    field       text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (pipeline_id, field)
);

-- One row per document version.
CREATE TABLE documents (
    id                    uuid NOT NULL,
    version               bigint NOT NULL,
    pipeline_id           uuid NOT NULL REFERENCES pipelines (id) ON DELETE CASCADE,
    external_identifier   text NOT NULL,
    classification        text NOT NULL,
    metadata              jsonb NOT NULL,
    status                text NOT NULL CHECK (status IN ('pending', 'success', 'failed')),
    text_splitter_id      uuid REFERENCES text_splitters (id) ON DELETE RESTRICT,
    expire_older_versions boolean NOT NULL,
    created_at            timestamptz NOT NULL,
    updated_at            timestamptz NOT NULL,
    expired_at            timestamptz,
    PRIMARY KEY (id, version)
);

CREATE INDEX documents_pipeline_external_idx ON documents (pipeline_id, external_identifier);
CREATE INDEX documents_pipeline_id_idx ON documents (pipeline_id, id, created_at);
CREATE INDEX documents_pending_idx ON documents (created_at) WHERE status = 'pending';

-- Raw text, encrypted, kept only until the version is processed (at most 24 hours).
CREATE TABLE document_texts (
    document_id uuid NOT NULL,
    version     bigint NOT NULL,
    text        bytea NOT NULL,
    PRIMARY KEY (document_id, version),
    FOREIGN KEY (document_id, version) REFERENCES documents (id, version) ON DELETE CASCADE
);

CREATE TABLE fragments (
    id             uuid PRIMARY KEY,
    pipeline_id    uuid NOT NULL,
    document_id    uuid NOT NULL,
    version        bigint NOT NULL,
    order_id       integer NOT NULL,
    classification text NOT NULL,
    metadata       jsonb NOT NULL,
    -- AES-256-GCM of the fragment text (nonce || ciphertext); never plaintext.
    content        bytea NOT NULL,
    -- Copied from the version, so that searches filter fragments alone.
    expired_at     timestamptz,
    -- Full-text vector, only for pipelines with full-text search.
    tsv            tsvector,
    FOREIGN KEY (document_id, version) REFERENCES documents (id, version) ON DELETE CASCADE,
    UNIQUE (document_id, version, order_id)
);

CREATE INDEX fragments_pipeline_idx ON fragments (pipeline_id, classification) WHERE expired_at IS NULL;
CREATE INDEX fragments_tsv_idx ON fragments USING gin (tsv) WHERE tsv IS NOT NULL;
