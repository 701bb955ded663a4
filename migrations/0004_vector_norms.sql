-- Whether every vector stored for an association has unit length. While it holds, the
-- cosine HNSW index also serves euclidean and dot-product searches (for unit vectors the
-- three distances order candidates identically); the first vector of another length
-- clears it, and those searches scan exactly from then on.
ALTER TABLE vector_embeddings ADD COLUMN unit_vectors boolean NOT NULL DEFAULT true;
