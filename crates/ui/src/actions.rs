//! The actions: cancel an execution (and its unfinished descendants) with a reason, complete
//! a durable promise with a JSON value. Each is a form behind a confirmation (it opens
//! first, then its button confirms), a `POST` that carries the page's form token and, when
//! the browser names one, this server's origin; each is answered with the sentence the
//! `stele` command prints. A read-only node shows neither and refuses both.

use crate::{Shared, Ui, extract::Form, layout, pages::execution};
use axum::{
    extract::Path,
    http::{HeaderMap, StatusCode, header},
    response::{Html, IntoResponse, Response},
};
use concepts::{
    CancelOutcome, CancelRequest, ClockFn, CompleteRequest, ExecutionId, FunctionFqn, Json,
    SupportedFunctionReturnValue,
};
use maud::{Markup, html};
use serde::Deserialize;
use server::{
    ApiError,
    types::{ExecutionView, StateData, SummaryView},
    views,
};

/// What a cancel from the UI records unless a reason is given.
const DEFAULT_REASON: &str = "cancelled from the web UI";

/// The header the script sets to be answered with the sentence alone.
pub(crate) const IN_PLACE: &str = "x-stele-in-place";

/// True for a durable promise: a child of a stub function, completed from outside.
pub(crate) fn is_promise(function: &str) -> bool {
    function
        .parse::<FunctionFqn>()
        .is_ok_and(|ffqn| ffqn.is_stub())
}

fn unfinished(state: &StateData) -> bool {
    !matches!(state, StateData::Finished { .. })
}

fn complete_form(form_token: &str, id: &str, label: &str) -> Markup {
    html! {
        details.action {
            summary { "Complete " (label) "…" }
            form method="post" action={ "/executions/" (layout::url_encode(id)) "/complete" } data-action {
                input type="hidden" name="form_token" value=(form_token);
                label { "Value (JSON) " textarea name="value" rows="2" required { "true" } }
                p.warn { "Completes the promise " code { (id) } " with this value and answers its workflow; a promise is completed once." }
                button.confirm type="submit" { "Confirm: complete" }
            }
        }
    }
}

/// The forms of `view`'s page: cancel while it is unfinished, complete when it is a promise
/// or while it awaits promises among `children`; nothing on a read-only node.
pub(crate) fn forms<C: ClockFn>(
    ui: &Ui<C>,
    view: &ExecutionView,
    children: &[SummaryView],
) -> Markup {
    if ui.read_only || !unfinished(&view.state.data) {
        return html! {};
    }
    let id = layout::url_encode(&view.id);
    let promises: Vec<&SummaryView> = children
        .iter()
        .filter(|child| is_promise(&child.function) && unfinished(&child.state.data))
        .collect();
    html! {
        section.actions {
            h2 { "Actions" }
            details.action {
                summary { "Cancel…" }
                form method="post" action={ "/executions/" (id) "/cancel" } data-action {
                    input type="hidden" name="form_token" value=(ui.form_token);
                    label { "Reason " input name="reason" value=(DEFAULT_REASON) size="40"; }
                    p.warn { "Cancels " code { (view.id) } " and every unfinished execution below it. It cannot be undone." }
                    button.confirm.danger type="submit" { "Confirm: cancel" }
                }
            }
            @if is_promise(&view.function) { (complete_form(&ui.form_token, &view.id, "this promise")) }
            @for promise in promises { (complete_form(&ui.form_token, &promise.id, promise.id.rsplit('.').next().unwrap_or(&promise.id))) }
            output #action-answer role="status" {}
        }
    }
}

/// The form of `cancel`.
#[derive(Debug, Deserialize)]
pub(crate) struct CancelForm {
    form_token: String,
    reason: Option<String>,
}

/// The form of `complete`.
#[derive(Debug, Deserialize)]
pub(crate) struct CompleteForm {
    form_token: String,
    value: String,
}

/// The refusal of what a page of this server did not send (a wrong form token, a browser's
/// cross-site request) and of any action on a read-only node; `None` lets it through.
pub(crate) fn refusal<C: ClockFn>(
    ui: &Ui<C>,
    headers: &HeaderMap,
    form_token: &str,
) -> Option<Response> {
    if ui.read_only {
        return Some(layout::error_page(
            StatusCode::METHOD_NOT_ALLOWED,
            "Read-only",
            "this node is read-only (started with --read-only): nothing can be cancelled, \
             completed, paused, resumed or triggered here",
        ));
    }
    let text = |name| headers.get(name).and_then(|value| value.to_str().ok());
    let cross_site =
        text("sec-fetch-site").is_some_and(|site| !matches!(site, "same-origin" | "none"));
    let foreign_origin = text(header::ORIGIN.as_str()).is_some_and(|origin| {
        let host = text(header::HOST.as_str()).unwrap_or_default();
        origin != format!("http://{host}") && origin != format!("https://{host}")
    });
    if cross_site
        || foreign_origin
        || !server::token_matches(ui.form_token.as_bytes(), form_token.as_bytes())
    {
        return Some(layout::error_page(
            StatusCode::FORBIDDEN,
            "Refused",
            "this action did not come from a page of this node: open the execution's page and \
             use its form",
        ));
    }
    None
}

