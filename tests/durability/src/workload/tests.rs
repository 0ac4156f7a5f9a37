//! Unit tests of the workload's ids and requests.

use super::*;

#[test]
fn execution_ids_depend_on_the_index_only() {
    assert_eq!(execution_id(7), execution_id(7));
    assert_ne!(execution_id(7), execution_id(8));
    assert!(execution_id(0).is_top_level());
}

#[test]
fn requests_carry_their_index() {
    let workload = Workload::new().unwrap();
    let now = chrono::DateTime::UNIX_EPOCH;
    let request = workload.request(4, now, Duration::from_millis(10), 3);
    assert_eq!(request.execution_id, execution_id(4));
    assert_eq!(request.params, Json(serde_json::json!([4])));
    assert_eq!(request.ffqn.to_string(), FFQN);
    assert_eq!(request.scheduled_at, now);
    assert_eq!(request.max_retries, 3);
}
