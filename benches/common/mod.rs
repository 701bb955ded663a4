//! What the benches that run Trove in process share: starting it (`app`), the floor of a
//! search (`floor`), exact neighbours and recall (`recall`), percentiles and concurrent
//! clients (`measure`), tables (`report`) and synthetic texts (`text`).

pub mod app;
pub mod floor;
pub mod measure;
pub mod recall;
pub mod report;
pub mod text;
