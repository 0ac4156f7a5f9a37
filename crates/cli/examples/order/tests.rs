//! Replay checks: the recorded history of an order (`history.json`, written by
//! `cargo run --example order -- crates/cli/examples/order/history.json`) replayed through the
//! example's code, without a store; run by `cargo test -p cli --example order`.

use super::*;
use workflow::{ReplayError, Replayer};

fn recorded() -> RecordedHistory {
    serde_json::from_str(include_str!("history.json")).expect("a recorded history")
}

#[test]
fn the_recorded_order_replays_through_the_code() {
    let replayer = Replayer::new().register(&ORDER, order).unwrap();
    replayer
        .replay(&recorded())
        .expect("the code agrees with its log");
}

/// A change that ships the items in another order: executions in flight would diverge.
async fn ships_in_reverse(
    ctx: WorkflowCtx,
    mut order: Order,
) -> Result<Receipt, WorkflowError<String>> {
    order.items.reverse();
    super::order(ctx, order).await
}

#[test]
fn a_change_of_the_shipping_is_named_with_its_event_and_call_site() {
    let replayer = Replayer::new().register(&ORDER, ships_in_reverse).unwrap();
    let Err(ReplayError::Nondeterminism {
        version,
        reason,
        at,
        ..
    }) = replayer.replay(&recorded())
    else {
        panic!("reordered shipping diverges");
    };
    let source = include_str!("../order.rs");
    let line = (source
        .lines()
        .position(|line| line.contains("shipping.submit(&SHIP, item)")))
    .expect("the submit of a shipment")
        + 1;
    let at = at.expect("a call site");
    let file = file!().replace("order/tests.rs", "order.rs");
    assert!(at.starts_with(&format!("{file}:{line}:")), "{at}");
    assert_eq!(version, Some(concepts::Version(6)), "{reason}");
    assert!(
        reason.contains("of shop:shipping/api.ship with parameters \"lamp\", the code called shop:shipping/api.ship with parameters \"piano\""),
        "{reason}"
    );
}
