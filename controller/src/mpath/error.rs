//! Errors of the map model.

use super::DevNum;
use super::table::Selector;

/// A table or status string that does not have the kernel's shape.
///
/// `index` counts whitespace-separated tokens from 0 in the string that was
/// handed to the parser, so a user can find the culprit by counting words;
/// `token` is `None` when the string ended too early.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {reason}", match .token {
    Some(t) => format!("token {} ('{}')", .index, t),
    None => format!("at the end, after {} tokens", .index),
})]
pub struct ParseError {
    pub index: usize,
    pub token: Option<String>,
    pub reason: String,
}

/// A change to a table model that would make no valid table, or that names
/// something the map does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    #[error("path {0} is not part of the map")]
    PathNotInMap(DevNum),
    #[error("path {0} is already part of the map")]
    DuplicatePath(DevNum),
    #[error("path {0} is the last path of the map; a map needs at least one path")]
    LastPath(DevNum),
    #[error("a map needs at least one path")]
    NoPaths,
    #[error("the map has no path group {0} (groups are numbered from 1)")]
    NoSuchGroup(usize),
    #[error("path group {group} uses {selector}; relative throughput needs service-time")]
    NotServiceTime { group: usize, selector: String },
    #[error("relative throughput {0} is out of range (service-time takes 0..=100)")]
    WeightOutOfRange(u32),
    #[error("selector {0} needs per-path arguments that cannot be made up (e.g. a CPU mask)")]
    NeedsPathArgs(Selector),
    #[error(
        "path group {group} passes {expected} arguments to each path, but the new path has {got}"
    )]
    ArgsMismatch {
        group: usize,
        expected: usize,
        got: usize,
    },
    #[error("the arguments of path {0} are not in a form this selector understands")]
    UninterpretableArgs(DevNum),
}
