//! Tests of the events' stored form.

use super::*;

#[test]
fn a_created_event_keeps_the_stored_form_earlier_versions_wrote() {
    // Written by a store before `Created` was boxed: the same JSON decodes, and encodes back
    // to the same text, so stored logs read as they did.
    let stored = r#"{"created_at":"2026-12-06T02:19:30.639009Z","event":{"Created":{"ffqn":"bench:workflow/activities.noop","params":0,"parent":["E_01M94JCDEDWTQ6VVMXSP4SFER8","o:1-noop"],"scheduled_at":"2026-12-06T02:19:30.639009Z","retry_exp_backoff":100000,"max_retries":3,"component_id":"bench:workflow","metadata":{},"scheduled_by":null}}}"#;
    let event: ExecutionEvent = serde_json::from_str(stored).expect("decodes");
    let created = event.event.created().expect("a `Created` event");
    assert_eq!(created.max_retries, 3);
    assert_eq!(created.retry_exp_backoff, Duration::from_millis(100));
    assert_eq!(serde_json::to_string(&event).expect("encodes"), stored);
}
