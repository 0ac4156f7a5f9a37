//! `append_response`: a response stored beside the log of the execution that receives it (a
//! durable sleep that fired; a child's result is stored by the child's outcome). A second
//! response for the same delay, or from the same child, is a duplicate.

use crate::{
    DbError, ExecutionId, JoinSetResponseEvent,
    kernel::{Keys, Planner, Write, write::sealed::Sealed},
};
use chrono::{DateTime, Utc};

/// `append_response`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendResponse {
    /// When it arrives.
    pub now: DateTime<Utc>,
    /// The execution that receives it.
    pub execution_id: ExecutionId,
    /// The response.
    pub response: JoinSetResponseEvent,
}

impl Sealed for AppendResponse {}

impl Write for AppendResponse {
    type Reply = ();

    fn keys(&self) -> Result<Keys, DbError> {
        let mut keys = Keys::default();
        keys.executions.push(self.execution_id.clone());
        keys.add_response(&self.execution_id, &self.response);
        Ok(keys)
    }

    fn plan(self, planner: &mut Planner<'_>) -> Result<(), DbError> {
        planner.changes.reserve_exact(1);
        planner.respond(self.now, &self.execution_id, self.response)
    }
}
