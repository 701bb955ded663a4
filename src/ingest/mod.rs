//! Document ingestion: the JetStream queue (and, later, the worker).

pub mod deferred_index;
pub mod extract;
pub mod outbox;
pub mod queue;
pub mod worker;
