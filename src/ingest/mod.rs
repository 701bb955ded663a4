//! Document ingestion: the JetStream queue (and, later, the worker).

pub mod metrics_server;
pub mod queue;
pub mod worker;
