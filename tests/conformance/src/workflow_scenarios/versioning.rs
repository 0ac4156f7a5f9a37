//! W19 and W20: the code of a workflow changed while its executions are in flight
//! (`WorkflowCtx::patched`, `deprecate_patch`; `docs/SEMANTICS.md` §16), and the per-call
//! options, typed join sets and status of a workflow.

use super::fixture::{DOUBLE, Fixture, SAFETY, is_blocked};
use crate::StoreFactory;
use concepts::{ExecutionEventInner, ExecutionId};
use std::{sync::Arc, time::Duration};
use workflow::{
    ChildOptions, ClientError, Function, FunctionFailure, NondeterminismPolicy, WorkflowCtx,
    WorkflowError,
};

type Result<T> = std::result::Result<T, WorkflowError<String>>;

const CHANGES: Function<u64, u64> = Function::new("test:workflow/versions.changes");

/// Version 1: doubles, then sleeps an hour.
async fn changes_v1(ctx: WorkflowCtx, n: u64) -> Result<u64> {
    let doubled = ctx.call(&DOUBLE, &n).await?;
    ctx.sleep(Duration::from_secs(3600)).await;
    Ok(doubled)
}

/// Version 2: new executions quadruple; those recorded by version 1 keep doubling.
async fn changes_v2(ctx: WorkflowCtx, n: u64) -> Result<u64> {
    let result = if ctx.patched("quadruple").await {
        let doubled = ctx.call(&DOUBLE, &n).await?;
        ctx.call(&DOUBLE, &doubled).await?
    } else {
        ctx.call(&DOUBLE, &n).await?
    };
    ctx.sleep(Duration::from_secs(3600)).await;
    Ok(result)
}

/// Version 3: the patch retired, once no execution of version 1 is left.
async fn changes_v3(ctx: WorkflowCtx, n: u64) -> Result<u64> {
    ctx.deprecate_patch("quadruple").await;
    let doubled = ctx.call(&DOUBLE, &n).await?;
    let result = ctx.call(&DOUBLE, &doubled).await?;
    ctx.sleep(Duration::from_secs(3600)).await;
    Ok(result)
}

/// The line of `changes_removed`' first call, which its divergence names.
const REMOVED_CALL_AT: u32 = line!() + 4;

/// Version 3 without its `deprecate_patch`: the patch removed while logs still hold it.
async fn changes_removed(ctx: WorkflowCtx, n: u64) -> Result<u64> {
    let doubled = ctx.call(&DOUBLE, &n).await?;
    let result = ctx.call(&DOUBLE, &doubled).await?;
    ctx.sleep(Duration::from_secs(3600)).await;
    Ok(result)
}

/// Runs `workflow` as the only workflow of the fixture, under `policy`.
fn deploy<Fut>(f: &mut Fixture, workflow: fn(WorkflowCtx, u64) -> Fut, policy: NondeterminismPolicy)
where
    Fut: std::future::Future<Output = Result<u64>> + Send + 'static,
{
    let worker = f
        .workflows()
        .nondeterminism_policy(policy)
        .register(&CHANGES, workflow)
        .expect("register");
    f.spawn(Arc::new(worker));
}

/// Submits `n` and waits until its sleep is requested.
async fn sleeping(f: &Fixture, n: u64) -> ExecutionId {
    let handle = f.client().submit(&CHANGES, &n).await.expect("submit");
    let id = handle.execution_id().clone();
    let sleeps = |log: &concepts::ExecutionLog| {
        log.events.iter().any(|event| {
            matches!(
                &event.event,
                ExecutionEventInner::HistoryEvent {
                    event: concepts::HistoryEvent::JoinSetRequest {
                        request: concepts::JoinSetRequest::DelayRequest { .. },
                        ..
                    },
                }
            )
        })
    };
    f.until("the sleep is requested", &id, |log| {
        is_blocked(log) && sleeps(log)
    })
    .await;
    id
}

/// Wakes every sleep and waits for `id`'s result.
async fn result_of(f: &Fixture, id: &ExecutionId) -> std::result::Result<u64, ClientError> {
    f.clock.move_time_forward(Duration::from_secs(3600)).await;
    f.fire_timers().await;
    f.client()
        .handle::<u64>(id.clone())
        .result_within(SAFETY)
        .await
}

