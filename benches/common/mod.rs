//! What the benches that run Trove in process share: starting it (`app`), the floor of a
//! search (`floor`), exact neighbours and recall (`recall`), percentiles and concurrent
//! clients (`measure`), tables (`report`), synthetic texts (`text`) and real embedding vectors
//! with their cache and a fake embeddings server (`real_vectors`).

pub mod app;
pub mod floor;
pub mod measure;
pub mod real_vectors;
pub mod recall;
pub mod report;
pub mod text;
