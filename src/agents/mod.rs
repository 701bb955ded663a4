//! Agents: prompt templates whose placeholders are filled by retrieval. Definitions and their
//! validation, template parsing and rendering.

pub mod definition;
pub mod template;
