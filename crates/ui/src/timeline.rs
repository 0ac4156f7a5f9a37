//! The timeline picture of one execution (SVG): its attempts from lock to outcome, the
//! backoff gaps between them, the timeouts, its durable sleeps and its children's spans, on
//! one time axis from its creation to its end (or now). Bounded: at most [`MAX_BARS`]
//! attempts and [`MAX_CHILDREN`] children are drawn, the rest counted.

use crate::layout;
use chrono::{DateTime, Utc};
use maud::{Markup, html};
use server::types::{EventData, EventView, HistoryView, ResponseData, ResponseView, ResultView};

/// Attempts (and sleeps) drawn at most.
const MAX_BARS: usize = 500;
/// Children drawn one per row at most.
const MAX_CHILDREN: usize = 20;
/// The characters of a reason shown in a bar's tooltip; the events below show more.
const TITLE_LIMIT: usize = 200;

const WIDTH: f64 = 960.0;
const LABEL: f64 = 110.0;
const ROW: f64 = 22.0;
const AXIS: f64 = 24.0;

/// One bar: its lane's row, its span, its kind (a CSS class) and its tooltip.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Bar {
    row: usize,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    kind: &'static str,
    title: String,
}

/// The lanes and their bars.
#[derive(Debug, Default)]
pub(crate) struct Timeline {
    lanes: Vec<String>,
    bars: Vec<Bar>,
    left_out: Vec<String>,
}

/// A reason in a bar's tooltip: at most [`TITLE_LIMIT`] characters, then `…`.
fn cut(reason: &str) -> String {
    match crate::json::cut(reason, TITLE_LIMIT) {
        (shown, 0) => shown.to_string(),
        (shown, _) => format!("{shown}…"),
    }
}

fn attempt_end(event: &EventData) -> Option<(&'static str, String)> {
    Some(match event {
        EventData::TemporarilyFailed { reason, .. } => {
            ("failed", format!("failed: {}", cut(reason)))
        }
        EventData::TemporarilyTimedOut { .. } => ("timeout", "timed out".to_string()),
        EventData::Unlocked { reason, .. } => ("unlocked", format!("unlocked: {}", cut(reason))),
        EventData::Finished { result } => match result {
            ResultView::Ok { .. } => ("ok", "finished: ok".to_string()),
            ResultView::Cancelled { reason } => ("bad", format!("cancelled: {}", cut(reason))),
            _ => ("bad", "finished: not ok".to_string()),
        },
        EventData::Locked { .. } => ("lost", "the lease ended (locked again)".to_string()),
        EventData::Created { .. } | EventData::History { .. } => return None,
    })
}

impl Timeline {
    fn lane(&mut self, name: String) -> usize {
        self.lanes.push(name);
        self.lanes.len() - 1
    }

