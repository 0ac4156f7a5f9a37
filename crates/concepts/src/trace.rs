//! The trace context an execution carries from its submit to every run, in any process.
//!
//! A submit stores the W3C `traceparent` of the span it was made in with the execution (in its
//! [`ExecutionMetadata`](crate::ExecutionMetadata)); every run of the execution starts a span
//! whose parent is that context, and a workflow's children carry the context of the run that
//! created them. The value is the W3C header's text (`00-<trace id>-<parent id>-<flags>`),
//! checked by [`TraceParent::parse`].
//!
//! Which span is "current" and how a span adopts a remote parent belong to a tracing system
//! (OpenTelemetry, through `tracing-opentelemetry`), which this crate does not know: a program
//! that exports traces installs a [`Propagation`] once, at start. Without one, nothing is
//! captured at submit and a run's span records the stored `traceparent` as a field only;
//! contexts given explicitly (the HTTP API's `traceparent` header) are still stored and passed
//! on to children.

use std::sync::OnceLock;

/// How the program's tracing system reads and sets W3C trace contexts.
pub trait Propagation: Send + Sync + 'static {
    /// The `traceparent` of the span the caller runs in, if that span belongs to a trace.
    fn current(&self) -> Option<TraceParent>;

    /// Makes `parent` the parent of `span`, which has not been entered yet.
    fn adopt(&self, span: &tracing::Span, parent: &TraceParent);
}

static INSTALLED: OnceLock<Box<dyn Propagation>> = OnceLock::new();

/// Installs the process's propagation; `false` when one was installed before (that one stays).
pub fn install(propagation: impl Propagation) -> bool {
    INSTALLED.set(Box::new(propagation)).is_ok()
}

/// The current span's context, when a propagation is installed and the span is in a trace.
#[must_use]
pub fn current() -> Option<TraceParent> {
    INSTALLED
        .get()
        .and_then(|propagation| propagation.current())
}

/// Makes the stored context `parent` the parent of a run's `span` (a no-op without an
/// installed propagation).
pub fn adopt(span: &tracing::Span, parent: &TraceParent) {
    if let Some(propagation) = INSTALLED.get() {
        propagation.adopt(span, parent);
    }
}

/// A W3C `traceparent` value of version `00`: a trace id, a parent span id and the flags.
#[derive(Debug, Clone, PartialEq, Eq, derive_more::Display)]
#[display("{_0}")]
pub struct TraceParent(String);

impl TraceParent {
    /// Checks `value` against the W3C Trace Context format of version `00` (lower-case hex,
    /// a trace id and a span id that are not all zeros); `None` when it does not match, which
    /// the recommendation says to treat as no context at all.
    #[must_use]
    pub fn parse(value: &str) -> Option<Self> {
        let mut parts = value.split('-');
        let (Some(version), Some(trace_id), Some(span_id), Some(flags), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return None;
        };
        let hex = |part: &str, len: usize| {
            part.len() == len && part.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        let zeros = |part: &str| part.bytes().all(|b| b == b'0');
        (version == "00"
            && hex(trace_id, 32)
            && !zeros(trace_id)
            && hex(span_id, 16)
            && !zeros(span_id)
            && hex(flags, 2))
        .then(|| Self(value.to_owned()))
    }

    /// The 32 hex digits of the trace id.
    #[must_use]
    pub fn trace_id(&self) -> &str {
        &self.0[3..35]
    }

    /// The 16 hex digits of the parent span id.
    #[must_use]
    pub fn span_id(&self) -> &str {
        &self.0[36..52]
    }

    /// The trace flags (bit 0: sampled).
    #[must_use]
    pub fn flags(&self) -> u8 {
        u8::from_str_radix(&self.0[53..55], 16).unwrap_or_default()
    }

    /// The header's text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::TraceParent;

    #[test]
    fn parse_accepts_the_w3c_format_and_nothing_else() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let parsed = TraceParent::parse(good).expect("the recommendation's example");
        assert_eq!(parsed.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(parsed.span_id(), "00f067aa0ba902b7");
        assert_eq!(parsed.flags(), 1);
        assert_eq!(parsed.to_string(), good);
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1z",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
    }
}
