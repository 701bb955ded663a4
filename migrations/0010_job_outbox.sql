-- The job of each submitted version until JetStream has confirmed storing it (a transactional
-- outbox). A submission inserts the row in the transaction that stores the version and deletes
-- it once the job is published. A row that outlives TROVE_PENDING_REPUBLISH_AFTER belongs to a
-- version whose job was never published (the process stopped between the commit and the
-- publish) or whose publish was not confirmed: the workers' sweep publishes the job again.
-- Versions that were pending before this migration have no row: their jobs were published by
-- the release that took them.
CREATE TABLE job_outbox (
    document_id  uuid NOT NULL,
    version      bigint NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- When a sweep last claimed the row to publish its job again; a sweep claims a row at most
    -- once per TROVE_PENDING_REPUBLISH_AFTER, so a failed publish is retried after that.
    attempted_at timestamptz,
    PRIMARY KEY (document_id, version),
    FOREIGN KEY (document_id, version) REFERENCES documents (id, version) ON DELETE CASCADE
);
