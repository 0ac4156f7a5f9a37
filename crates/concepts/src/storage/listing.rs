//! The listing of executions: its filter, the terms a backend's query is built from, its
//! pages and its rows.

use crate::{ExecutionId, FunctionFqn, PendingState, PendingStateKind, Version};
use chrono::{DateTime, Utc};

/// One row of `list_executions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionSummary {
    /// The execution.
    pub execution_id: ExecutionId,
    /// The function.
    pub ffqn: FunctionFqn,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was first scheduled.
    pub scheduled_at: DateTime<Utc>,
    /// The current pending state.
    pub pending_state: PendingState,
    /// The version the next append must carry.
    pub next_version: Version,
}

/// Filters of `list_executions`, all of which an execution must pass; `None` (and `false`)
/// lets everything through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListExecutionsFilter {
    /// Only this function.
    pub ffqn: Option<FunctionFqn>,
    /// Only executions in this state.
    pub state: Option<PendingStateKind>,
    /// Only top-level executions.
    pub top_level_only: bool,
    /// Only the children of this execution (not their own children).
    pub parent: Option<ExecutionId>,
    /// Only executions created after this time (not at it).
    pub created_after: Option<DateTime<Utc>>,
    /// Only executions created before this time (not at it).
    pub created_before: Option<DateTime<Utc>>,
    /// Only executions whose id starts with this text.
    pub id_prefix: Option<String>,
    /// Only executions pending at this time or later (`PendingAt`, due then or after; to the
    /// microsecond): the parked ones are those pending from [`crate::PARKED_UNTIL`].
    pub pending_from: Option<DateTime<Utc>>,
}

impl ListExecutionsFilter {
    /// True when an execution with these properties passes every filter: the reference a
    /// backend's query must agree with.
    #[must_use]
    pub fn matches(
        &self,
        execution_id: &ExecutionId,
        ffqn: &FunctionFqn,
        state: &PendingState,
        created_at: DateTime<Utc>,
    ) -> bool {
        // Destructured: a filter added here must be applied here.
        let Self {
            ffqn: only_ffqn,
            state: only_state,
            top_level_only,
            parent,
            created_after,
            created_before,
            id_prefix,
            pending_from,
        } = self;
        only_ffqn.as_ref().is_none_or(|f| f == ffqn)
            && only_state.is_none_or(|s| s == state.kind())
            && pending_from.is_none_or(|from| state.pending_at().is_some_and(|at| at >= from))
            && (!top_level_only || execution_id.is_top_level())
            && parent.as_ref().is_none_or(|parent| {
                execution_id
                    .split_to_parent()
                    .is_some_and(|(of, _)| of == *parent)
            })
            && created_after.is_none_or(|after| created_at > after)
            && created_before.is_none_or(|before| created_at < before)
            && (id_prefix.as_deref()).is_none_or(|prefix| execution_id.as_str().starts_with(prefix))
    }

    /// The ids that [`ListExecutionsFilter::id_prefix`] lets through, as a half-open range in
    /// byte order (`high` is `None` when no id can follow the prefix's range).
    #[must_use]
    pub fn id_range(&self) -> Option<(String, Option<String>)> {
        let prefix = self.id_prefix.as_ref()?;
        let mut high = prefix.clone().into_bytes();
        while let Some(last) = high.pop() {
            if last < u8::MAX {
                high.push(last + 1);
                return Some((prefix.clone(), String::from_utf8(high).ok()));
            }
        }
        Some((prefix.clone(), None))
    }

    /// The conditions of a listing's statement for this filter, after `cursor`: only the ones
    /// given, so that a SQL backend's statement holds only them and its plan reads the index
    /// they name.
    #[must_use]
    pub fn terms<'a>(
        &'a self,
        cursor: Option<&'a (DateTime<Utc>, ExecutionId)>,
    ) -> Vec<ListTerm<'a>> {
        // Destructured: a filter added here must be given a term.
        let Self {
            ffqn,
            state,
            top_level_only,
            parent,
            created_after,
            created_before,
            id_prefix: _,
            pending_from,
        } = self;
        let mut terms: Vec<_> = ffqn.iter().map(ListTerm::Function).collect();
        // A time a pending execution is due from names its state too, for the partial index
        // of pending executions; without the condition of the index of unfinished executions,
        // which would read every pending execution by creation instead.
        let state = state.or(pending_from.map(|_| PendingStateKind::PendingAt));
        if let Some(kind) = state {
            terms.push(ListTerm::State(kind));
            if kind != PendingStateKind::Finished && pending_from.is_none() {
                terms.push(ListTerm::Unfinished);
            }
        }
        terms.extend(pending_from.map(ListTerm::PendingFrom));
        terms.extend(top_level_only.then_some(ListTerm::TopLevel));
        terms.extend(parent.iter().map(ListTerm::Parent));
        terms.extend(created_after.map(ListTerm::CreatedAfter));
        terms.extend(created_before.map(ListTerm::CreatedBefore));
        if let Some((low, high)) = self.id_range() {
            terms.push(ListTerm::IdFrom(low));
            terms.extend(high.map(ListTerm::IdBelow));
        }
        terms.extend(cursor.map(|(at, id)| ListTerm::Before(*at, id)));
        terms
    }
}

/// One condition of a listing's statement ([`ListExecutionsFilter::terms`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListTerm<'a> {
    /// The function is this one.
    Function(&'a FunctionFqn),
    /// The state is of this kind.
    State(PendingStateKind),
    /// The state is not `Finished`: beside the `State` of another kind, it repeats the
    /// condition of a partial index of unfinished executions, which a planner uses only for a
    /// statement that names it.
    Unfinished,
    /// The execution is top-level.
    TopLevel,
    /// The execution is a child of this one.
    Parent(&'a ExecutionId),
    /// Created after this time.
    CreatedAfter(DateTime<Utc>),
    /// Created before this time.
    CreatedBefore(DateTime<Utc>),
    /// Pending at this time or later (to the microsecond).
    PendingFrom(DateTime<Utc>),
    /// The id is this text or after it, in byte order.
    IdFrom(String),
    /// The id is before this text, in byte order.
    IdBelow(String),
    /// `(created_at, execution_id)` is before this pair: the page after a cursor.
    Before(DateTime<Utc>, &'a ExecutionId),
}

/// Pagination of `list_executions`: newest first (by creation time, then execution id,
/// descending), starting after `cursor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pagination {
    /// The last row of the previous page, as `(created_at, execution_id)`.
    pub cursor: Option<(DateTime<Utc>, ExecutionId)>,
    /// How many rows at most.
    pub length: usize,
}

impl Default for Pagination {
    fn default() -> Self {
        Self {
            cursor: None,
            length: 100,
        }
    }
}
