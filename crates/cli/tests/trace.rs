//! Traces follow an execution across processes (built with the `otel` feature): a submit made
//! inside a span of this test's process is run by `stele serve`, another process, on the same
//! SQLite file, which exports its spans over OTLP to a collector this test serves; the
//! workflow's run is a child of the submit's span, its children's runs are children of the
//! workflow's run, and all of them carry the submit's trace id.

use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use opentelemetry_proto::tonic::{
    collector::trace::v1::ExportTraceServiceRequest, common::v1::any_value, trace::v1::Span,
};
use prost::Message as _;
use std::{
    process::Command,
    sync::{Arc, Mutex},
    time::Duration,
};
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;

const SAFETY: Duration = Duration::from_secs(120);
const FANOUT: &str = "stele:demo/workflows.fanout";

fn stele(args: &[&str]) -> Command {
    test_support::process::clean_command(env!("CARGO_BIN_EXE_stele"), args)
}

/// The spans of every export request the collector received.
fn spans(bodies: &[Vec<u8>]) -> Vec<Span> {
    bodies
        .iter()
        .flat_map(|body| {
            ExportTraceServiceRequest::decode(body.as_slice())
                .expect("an OTLP protobuf export request")
                .resource_spans
        })
        .flat_map(|resource| resource.scope_spans)
        .flat_map(|scope| scope.spans)
        .collect()
}

fn attribute<'span>(span: &'span Span, key: &str) -> Option<&'span str> {
    span.attributes.iter().find_map(|kv| {
        (kv.key == key)
            .then(|| kv.value.as_ref()?.value.as_ref())
            .flatten()
            .and_then(|value| match value {
                any_value::Value::StringValue(text) => Some(text.as_str()),
                _ => None,
            })
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[test]
fn a_run_in_another_process_and_its_children_join_the_trace_of_the_submit() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // The collector: every body posted to /v1/traces, kept.
    let received: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let collector = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post({
            let received = Arc::clone(&received);
            move |body: axum::body::Bytes| async move {
                received.lock().unwrap().push(body.to_vec());
                axum::http::StatusCode::OK
            }
        }),
    );
    runtime.spawn(async move { axum::serve(listener, app).await });

    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join("traced.db");
    let db = db_path.to_str().unwrap();
    let (mut serve, lines, first) = test_support::process::start_reading_stderr(
        stele(&["--db", db, "serve", "--otlp-endpoint", &collector]),
        SAFETY,
    );
    assert!(first.starts_with("serving "), "{first}");

    // This process traces too (no exporter: only the ids matter), and submits inside a span.
    assert!(otel::install_propagation());
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    let _default = tracing::subscriber::set_default(subscriber);
    let checkout = tracing::info_span!("checkout");
    let submit_context = checkout.context().span().span_context().clone();
    assert!(submit_context.is_valid());
    let execution_id = runtime.block_on(
        async {
            let store =
                storage_sqlite::SqlitePool::open(storage_sqlite::SqliteConfig::new(&db_path))
                    .await
                    .expect("open the database serve created");
            let functions = cli::workload::DemoFunctions::new();
            let submission = node::Submission {
                ffqn: FANOUT.parse().unwrap(),
                params: serde_json::json!({"children": 2, "fail_probability": 0, "work_ms": 10}),
                execution_id: None,
                metadata: concepts::ExecutionMetadata::default(),
            };
            let submitted = node::submit(
                &store,
                &cli::workload::catalog(&functions),
                &executor::Now,
                submission,
            )
            .await
            .expect("submitted");
            concepts::DbConnection::close(&store).await;
            submitted.execution_id().clone()
        }
        .instrument(checkout),
    );

    let wait = stele(&[
        "--db",
        db,
        "executions",
        "wait",
        &execution_id.to_string(),
        "--timeout",
        "60s",
    ])
    .output()
    .expect("run stele executions wait");
    assert!(
        wait.status.success(),
        "{}",
        String::from_utf8_lossy(&wait.stderr)
    );
    // Stopped, serve sends the spans it still holds before it exits.
    let status = Command::new("kill")
        .args(["-TERM", &serve.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    while lines.recv_timeout(SAFETY).is_ok() {}
    assert_eq!(serve.wait().unwrap().code(), Some(130));

    let spans = spans(&received.lock().unwrap());
    let id = execution_id.to_string();
    let trace_id = submit_context.trace_id().to_string();
    let runs_of = |wanted: &dyn Fn(&str) -> bool| -> Vec<&Span> {
        spans
            .iter()
            .filter(|span| attribute(span, "execution_id").is_some_and(wanted))
            .collect()
    };
    let parent_runs = runs_of(&|execution| execution == id);
    assert!(
        !parent_runs.is_empty(),
        "no run of {id} among {} spans",
        spans.len()
    );
    for run in &parent_runs {
        assert_eq!(run.name, FANOUT);
        assert_eq!(hex(&run.trace_id), trace_id, "the workflow's run");
        assert_eq!(
            hex(&run.parent_span_id),
            submit_context.span_id().to_string(),
            "the workflow's run is a child of the submit's span"
        );
    }
    let child_prefix = format!("{id}.");
    let child_runs = runs_of(&|execution| execution.starts_with(&child_prefix));
    let children: std::collections::BTreeSet<&str> = child_runs
        .iter()
        .filter_map(|run| attribute(run, "execution_id"))
        .collect();
    assert_eq!(children.len(), 2, "a run of each child: {children:?}");
    for run in &child_runs {
        assert_eq!(hex(&run.trace_id), trace_id, "a child's run");
        assert!(
            parent_runs
                .iter()
                .any(|parent| parent.span_id == run.parent_span_id),
            "a child's run is a child of one of the workflow's runs"
        );
    }
}
