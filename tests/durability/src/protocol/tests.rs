//! Unit tests of the node's output protocol: every line reads back as printed.

use super::*;
use crate::{ID_MS, execution_id};

#[test]
fn every_line_reads_back_as_printed() {
    let executor_id = ExecutorId::from_parts(ID_MS, 42);
    let lines = [
        Line::Submitting(3000),
        Line::Submitted(3000),
        Line::Resumed(3000),
        Line::Awaiting(5000),
        Line::Executor(executor_id),
        Line::Locked(16),
        Line::Waiting {
            start: 1_700_000_000_123,
        },
        Line::Waited {
            start: 1_700_000_000_123,
            end: 1_700_000_000_456,
            early: true,
        },
        Line::Waited {
            start: 1,
            end: 2,
            early: false,
        },
        Line::Finished(execution_id(7)),
        Line::Progress {
            finished: 10,
            total: 3000,
        },
        Line::Summary(serde_json::json!({"finished": 3000, "role": "both"})),
    ];
    for line in lines {
        let printed = line.to_string();
        assert_eq!(Line::parse(&printed), Ok(line), "{printed}");
    }
    assert_eq!(
        Line::Progress {
            finished: 1,
            total: 2
        }
        .to_string(),
        "progress 1/2"
    );
    assert_eq!(
        Line::Waited {
            start: 1,
            end: 2,
            early: false
        }
        .to_string(),
        "waited 1 2 timeout"
    );
}

#[test]
fn lines_the_node_does_not_print_are_refused() {
    for bad in [
        "",
        "hello",
        "submitting",
        "submitting many",
        "progress 1",
        "progress 1/x",
        "waited 1 2 soon",
        "finished nope",
        "executor nope",
        "{not json",
        "locked 1 2",
    ] {
        let err = Line::parse(bad).unwrap_err();
        assert!(err.contains(&format!("`{bad}`")), "{bad}: {err}");
    }
}
