//! OpenTelemetry for Stele: the propagation that makes every run of an execution a span of
//! the trace its submit was made in, and an OTLP exporter for `tracing` spans.
//!
//! [`W3cPropagation`] is the [`concepts::trace::Propagation`] of a program whose `tracing`
//! subscriber has a `tracing-opentelemetry` layer: at a submit it reads the current span's
//! context, which the store keeps with the execution as a W3C `traceparent`; when a run starts,
//! in this process or another, the run's span adopts that context as its remote parent; a
//! workflow's children take the context of the run that created them. Install it once:
//!
//! ```
//! assert!(otel::install_propagation());
//! assert!(!otel::install_propagation(), "the first one stays");
//! ```
//!
//! [`Otlp`] is the exporter `stele serve --otlp-endpoint` runs: spans batched on the SDK's own
//! thread and sent as OTLP protobuf over HTTP to `<endpoint>/v1/traces`. A program that
//! already exports traces keeps its own pipeline and installs the propagation alone.
//!
//! Nothing else of Stele depends on this crate: without it (the `stele` program built without
//! its `otel` feature) no OpenTelemetry code is compiled, and a run's span still records the
//! stored `traceparent` as a field.

use concepts::trace::{Propagation, TraceParent};
use opentelemetry::{
    Context,
    trace::TracerProvider as _,
    trace::{SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState},
};
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::{Resource, trace::SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Installs [`W3cPropagation`] as the process's propagation; `false` when one was installed
/// before.
pub fn install_propagation() -> bool {
    concepts::trace::install(W3cPropagation)
}

/// Trace contexts read from and given to the OpenTelemetry context of `tracing` spans.
#[derive(Debug, Clone, Copy, Default)]
pub struct W3cPropagation;

impl Propagation for W3cPropagation {
    fn current(&self) -> Option<TraceParent> {
        let context = tracing::Span::current().context();
        let span = context.span();
        let span = span.span_context();
        if !span.is_valid() {
            return None;
        }
        TraceParent::parse(&format!(
            "00-{}-{}-{:02x}",
            span.trace_id(),
            span.span_id(),
            span.trace_flags().to_u8()
        ))
    }

    fn adopt(&self, span: &tracing::Span, parent: &TraceParent) {
        let (Ok(trace_id), Ok(span_id)) = (
            TraceId::from_hex(parent.trace_id()),
            SpanId::from_hex(parent.span_id()),
        ) else {
            return;
        };
        let remote = SpanContext::new(
            trace_id,
            span_id,
            TraceFlags::new(parent.flags()),
            true,
            TraceState::default(),
        );
        // Fails only when the span is disabled or has no OpenTelemetry layer: nothing to link.
        let _ = span.set_parent(Context::new().with_remote_span_context(remote));
    }
}

/// Why the exporter could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot export traces to {endpoint}: {source}")]
pub struct OtlpError {
    endpoint: String,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

/// An OTLP trace exporter and the tracer provider that batches spans for it.
///
/// Build it, and shut it down, outside an async runtime: the blocking HTTP client it sends
/// with runs its own.
#[derive(Debug)]
pub struct Otlp {
    provider: SdkTracerProvider,
    endpoint: String,
}

impl Otlp {
    /// Spans of `service_name` sent to the collector at `endpoint` (its base URL, as
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` gives it: `http://localhost:4318`); the path
    /// `/v1/traces` is added.
    ///
    /// # Errors
    /// When the endpoint is not an HTTP URL or the client cannot be built.
    pub fn new(endpoint: &str, service_name: &str) -> Result<Self, OtlpError> {
        let error = |source: Box<dyn std::error::Error + Send + Sync>| OtlpError {
            endpoint: endpoint.to_owned(),
            source,
        };
        if !endpoint.starts_with("http://") {
            return Err(error(
                "the endpoint must be an http:// URL (this build sends plain HTTP, as to a \
                 collector on the same host or network)"
                    .into(),
            ));
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
            .build()
            .map_err(|err| error(Box::new(err)))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(
                Resource::builder()
                    .with_service_name(service_name.to_owned())
                    .build(),
            )
            .build();
        Ok(Self {
            provider,
            endpoint: endpoint.to_owned(),
        })
    }

    /// The `tracing` layer whose spans this exporter sends.
    #[must_use]
    pub fn layer<S>(&self) -> impl tracing_subscriber::Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    {
        tracing_opentelemetry::layer().with_tracer(self.provider.tracer("stele"))
    }

    /// Sends the spans still batched and stops the exporter.
    ///
    /// # Errors
    /// When the last batch could not be sent.
    pub fn shutdown(self) -> Result<(), OtlpError> {
        self.provider.shutdown().map_err(|err| OtlpError {
            endpoint: self.endpoint,
            source: Box::new(err),
        })
    }
}
