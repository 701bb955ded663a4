//! The Model Context Protocol server at `/mcp`: three read-only tools over streamable HTTP.
//!
//! rmcp implements the protocol and its transport ([`transport`] wraps its streamable HTTP
//! service in a poem endpoint and adds what the interface needs on top); [`handler`] answers
//! the MCP methods; [`tools`] defines and runs the tools on the service layer, with the same
//! key check and permissions as REST.

pub mod handler;
pub mod search;
pub mod tools;
pub mod transport;

pub use transport::{McpEndpoint, endpoint};
