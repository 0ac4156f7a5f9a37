//! JSON values as HTML: formatted, objects and arrays collapsible (`<details>`), every
//! string escaped and cut, every value bounded, so that parameters of any size or content
//! render inert and small.

use maud::{Markup, html};
use serde_json::Value;

/// The characters of a string shown before it is cut.
pub const STRING_LIMIT: usize = 2_000;
/// The nodes (values, keys included) of one value shown before the rest is left out.
pub const NODE_LIMIT: usize = 2_000;
/// Objects and arrays deeper than this start closed.
const OPEN_DEPTH: usize = 2;

/// `value`, formatted and bounded.
#[must_use]
pub fn render(value: &Value) -> Markup {
    let mut budget = NODE_LIMIT;
    html! { div.json { (node(value, 0, &mut budget)) } }
}

/// `text` cut after `limit` characters, and how many were left out.
#[must_use]
pub fn cut(text: &str, limit: usize) -> (&str, usize) {
    match text.char_indices().nth(limit) {
        Some((at, _)) => (&text[..at], text[at..].chars().count()),
        None => (text, 0),
    }
}

/// A string of the store shown as text (a reason, a note, a metadata value): escaped, cut
/// after [`STRING_LIMIT`] characters, saying how many were left out.
#[must_use]
pub fn text(text: &str) -> Markup {
    let (shown, left) = cut(text, STRING_LIMIT);
    html! {
        (shown)
        @if left > 0 { span.cut { " … " (left) " more characters" } }
    }
}

fn string(text: &str) -> Markup {
    let (shown, left) = cut(text, STRING_LIMIT);
    html! {
        span.s { "\"" (shown) "\"" }
        @if left > 0 { span.cut { " … " (left) " more characters" } }
    }
}

fn node(value: &Value, depth: usize, budget: &mut usize) -> Markup {
    if *budget == 0 {
        return html! { span.cut { "…" } };
    }
    *budget -= 1;
    match value {
        Value::Null => html! { span.l { "null" } },
        Value::Bool(flag) => html! { span.l { (flag) } },
        Value::Number(number) => html! { span.n { (number) } },
        Value::String(text) => string(text),
        Value::Array(items) if items.is_empty() => html! { "[]" },
        Value::Object(fields) if fields.is_empty() => html! { "{}" },
        Value::Array(items) => {
            let mut shown = Vec::new();
            for item in items {
                if *budget == 0 {
                    break;
                }
                shown.push(node(item, depth + 1, budget));
            }
            let left = items.len() - shown.len();
            html! {
                details.j open[depth < OPEN_DEPTH] {
                    summary { "[" span.count { (items.len()) " items" } }
                    ol {
                        @for item in &shown { li { (item) } }
                        @if left > 0 { li.cut { "… " (left) " more items" } }
                    }
                    "]"
                }
            }
        }
        Value::Object(fields) => {
            let mut shown = Vec::new();
            for (key, item) in fields {
                if *budget == 0 {
                    break;
                }
                *budget -= 1;
                shown.push((key, node(item, depth + 1, budget)));
            }
            let left = fields.len() - shown.len();
            html! {
                details.j open[depth < OPEN_DEPTH] {
                    summary { "{" span.count { (fields.len()) " fields" } }
                    dl {
                        @for (key, item) in &shown {
                            div { dt { (string(key)) ":" } dd { (item) } }
                        }
                        @if left > 0 { div.cut { "… " (left) " more fields" } }
                    }
                    "}"
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn markup_in_a_value_is_escaped() {
        let html = render(&json!({"<script>": "<script>alert(1)</script>", "a": "\"><img src=x onerror=alert(1)>"})).into_string();
        assert!(!html.contains("<script>"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
    }

    #[test]
    fn a_long_string_is_cut_and_says_how_much_is_left() {
        let long = "é".repeat(1_000_000);
        let html = render(&json!({ "big": long })).into_string();
        assert!(
            html.len() < 3 * STRING_LIMIT + 1_000,
            "{} bytes",
            html.len()
        );
        assert!(html.contains(&format!("{} more characters", 1_000_000 - STRING_LIMIT)));
    }

    #[test]
    fn a_large_value_is_bounded_by_nodes() {
        let many: Vec<u32> = (0..100_000).collect();
        let html = render(&json!(many)).into_string();
        assert!(
            html.contains(&format!("{} more items", 100_000 - (NODE_LIMIT - 1))),
            "{}",
            &html[html.len() - 200..]
        );
    }
}
