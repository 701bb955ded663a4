-- A counter that moves, in the transaction that makes the change, with every change to what a
-- search reads before its statement: a key and its permission entries, a pipeline, its
-- association and model, classifications, hierarchy and metadata indexes. A search that
-- remembers what it read (`auth::search_memory`) runs its statement only while the counter
-- still holds the value read with it, checked inside the statement itself: a change committed
-- before a search starts is seen by that search, on every replica.
--
-- The triggers are deferred to the commit, so each transaction holds the counter's row only
-- from its last statement to its commit and never waits for another lock while holding it.
CREATE TABLE search_epoch (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    n        bigint NOT NULL
);
INSERT INTO search_epoch (only_row, n) VALUES (true, 0);

CREATE FUNCTION search_epoch_advance() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE search_epoch SET n = n + 1;
    RETURN NULL;
END
$$;

DO $$
DECLARE
    watched text;
BEGIN
    FOREACH watched IN ARRAY ARRAY['api_keys', 'permissions', 'pipelines', 'vector_embeddings',
                                   'embedding_models', 'classifications',
                                   'classification_hierarchy', 'pipeline_indexes']
    LOOP
        EXECUTE format(
            'CREATE CONSTRAINT TRIGGER %I AFTER INSERT OR UPDATE OR DELETE ON %I
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION search_epoch_advance()',
            watched || '_search_epoch', watched);
    END LOOP;
END
$$;
