//! An order workflow on Stele: charge the card, ship every item in parallel, give the shipping
//! a deadline, and refund the payment when an item cannot ship in time.
//!
//! Run it with `cargo run --example order`. It opens a fresh SQLite database (the embedded,
//! durable default), starts a node (one executor for the workflow, one for the activities and
//! the timers watcher), submits three orders, and prints what happened to each, then the log
//! of the last. `cargo run --example order -- FILE` also writes the last order's history to
//! FILE, as `stele executions export` prints it: `order/history.json` is one, which the tests
//! in `order/tests.rs` replay through the code to check that a change of it still agrees with
//! executions in flight.

#![expect(clippy::print_stdout, reason = "an example prints what happened")]

use concepts::{ComponentId, DbConnection, ExecutionEventInner, ExecutionId, HistoryEvent};
use executor::Now;
use node::Node;
use serde::{Deserialize, Serialize};
use std::{sync::Arc, time::Duration};
use storage_sqlite::{SqliteConfig, SqlitePool};
use workflow::{
    ActivityCtx, Client, Function, RecordedHistory, Response, WorkflowCtx, WorkflowError,
};

// The functions, as typed handles: a name plus parameter and result types.
const CHARGE: Function<Charge, Payment> = Function::new("shop:payments/api.charge");
const REFUND: Function<Payment, ()> = Function::new("shop:payments/api.refund");
const SHIP: Function<String, Shipment> = Function::new("shop:shipping/api.ship");
const ORDER: Function<Order, Receipt> = Function::new("shop:orders/flows.order");

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Order {
    customer: String,
    amount_cents: u64,
    items: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Charge {
    customer: String,
    amount_cents: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Payment {
    payment_id: String,
    amount_cents: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Shipment {
    item: String,
    tracking: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Receipt {
    receipt_id: String,
    payment: Payment,
    shipments: Vec<Shipment>,
}

/// How long the shipping of an order may take before the order is refunded.
const SHIPPING_DEADLINE: Duration = Duration::from_secs(2);

// Activities: ordinary async functions, retried by the engine when they fail.

async fn charge(_ctx: ActivityCtx, charge: Charge) -> Result<Payment, String> {
    Ok(Payment {
        payment_id: format!("pay-{}-{}", charge.customer, charge.amount_cents),
        amount_cents: charge.amount_cents,
    })
}

async fn refund(_ctx: ActivityCtx, payment: Payment) -> Result<(), String> {
    println!(
        "  refunded {} cents ({})",
        payment.amount_cents, payment.payment_id
    );
    Ok(())
}

async fn ship(ctx: ActivityCtx, item: String) -> Result<Shipment, String> {
    match item.as_str() {
        "glass vase" => Err(format!(
            "the carrier refuses {item} (attempt {})",
            ctx.attempt + 1
        )),
        "piano" => {
            tokio::time::sleep(Duration::from_secs(4)).await; // longer than the deadline
            Ok(Shipment {
                item,
                tracking: "TRK-SLOW".to_string(),
            })
        }
        _ => Ok(Shipment {
            tracking: format!("TRK-{}", item.len()),
            item,
        }),
    }
}

// The workflow: ordinary async Rust. Every `ctx` operation is recorded in the execution's log
// and replayed from it after a crash; nothing else may be awaited here.

async fn order(ctx: WorkflowCtx, order: Order) -> Result<Receipt, WorkflowError<String>> {
    let charge = Charge {
        customer: order.customer.clone(),
        amount_cents: order.amount_cents,
    };
    let payment = ctx.call(&CHARGE, &charge).await?; // a failed charge fails the order

    // Ship every item in parallel, with one deadline for all: a join set of children and a delay.
    let shipping = ctx.join_set_named("shipping");
    for item in &order.items {
        shipping.submit(&SHIP, item);
    }
    shipping.submit_delay(SHIPPING_DEADLINE);
    let mut shipments = Vec::new();
    let mut problem = None;
    while shipments.len() < order.items.len() && problem.is_none() {
        match shipping.next().await {
            Some(Response::Child(child)) => match child.into_result::<Shipment>() {
                Ok(shipment) => shipments.push(shipment),
                Err(err) => problem = Some(format!("shipping failed: {err}")),
            },
            Some(Response::DelayFinished(_)) => problem = Some("shipping took too long".into()),
            None => break,
        }
    }
    if let Some(problem) = problem {
        // Compensate: the customer gets the money back. Shipments still on their way are
        // awaited when the workflow returns, so that no child outlives its parent unobserved.
        ctx.call(&REFUND, &payment).await?;
        return Err(WorkflowError::Failed(problem));
    }
    let receipt_id = ctx.uuid().await; // recorded: the same on every replay
    Ok(Receipt {
        receipt_id,
        payment,
        shipments,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("orders.db");
    let db: Arc<dyn DbConnection> = Arc::new(SqlitePool::open(SqliteConfig::new(&path)).await?);
    println!("database: {}", path.display());

    // The node: an executor for the workflow, one for the activities, and the timers watcher.
    let component = ComponentId::new("shop", "orders")?;
    let node = Node::builder(db.clone(), Now)
        .workflow(&ORDER, order)
        .child_settings(component.clone(), 2, Duration::from_millis(100))
        .activity(&CHARGE, charge)
        .activity(&REFUND, refund)
        .activity(&SHIP, ship)
        .start()?;

    // Beside the node's executors: an order is created locked by the workflow executor and
    // starts at once.
    let client = Client::new(db.clone(), Now, component)
        .with_local_executors(node.local_executors().clone());
    let orders = [
        ("ada", vec!["book", "lamp"]),
        ("bob", vec!["book", "glass vase"]),
        ("cyd", vec!["lamp", "piano"]),
    ];
    let mut last = None;
    for (customer, items) in orders {
        let items: Vec<String> = items.into_iter().map(String::from).collect();
        println!("order of {customer}: {}", items.join(", "));
        let params = Order {
            customer: customer.to_string(),
            amount_cents: 4_200,
            items,
        };
        let handle = client.submit(&ORDER, &params).await?;
        match handle.result_within(Duration::from_secs(30)).await {
            Ok(receipt) => println!("  shipped: {receipt:?}"),
            Err(err) => println!("  not shipped: {err}"),
        }
        last = Some(handle.execution_id().clone());
    }
    if let Some(id) = last {
        print_log(db.as_ref(), &id).await?;
        if let Some(file) = std::env::args().nth(1) {
            let history = RecordedHistory::read(db.as_ref(), &id).await?;
            std::fs::write(&file, serde_json::to_string_pretty(&history)? + "\n")?;
            println!("its history: {file}");
        }
    }

    node.shutdown(Duration::from_secs(5)).await;
    db.close().await;
    Ok(())
}

/// Prints the history of an order: every recorded step, and each response in arrival order.
async fn print_log(db: &dyn DbConnection, id: &ExecutionId) -> anyhow::Result<()> {
    let log = db.get(id).await?;
    println!("the log of {id}:");
    for (version, event) in log.events.iter().enumerate() {
        let text = match &event.event {
            ExecutionEventInner::HistoryEvent { event } => match event {
                HistoryEvent::JoinSetCreate { join_set_id, .. } => {
                    format!("open join set {join_set_id}")
                }
                HistoryEvent::JoinSetRequest { request, .. } => format!("request {request:?}"),
                HistoryEvent::JoinNext {
                    join_set_id,
                    closing,
                    ..
                } => {
                    format!(
                        "await {join_set_id}{}",
                        if *closing { " (closing)" } else { "" }
                    )
                }
                other => format!("{other:?}"),
            },
            ExecutionEventInner::Finished { result } => format!("finished: {result:?}"),
            other => other.variant_name().to_string(),
        };
        println!("  {version:>2} {text}");
    }
    for response in &log.responses {
        println!(
            "  response to {}: {:?}",
            response.event.join_set_id, response.event.event
        );
    }
    Ok(())
}

/// Replay checks of the recorded history `order/history.json`.
#[cfg(test)]
#[path = "order/tests.rs"]
mod tests;