/// The execution an admitted action names; the refusal of one that is not.
fn admitted<C: ClockFn>(
    ui: &Ui<C>,
    headers: &HeaderMap,
    form_token: &str,
    id: &str,
) -> Result<ExecutionId, Box<Response>> {
    if let Some(refused) = refusal(ui, headers, form_token) {
        return Err(Box::new(refused));
    }
    server::parse_id(id).map_err(|err| Box::new(layout::api_error(&err)))
}

/// The answer: the sentence alone for the script, else the execution's page with it.
async fn answer<C: ClockFn>(
    ui: &Ui<C>,
    headers: &HeaderMap,
    page_of: &ExecutionId,
    status: StatusCode,
    sentence: Result<String, ApiError>,
) -> Response {
    let (status, message) = match sentence {
        Ok(text) => (status, html! { p.message.done role="status" { (text) } }),
        Err(err) => (
            err.status(),
            html! { p.message.refused role="alert" { (err.message()) } },
        ),
    };
    if headers.contains_key(IN_PLACE) {
        return (status, Html(message.into_string())).into_response();
    }
    let read = match execution::read(ui, page_of).await {
        Ok(read) => read,
        Err(err) => return layout::api_error(&err),
    };
    let children = match execution::children(ui, page_of, None).await {
        Ok(children) => children,
        Err(err) => return layout::api_error(&err),
    };
    let page = execution::render(ui, &read, &children, 0, ui.clock.now(), Some(message));
    (status, page).into_response()
}

pub(crate) async fn cancel<C: ClockFn>(
    axum::extract::State(ui): Shared<C>,
    Path(text): Path<String>,
    headers: HeaderMap,
    Form(form): Form<CancelForm>,
) -> Response {
    let execution_id = match admitted(&ui, &headers, &form.form_token, &text) {
        Ok(id) => id,
        Err(refused) => return *refused,
    };
    let reason = form
        .reason
        .map(|reason| reason.trim().to_string())
        .filter(|reason| !reason.is_empty())
        .unwrap_or_else(|| DEFAULT_REASON.to_string());
    let request = CancelRequest {
        execution_id: execution_id.clone(),
        now: ui.clock.now(),
        reason,
    };
    let sentence = match ui.db.cancel(request).await {
        Ok(outcome @ CancelOutcome::Cancelled { .. }) => {
            Ok(node::cancel_answer(&execution_id, &outcome))
        }
        Ok(outcome @ CancelOutcome::AlreadyFinished { .. }) => {
            let CancelOutcome::AlreadyFinished { result } = &outcome else {
                unreachable!()
            };
            let kind = match views::result(result) {
                server::types::ResultView::Ok { .. } => "ok",
                _ => "not ok",
            };
            Ok(format!(
                "{} ({kind})",
                node::cancel_answer(&execution_id, &outcome)
            ))
        }
        Err(err) => Err(ApiError::db(
            &format!("cannot cancel {execution_id}"),
            &execution_id,
            err,
        )),
    };
    answer(&ui, &headers, &execution_id, StatusCode::OK, sentence).await
}

pub(crate) async fn complete<C: ClockFn>(
    axum::extract::State(ui): Shared<C>,
    Path(text): Path<String>,
    headers: HeaderMap,
    Form(form): Form<CompleteForm>,
) -> Response {
    let execution_id = match admitted(&ui, &headers, &form.form_token, &text) {
        Ok(id) => id,
        Err(refused) => return *refused,
    };
    // The page to come back to: the workflow that awaits the promise, else the promise.
    let page_of = execution_id
        .split_to_parent()
        .map_or_else(|| execution_id.clone(), |(parent, _)| parent);
    let value: serde_json::Value = match serde_json::from_str(&form.value) {
        Ok(value) => value,
        Err(err) => {
            let refused = ApiError::malformed_query(format!("the value is not JSON: {err}"));
            return answer(
                &ui,
                &headers,
                &page_of,
                StatusCode::BAD_REQUEST,
                Err(refused),
            )
            .await;
        }
    };
    let request = CompleteRequest {
        execution_id: execution_id.clone(),
        now: ui.clock.now(),
        value: SupportedFunctionReturnValue::InfallibleOrResultOk(Json(value.clone())),
    };
    let sentence = ui
        .db
        .complete(request)
        .await
        .map(|outcome| node::complete_answer(&execution_id, &outcome, &value))
        .map_err(|err| {
            ApiError::db(
                &format!("cannot complete {execution_id}"),
                &execution_id,
                err,
            )
        });
    answer(&ui, &headers, &page_of, StatusCode::OK, sentence).await
}
