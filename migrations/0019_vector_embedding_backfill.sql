-- A pipeline may hold several associations with embedding models (at most
-- `MAX_VECTOR_EMBEDDINGS`, src/service/vector_embeddings.rs), one model at most once: the
-- default, which searches, agents and MCP use without `params.embedding`, and others added
-- later, whose vectors workers backfill from the stored fragments (`backfilling`) before
-- searches may use them (`ready`); `failed` when the backfill cannot get past an error, with
-- its reason. Associations created with their pipeline are its default and `ready`.
ALTER TABLE vector_embeddings DROP CONSTRAINT vector_embeddings_pipeline_id_key;
ALTER TABLE vector_embeddings
    ADD COLUMN is_default boolean NOT NULL DEFAULT true,
    ADD COLUMN status text NOT NULL DEFAULT 'ready'
        CHECK (status IN ('backfilling', 'ready', 'failed')),
    ADD COLUMN status_reason text;
ALTER TABLE vector_embeddings ALTER COLUMN is_default SET DEFAULT false;
CREATE UNIQUE INDEX vector_embeddings_default_idx ON vector_embeddings (pipeline_id) WHERE is_default;
CREATE UNIQUE INDEX vector_embeddings_model_idx ON vector_embeddings (pipeline_id, embedding_model_id);
ALTER TABLE vector_embeddings
    ADD CONSTRAINT vector_embeddings_default_ready_check CHECK (NOT is_default OR status = 'ready');

-- A backfill's progress, apart from the association, whose changes advance the search epoch
-- (`0014_search_epoch.sql`): progress written after every batch would make every remembered
-- search context stale while a backfill runs. The fragment id space is cut into
-- `ranges` ranges at the quantiles of the current fragments' ids when it starts (`bounds`, the
-- `ranges - 1` inner bounds), each walked by its own chain of jobs; bit r of `ranges_done` is
-- set when range r has no fragment left. `fragments_total` counts the current fragments when the
-- backfill started, and those found later; `attempts` the failed deliveries in a row.
CREATE TABLE vector_embedding_backfills (
    vector_embedding_id uuid PRIMARY KEY REFERENCES vector_embeddings (id) ON DELETE CASCADE,
    fragments_total     bigint NOT NULL,
    fragments_done      bigint NOT NULL DEFAULT 0,
    ranges              integer NOT NULL,
    ranges_done         bigint NOT NULL DEFAULT 0,
    bounds              uuid[],
    attempts            integer NOT NULL DEFAULT 0,
    progress_at         timestamptz NOT NULL DEFAULT now()
);
