//! The checker on hand-made `cargo metadata` graphs: clean ones pass, forbidden edges are found.

use super::*;
use serde_json::json;

/// One edge of a fake graph: from, to, and its `dep_kinds` (`None` is a normal edge).
type FakeEdge = (&'static str, &'static str, &'static [Option<&'static str>]);

const NORMAL: &[Option<&str>] = &[None];
const DEV: &[Option<&str>] = &[Some("dev")];

/// The workspace as its architecture wants it.
const MEMBERS: &[&str] = &[
    "concepts",
    "test-utils",
    "storage-memory",
    "storage-sqlite",
    "executor",
    "timers-watcher",
    "workflow",
    "conformance",
    "simulation",
    "test-support",
    "node",
    "server",
    "ui",
    "cli",
    "xtask",
];

const CLEAN_EDGES: &[FakeEdge] = &[
    ("concepts", "serde", NORMAL),
    ("concepts", "proptest", DEV),
    ("test-utils", "concepts", NORMAL),
    ("storage-memory", "concepts", NORMAL),
    ("storage-memory", "tokio", NORMAL),
    ("storage-memory", "conformance", DEV),
    ("storage-memory", "test-utils", DEV),
    ("storage-sqlite", "concepts", NORMAL),
    ("storage-sqlite", "rusqlite", NORMAL),
    ("rusqlite", "libsqlite3-sys", NORMAL),
    ("storage-sqlite", "conformance", DEV),
    ("executor", "concepts", NORMAL),
    ("executor", "tokio", NORMAL),
    ("executor", "test-utils", DEV),
    ("timers-watcher", "concepts", NORMAL),
    ("timers-watcher", "test-utils", DEV),
    ("workflow", "concepts", NORMAL),
    ("workflow", "executor", NORMAL),
    ("workflow", "test-utils", DEV),
    ("conformance", "concepts", NORMAL),
    ("conformance", "workflow", NORMAL),
    ("conformance", "executor", NORMAL),
    ("conformance", "timers-watcher", NORMAL),
    ("conformance", "test-utils", NORMAL),
    ("test-support", "conformance", NORMAL),
    ("test-support", "storage-memory", NORMAL),
    ("test-support", "tokio-postgres", NORMAL),
    ("storage-memory", "test-support", DEV),
    ("node", "concepts", NORMAL),
    ("node", "executor", NORMAL),
    ("node", "timers-watcher", NORMAL),
    ("node", "workflow", NORMAL),
    ("node", "test-support", DEV),
    ("node", "test-utils", DEV),
    ("server", "test-support", DEV),
    ("ui", "server", NORMAL),
    ("ui", "test-support", DEV),
    ("cli", "node", NORMAL),
    ("cli", "server", NORMAL),
    ("cli", "storage-sqlite", NORMAL),
    ("cli", "test-support", DEV),
    ("xtask", "serde", NORMAL),
    // A dependency's own dev edges are never built for its dependents.
    ("test-utils", "storage-memory", DEV),
    // Build edges are left out, like `cargo tree -e normal` leaves them out.
    ("timers-watcher", "storage-memory", &[Some("build")]),
];

fn id(name: &str) -> String {
    format!("path+file:///ws/{name}#0.1.0")
}

/// `cargo metadata` JSON, trimmed to the fields the checker reads, for `members` and `edges`.
fn metadata(members: &[&str], edges: &[FakeEdge]) -> String {
    let mut names: BTreeSet<&str> = members.iter().copied().collect();
    for (from, to, _) in edges {
        names.insert(from);
        names.insert(to);
    }
    let packages: Vec<_> = names
        .iter()
        .map(|name| json!({ "id": id(name), "name": name, "version": "0.1.0" }))
        .collect();
    let nodes: Vec<_> = names
        .iter()
        .map(|name| {
            let deps: Vec<_> = edges
                .iter()
                .filter(|(from, _, _)| from == name)
                .map(|(_, to, kinds)| {
                    let kinds: Vec<_> = kinds
                        .iter()
                        .map(|kind| json!({ "kind": kind, "target": null }))
                        .collect();
                    json!({ "name": to.replace('-', "_"), "pkg": id(to), "dep_kinds": kinds })
                })
                .collect();
            json!({ "id": id(name), "deps": deps, "features": [] })
        })
        .collect();
    let members: Vec<_> = members.iter().map(|name| id(name)).collect();
    json!({
        "packages": packages,
        "workspace_members": members,
        "resolve": { "nodes": nodes, "root": null },
        "version": 1,
    })
    .to_string()
}

