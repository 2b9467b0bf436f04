//! What can go wrong with a replication task, typed: the HTTP layer maps each to its
//! status and code in one place (`http/errors.rs`, `From<ReplicationError> for AppError`);
//! replication itself knows no HTTP status.

use tsblob_storage::NameError;

use super::MAX_TASKS;
use crate::blocking::TaskFailed;
use crate::when::WhenError;

#[derive(Debug, thiserror::Error)]
pub enum ReplicationError {
    /// Settings that cannot be stored, and why (answered 422 `invalid_replication`).
    #[error("{0}")]
    Invalid(String),
    /// A new task past [`MAX_TASKS`] (answered 409 `too_many_tasks`).
    #[error("this server already has {MAX_TASKS} replication tasks, its limit: remove one first")]
    TooManyTasks,
    /// No task of this name (answered 404 `replication_not_found`).
    #[error("there is no replication task {0:?}: list them with GET /api/v1/replications")]
    NotFound(String),
    /// The task's `when` does not parse.
    #[error(transparent)]
    When(#[from] WhenError),
    /// The engine's error (a source bucket that does not exist, a record gone, ...).
    #[error(transparent)]
    Storage(#[from] tsblob_storage::Error),
    /// The task file could not be written (a full disk: 507 `disk_full`).
    #[error(transparent)]
    NotWritten(#[from] crate::private_file::NotWritten),
    /// A failure of the server's own (the HTTP client, a blocking task).
    #[error("{0}")]
    Internal(String),
}

impl From<NameError> for ReplicationError {
    fn from(e: NameError) -> ReplicationError {
        ReplicationError::Storage(tsblob_storage::Error::Name(e))
    }
}

impl From<TaskFailed> for ReplicationError {
    fn from(e: TaskFailed) -> ReplicationError {
        ReplicationError::Internal(e.to_string())
    }
}

/// How an error reads in a task's status (`last_error`) and in the log: given by the
/// server when it assembles the tasks, as the message a client would get for it, so a
/// status never shows what an error answer hides (an engine failure's paths are logged
/// under a reference instead).
pub type Explain = fn(ReplicationError) -> String;
