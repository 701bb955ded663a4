//! Document ingestion: the JetStream queue (and, later, the worker).

pub mod queue;
pub mod worker;