fn violations(edges: &[FakeEdge]) -> Vec<Violation> {
    let graph = DepGraph::from_metadata_json(&metadata(MEMBERS, edges)).unwrap();
    check(&graph, RULES).unwrap()
}

fn with(extra: FakeEdge) -> Vec<FakeEdge> {
    let mut edges = CLEAN_EDGES.to_vec();
    edges.push(extra);
    edges
}

/// Each violation as `from: path` in the arrow notation of the report.
fn paths(violations: &[Violation]) -> Vec<String> {
    violations
        .iter()
        .map(|violation| {
            let report = violation.to_string();
            report.lines().nth(1).unwrap().trim().to_owned()
        })
        .collect()
}

#[test]
fn clean_graph_has_no_violation() {
    assert_eq!(violations(CLEAN_EDGES), []);
}

#[test]
fn executor_dev_dependency_on_a_backend_is_reported() {
    let found = violations(&with(("executor", "storage-memory", DEV)));
    assert_eq!(paths(&found), ["executor -(dev)-> storage-memory"]);
    assert_eq!(found[0].rule.crates, "executor");
    let report = found[0].to_string();
    assert!(
        report.starts_with(
            "forbidden edge: `executor` must not depend on `storage-*` or a database driver \
             (normal and dev edges): "
        ),
        "{report}"
    );
}

#[test]
fn transitive_normal_edge_to_a_driver_is_reported_with_its_path() {
    let found = violations(&with(("serde", "rusqlite", NORMAL)));
    // Everything that reaches serde reaches the driver; `xtask`, `test-utils`, the backends and
    // the suite may, the five crates below may not.
    assert_eq!(
        paths(&found),
        [
            "concepts -> serde -> rusqlite",
            "executor -> concepts -> serde -> rusqlite",
            "timers-watcher -> concepts -> serde -> rusqlite",
            "workflow -> concepts -> serde -> rusqlite",
            "node -> concepts -> serde -> rusqlite",
        ],
        "{found:#?}"
    );
}

#[test]
fn normal_edge_behind_a_dev_edge_is_followed() {
    let found = violations(&with(("test-utils", "storage-memory", NORMAL)));
    assert_eq!(
        paths(&found),
        [
            "executor -(dev)-> test-utils -> storage-memory",
            "timers-watcher -(dev)-> test-utils -> storage-memory",
            "workflow -(dev)-> test-utils -> storage-memory",
            "test-utils -> storage-memory",
            "conformance -> test-utils -> storage-memory",
        ]
    );
}

#[test]
fn backend_may_only_know_concepts() {
    let found = violations(&with(("storage-sqlite", "executor", NORMAL)));
    assert_eq!(paths(&found), ["storage-sqlite -> executor"]);
    let report = found[0].to_string();
    assert!(
        report.contains(
            "must not depend on another workspace crate (except `concepts` or `sqlite-wal-batch`)"
        ),
        "{report}"
    );
    let found = violations(&with(("storage-memory", "storage-sqlite", NORMAL)));
    assert_eq!(paths(&found), ["storage-memory -> storage-sqlite"]);
}

#[test]
fn watcher_must_not_know_the_executor() {
    let found = violations(&with(("timers-watcher", "executor", DEV)));
    assert_eq!(paths(&found), ["timers-watcher -(dev)-> executor"]);
}

#[test]
fn workflow_must_not_name_a_backend() {
    let found = violations(&with(("workflow", "storage-sqlite", DEV)));
    assert_eq!(paths(&found), ["workflow -(dev)-> storage-sqlite"]);
    assert_eq!(found[0].rule.crates, "workflow");
}

#[test]
fn concepts_must_not_know_another_workspace_crate() {
    let found = violations(&with(("concepts", "test-utils", DEV)));
    assert_eq!(paths(&found), ["concepts -(dev)-> test-utils"]);
}

#[test]
fn conformance_must_not_name_a_backend() {
    let found = violations(&with(("conformance", "storage-memory", DEV)));
    assert_eq!(paths(&found), ["conformance -(dev)-> storage-memory"]);
}

#[test]
fn simulation_runs_on_the_memory_backend_alone() {
    let found = violations(&with(("simulation", "storage-sqlite", DEV)));
    assert_eq!(paths(&found), ["simulation -(dev)-> storage-sqlite"]);
    assert_eq!(found[0].rule.crates, "simulation");
}

#[test]
fn rule_naming_a_missing_crate_is_an_error() {
    let members: Vec<&str> = MEMBERS
        .iter()
        .copied()
        .filter(|name| *name != "executor")
        .collect();
    let graph = DepGraph::from_metadata_json(&metadata(&members, &[])).unwrap();
    let err = check(&graph, RULES).unwrap_err().to_string();
    assert!(err.contains("`executor` names no workspace crate"), "{err}");
}