    /// The timeline of `events` and `responses`, cut at `now` where something is still
    /// going on.
    pub(crate) fn of(events: &[EventView], responses: &[ResponseView], now: DateTime<Utc>) -> Self {
        let mut timeline = Self::default();
        let attempts = timeline.lane("attempts".to_string());
        let mut open: Option<(DateTime<Utc>, DateTime<Utc>, &str)> = None;
        let (mut drawn, mut skipped) = (0, 0);
        let mut sleeps = None;
        let mut children: Vec<(String, DateTime<Utc>)> = Vec::new();
        let mut push = |timeline: &mut Self, bar: Bar| {
            if drawn < MAX_BARS {
                drawn += 1;
                timeline.bars.push(bar);
            } else {
                skipped += 1;
            }
        };
        for event in events {
            if let Some((start, _, executor)) = open
                && let Some((kind, what)) = attempt_end(&event.event)
            {
                let title = format!(
                    "attempt on {executor}, {} to {}: {what}",
                    start.format("%H:%M:%S%.3f"),
                    event.created_at.format("%H:%M:%S%.3f")
                );
                push(
                    &mut timeline,
                    Bar {
                        row: attempts,
                        start,
                        end: event.created_at,
                        kind,
                        title,
                    },
                );
                open = None;
            }
            match &event.event {
                EventData::Locked {
                    executor_id,
                    lock_expires_at,
                    ..
                } => {
                    open = Some((event.created_at, *lock_expires_at, executor_id.as_str()));
                }
                EventData::TemporarilyFailed {
                    backoff_expires_at, ..
                }
                | EventData::TemporarilyTimedOut { backoff_expires_at }
                | EventData::Unlocked {
                    backoff_expires_at, ..
                } if *backoff_expires_at > event.created_at => {
                    // Parked: no clock reaches its end, so the bar runs to now.
                    let parked = *backoff_expires_at == concepts::PARKED_UNTIL;
                    let (end, title) = if parked {
                        (now.max(event.created_at), "parked".to_string())
                    } else {
                        let until = backoff_expires_at.format("%H:%M:%S%.3f");
                        (*backoff_expires_at, format!("backoff until {until}"))
                    };
                    push(
                        &mut timeline,
                        Bar {
                            row: attempts,
                            start: event.created_at,
                            end,
                            kind: "backoff",
                            title,
                        },
                    );
                }
                EventData::History {
                    step:
                        HistoryView::DelayRequest {
                            delay_id,
                            expires_at,
                            ..
                        },
                } => {
                    let row = *sleeps.get_or_insert_with(|| timeline.lane("sleeps".to_string()));
                    let end = responses
                        .iter()
                        .find_map(|response| match &response.response {
                            ResponseData::DelayFinished { delay_id: id } if id == delay_id => {
                                Some(response.created_at)
                            }
                            _ => None,
                        })
                        .unwrap_or(*expires_at);
                    let title = format!(
                        "durable sleep {delay_id} until {}",
                        expires_at.format("%H:%M:%S%.3f")
                    );
                    push(
                        &mut timeline,
                        Bar {
                            row,
                            start: event.created_at,
                            end,
                            kind: "sleep",
                            title,
                        },
                    );
                }
                EventData::History {
                    step: HistoryView::ChildRequest { child_id, .. },
                } => {
                    children.push((child_id.clone(), event.created_at));
                }
                _ => {}
            }
        }
        if let Some((start, expires, executor)) = open {
            let title = format!(
                "running on {executor}, lease until {}",
                expires.format("%H:%M:%S%.3f")
            );
            push(
                &mut timeline,
                Bar {
                    row: attempts,
                    start,
                    end: now.min(expires).max(start),
                    kind: "running",
                    title,
                },
            );
        }
        let shown = children.len().min(MAX_CHILDREN);
        for (child_id, requested) in &children[..shown] {
            let short = child_id.rsplit('.').next().unwrap_or(child_id).to_string();
            let row = timeline.lane(short);
            let finished = responses
                .iter()
                .find_map(|response| match &response.response {
                    ResponseData::ChildFinished {
                        child_id: id,
                        result,
                    } if id == child_id => Some((response.created_at, result)),
                    _ => None,
                });
            let (end, kind, what) = match finished {
                Some((at, ResultView::Ok { .. })) => (at, "ok", "finished: ok"),
                Some((at, _)) => (at, "bad", "finished: not ok"),
                None => (now.max(*requested), "running", "not finished"),
            };
            timeline.bars.push(Bar {
                row,
                start: *requested,
                end,
                kind,
                title: format!("child {child_id}: {what}"),
            });
        }
        if children.len() > shown {
            timeline.left_out.push(format!(
                "{} more children (in the tree below)",
                children.len() - shown
            ));
        }
        if skipped > 0 {
            timeline.left_out.push(format!(
                "{skipped} more attempts, backoffs and sleeps (in the events below)"
            ));
        }
        timeline
    }

    /// The picture.
    pub(crate) fn render(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Markup {
        let to = self
            .bars
            .iter()
            .map(|bar| bar.end)
            .chain([to])
            .max()
            .unwrap_or(to);
        let span_ms = to
            .signed_duration_since(from)
            .num_microseconds()
            .unwrap_or(i64::MAX)
            .max(1) as f64
            / 1000.0;
        let scale = (WIDTH - LABEL - 10.0) / span_ms;
        let x = |at: DateTime<Utc>| {
            LABEL
                + at.signed_duration_since(from)
                    .num_microseconds()
                    .unwrap_or(0)
                    .max(0) as f64
                    / 1000.0
                    * scale
        };
        let height = AXIS + ROW * self.lanes.len() as f64 + 4.0;
        let ticks = 5;
        html! {
            figure.timeline {
                svg viewBox={ "0 0 " (WIDTH) " " (height) } width=(WIDTH) height=(height) role="img" aria-label="timeline of the execution's attempts" {
                    @for tick in 0..=ticks {
                        @let at_ms = span_ms * f64::from(tick) / f64::from(ticks);
                        @let tx = LABEL + at_ms * scale;
                        line.tick x1=(fmt(tx)) x2=(fmt(tx)) y1="14" y2=(fmt(height)) {}
                        text.axis x=(fmt(tx)) y="11" text-anchor=(if tick == ticks { "end" } else { "middle" }) { "+" (layout::duration(at_ms as i64)) }
                    }
                    @for (row, lane) in self.lanes.iter().enumerate() {
                        text.lane x="4" y=(fmt(AXIS + ROW * row as f64 + 15.0)) { (lane) }
                    }
                    @for bar in &self.bars {
                        @let left = x(bar.start);
                        @let width = (x(bar.end) - left).max(2.0);
                        rect class={ "bar " (bar.kind) } x=(fmt(left)) y=(fmt(AXIS + ROW * bar.row as f64 + 3.0)) width=(fmt(width)) height=(fmt(ROW - 6.0)) rx="2" {
                            title { (bar.title) }
                        }
                    }
                }
                figcaption {
                    "From its creation, " (layout::time(from)) ". "
                    span.key.ok { "ok" } " " span.key.failed { "failed" } " " span.key.timeout { "timed out" } " "
                    span.key.backoff { "backoff" } " " span.key.sleep { "sleep" } " " span.key.running { "running" }
                    @for note in &self.left_out { " · " (note) }
                }
            }
        }
    }
}

fn fmt(value: f64) -> String {
    format!("{value:.1}")
}
