//! Retrieval: similarity, MMR and full-text search over a pipeline's fragments.

pub mod cost;
pub mod estimates;
pub mod kinds;
pub mod mmr;
pub mod search;