/// W19: an execution recorded by version 1 and suspended in its durable sleep finishes under
/// version 2 with version 1's result (its log holds no marker where the patch is: `false`),
/// while a new execution under version 2 records the marker and takes the new branch; version
/// 3, which retires the patch (`deprecate_patch`), replays version 2's executions; the patch
/// removed while a log holds its marker is nondeterminism naming the marker and the call,
/// parked under the default policy and finished under `Fail`.
pub async fn w19_a_patch_changes_the_code_with_executions_in_flight<F: StoreFactory>(factory: &F) {
    let mut f = Fixture::new(factory).await;
    deploy(&mut f, changes_v1, NondeterminismPolicy::Park);
    let old = sleeping(&f, 5).await;
    f.stop_last().await;

    deploy(&mut f, changes_v2, NondeterminismPolicy::Park);
    assert_eq!(
        result_of(&f, &old).await.expect("old finishes"),
        10,
        "version 1's branch"
    );
    let new = sleeping(&f, 5).await;
    let log = f.log(&new).await;
    let marker = log.events.iter().any(|event| {
        matches!(&event.event, ExecutionEventInner::HistoryEvent {
            event: concepts::HistoryEvent::Persist { kind: concepts::PersistKind::Patch(id), .. },
        } if id == "quadruple")
    });
    assert!(marker, "a new execution records the marker");
    assert_eq!(
        result_of(&f, &new).await.expect("new finishes"),
        20,
        "the new branch"
    );

    // Version 3 retires the patch: an execution of version 2 in flight still replays.
    let in_flight = sleeping(&f, 3).await;
    f.stop_last().await;
    deploy(&mut f, changes_v3, NondeterminismPolicy::Park);
    assert_eq!(result_of(&f, &in_flight).await.expect("replays"), 12);
    f.close().await;

    // The patch removed while a log holds its marker: nondeterminism.
    let mut f = Fixture::new(factory).await;
    deploy(&mut f, changes_v2, NondeterminismPolicy::Park);
    let in_flight = sleeping(&f, 7).await;
    f.stop_last().await;
    deploy(&mut f, changes_removed, NondeterminismPolicy::Fail);
    match result_of(&f, &in_flight).await {
        Err(ClientError::Failed {
            failure:
                FunctionFailure::Failed(concepts::FinishedExecutionError::PermanentFailure {
                    reason_full,
                    ..
                }),
            ..
        }) => assert!(
            reason_full.contains(&format!(
                "the log holds the marker of patch \"quadruple\", the code opened join set \
                 o:1-double (at {}:{REMOVED_CALL_AT}:23)",
                file!()
            )),
            "{reason_full}"
        ),
        other => panic!("nondeterminism: {other:?}"),
    }
    f.close().await;
}

const FANS: Function<u64, Vec<u64>> = Function::new("test:workflow/versions.fans");

/// A typed join set of `n` DOUBLE children, one with its own retries, and a status per step.
async fn fans(ctx: WorkflowCtx, n: u64) -> std::result::Result<Vec<u64>, WorkflowError<String>> {
    ctx.set_status(&"submitting").await;
    let doubles = ctx.join_set_of(DOUBLE);
    for k in 1..n {
        doubles.submit(&k);
    }
    doubles.submit_with(
        &n,
        ChildOptions::new().retries(7, Duration::from_millis(250)),
    );
    ctx.set_status(&serde_json::json!({ "awaiting": n })).await;
    let mut results = Vec::new();
    while let Some(result) = doubles.next().await {
        results.push(result?);
    }
    results.sort_unstable();
    ctx.set_status(&"done").await;
    Ok(results)
}

/// W20: a typed join set answers its function's result type; a child submitted with per-call
/// options is created with them, the others with the worker's settings; the status a workflow
/// sets is recorded, and the last one is the execution's status.
pub async fn w20_typed_joins_per_call_options_and_status<F: StoreFactory>(factory: &F) {
    let mut f = Fixture::new(factory).await;
    let worker = f.workflows().register(&FANS, fans).expect("register");
    f.spawn(Arc::new(worker));
    let handle = f.client().submit(&FANS, &3).await.expect("submit");
    assert_eq!(
        handle.result_within(SAFETY).await.expect("result"),
        [2, 4, 6]
    );
    let log = f.log(handle.execution_id()).await;
    assert_eq!(
        log.status(),
        Some(&concepts::Json(serde_json::json!("done")))
    );
    let children = concepts::DbClientExt::list_all_executions(
        f.db.as_ref(),
        concepts::ListExecutionsFilter {
            parent: Some(handle.execution_id().clone()),
            ..concepts::ListExecutionsFilter::default()
        },
    )
    .await
    .expect("children");
    let mut retries = Vec::new();
    for child in children {
        let log = f.log(&child.execution_id).await;
        if let Some(concepts::Created {
            max_retries,
            retry_exp_backoff,
            params,
            ..
        }) = log.events.first().and_then(|event| event.event.created())
        {
            retries.push((params.0.clone(), *max_retries, *retry_exp_backoff));
        }
    }
    retries.sort_by_key(|(params, ..)| params.as_u64());
    assert_eq!(
        retries,
        [
            (serde_json::json!(1), 0, Duration::from_secs(1)),
            (serde_json::json!(2), 0, Duration::from_secs(1)),
            (serde_json::json!(3), 7, Duration::from_millis(250)),
        ],
        "the worker's child settings, and the per-call options"
    );
    f.close().await;
}