#[test]
fn metadata_without_resolve_is_an_error() {
    let json = json!({ "packages": [], "workspace_members": [], "resolve": null }).to_string();
    let err = DepGraph::from_metadata_json(&json).unwrap_err().to_string();
    assert!(err.contains("no resolve graph"), "{err}");
}

#[test]
fn patterns_match_names_prefixes_members_and_drivers() {
    assert!(name_matches("storage-*", "storage-sqlite"));
    assert!(!name_matches("storage-*", "storage"));
    assert!(name_matches("executor", "executor"));
    assert!(!name_matches("executor", "executor-ext"));
    let graph = DepGraph::from_metadata_json(&metadata(MEMBERS, CLEAN_EDGES)).unwrap();
    assert!(graph.matches("@workspace", &id("test-utils")));
    assert!(!graph.matches("@workspace", &id("tokio")));
    assert!(graph.matches("@driver", &id("libsqlite3-sys")));
    assert!(!graph.matches("@driver", &id("serde")));
}

#[test]
fn nothing_may_depend_on_xtask_and_xtask_on_nothing_of_the_workspace() {
    let found = violations(&with(("storage-memory", "xtask", DEV)));
    assert_eq!(paths(&found), ["storage-memory -(dev)-> xtask"]);
    let found = violations(&with(("xtask", "concepts", NORMAL)));
    assert_eq!(paths(&found), ["xtask -> concepts"]);
}

#[test]
fn test_support_is_reached_through_dev_edges_only() {
    let found = violations(&with(("cli", "test-support", NORMAL)));
    assert_eq!(paths(&found), ["cli -> test-support"]);
    let report = found[0].to_string();
    assert!(
        report
            .starts_with("forbidden edge: `*` must not depend on `test-support` (normal edges): "),
        "{report}"
    );
    // Behind another crate's normal edge it is reached too.
    let mut edges = with(("cli", "some-helper", NORMAL));
    edges.push(("some-helper", "test-support", NORMAL));
    let found = violations(&edges);
    assert_eq!(paths(&found), ["cli -> some-helper -> test-support"]);
}

#[test]
fn test_support_must_not_bring_a_driver_to_the_executor() {
    let found = violations(&with(("executor", "test-support", DEV)));
    assert_eq!(
        paths(&found),
        [
            "executor -(dev)-> test-support -> storage-memory",
            "executor -(dev)-> test-support -> tokio-postgres",
        ]
    );
}

#[test]
fn the_node_names_no_backend_and_its_tests_reach_one_through_test_support_only() {
    let found = violations(&with(("node", "storage-sqlite", NORMAL)));
    assert_eq!(paths(&found), ["node -> storage-sqlite"]);
    let found = violations(&with(("node", "deadpool-postgres", NORMAL)));
    assert_eq!(paths(&found), ["node -> deadpool-postgres"]);
    // Its own dev-dependency on a backend or a driver is reported once, by the rule of its
    // own dev edges; the clean graph's `node -(dev)-> test-support -> storage-memory` is not.
    for backend in ["storage-memory", "rusqlite"] {
        let found = violations(&with(("node", backend, DEV)));
        assert_eq!(paths(&found), [format!("node -(dev)-> {backend}")]);
        let report = found[0].to_string();
        assert!(report.contains("(its own dev edges)"), "{report}");
    }
}

#[test]
fn the_ui_names_no_backend_and_its_tests_reach_one_through_test_support_only() {
    let found = violations(&with(("ui", "storage-sqlite", NORMAL)));
    assert_eq!(paths(&found), ["ui -> storage-sqlite"]);
    let found = violations(&with(("ui", "rusqlite", DEV)));
    assert_eq!(paths(&found), ["ui -(dev)-> rusqlite"]);
}

#[test]
fn the_server_names_no_backend_and_its_tests_reach_one_through_test_support_only() {
    // The UI, built on the server, would name it too.
    let found = violations(&with(("server", "storage-postgres", NORMAL)));
    assert_eq!(
        paths(&found),
        [
            "server -> storage-postgres",
            "ui -> server -> storage-postgres"
        ]
    );
    let found = violations(&with(("server", "tokio-postgres", NORMAL)));
    assert_eq!(
        paths(&found),
        ["server -> tokio-postgres", "ui -> server -> tokio-postgres"]
    );
    for backend in ["storage-memory", "rusqlite"] {
        let found = violations(&with(("server", backend, DEV)));
        assert_eq!(paths(&found), [format!("server -(dev)-> {backend}")]);
        let report = found[0].to_string();
        assert!(report.contains("(its own dev edges)"), "{report}");
    }
}
