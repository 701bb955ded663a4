//! Agents: prompt templates whose placeholders are filled by retrieval. Definitions and their
//! validation, template parsing and rendering, and execution traces.

pub mod definition;
pub mod template;
pub mod trace;
