//! What the watcher records of the leases it resolves, per function (names in
//! `concepts::metrics`, the table in `docs/METRICS.md`): each such attempt as
//! `result="lease_expired"`, a retry it schedules as a retry, an execution it finishes (a
//! permanent timeout) as finished with `outcome="timeout"`. A few functions per write, so the
//! handles are looked up per write, not kept.

use concepts::{FunctionFqn, ResultKind, metrics as m};

/// The leases one write resolved, per function: how many were retried and finished.
#[derive(Debug, Default)]
pub(crate) struct Expired(Vec<(FunctionFqn, u64, u64)>);

impl Expired {
    /// A lease of `function` resolved: the execution finished, or a retry was scheduled.
    pub(crate) fn add(&mut self, function: &FunctionFqn, finished: bool) {
        if !m::enabled() {
            return;
        }
        let index = match self.0.iter().position(|(known, ..)| known == function) {
            Some(index) => index,
            None => {
                self.0.push((function.clone(), 0, 0));
                self.0.len() - 1
            }
        };
        let entry = &mut self.0[index];
        if finished {
            entry.2 += 1;
        } else {
            entry.1 += 1;
        }
    }

    /// Adds them to the counters.
    pub(crate) fn record(self) {
        for (function, retried, finished) in self.0 {
            let function = function.to_string();
            let attempts = retried + finished;
            metrics::counter!(m::ATTEMPTS, m::FUNCTION => function.clone(), m::RESULT => "lease_expired")
                .increment(attempts);
            if retried > 0 {
                metrics::counter!(m::RETRIES, m::FUNCTION => function.clone()).increment(retried);
            }
            if finished > 0 {
                let outcome = ResultKind::Timeout.name();
                metrics::counter!(m::EXECUTIONS_FINISHED, m::FUNCTION => function, m::OUTCOME => outcome)
                    .increment(finished);
            }
        }
    }
}
