//! `cargo xtask deps`: the dependency edges that `docs/ARCHITECTURE.md` forbids, checked on the
//! resolved graph of `cargo metadata`, transitive edges included.
//!
//! The rules are data ([`RULES`]): adding one is adding a line.

use anyhow::{Context, bail};
use serde::Deserialize;
use std::{
    collections::{BTreeSet, HashMap, HashSet, VecDeque},
    fmt,
    path::Path,
    process::Command,
};

/// Which edges out of a rule's crate are followed; past the first edge only normal edges are,
/// since a dependency's own dev-dependencies are never built for its dependents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edges {
    /// `[dependencies]` only.
    Normal,
    /// `[dependencies]` and `[dev-dependencies]`: the crate's tests must not reach it either.
    NormalAndDev,
    /// The crate's own `[dev-dependencies]` only, not what they depend on: its tests may reach
    /// a forbidden crate through a test helper (`test-support`), never name it themselves.
    DirectDev,
}

/// One forbidden-edge rule: no crate matching `crates` may reach a crate matching one of
/// `forbidden` (unless it matches one of `allowed`).
///
/// A pattern is a package name, a prefix ending in `*` (`storage-*`), `@workspace` (any member
/// of the workspace) or `@driver` (any database driver, see [`DRIVERS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// The crates the rule constrains.
    pub crates: &'static str,
    /// Which of their edges are followed.
    pub edges: Edges,
    /// What they must not reach.
    pub forbidden: &'static [&'static str],
    /// Exceptions to `forbidden`.
    pub allowed: &'static [&'static str],
    /// Why, for the person who broke it.
    pub why: &'static str,
}

/// Database drivers, matched by `@driver`: the backends' business, never the domain's, the
/// executor's or the watcher's.
pub const DRIVERS: &[&str] = &[
    "rusqlite",
    "libsqlite3-sys",
    "sqlite-wal-batch",
    "tokio-postgres",
    "postgres*",
    "deadpool*",
    "sqlx*",
];

/// The architecture's forbidden edges, one rule a line.
#[rustfmt::skip]
pub const RULES: &[Rule] = &[
    Rule { crates: "concepts", edges: Edges::NormalAndDev, forbidden: &["@workspace", "@driver"], allowed: &[], why: "the domain crate knows no other crate of the workspace and no database driver" },
    Rule { crates: "executor", edges: Edges::NormalAndDev, forbidden: &["storage-*", "@driver"], allowed: &[], why: "the executor works through the storage traits and never names a backend" },
    Rule { crates: "timers-watcher", edges: Edges::NormalAndDev, forbidden: &["storage-*", "@driver"], allowed: &[], why: "the watcher works through the storage traits and never names a backend" },
    Rule { crates: "timers-watcher", edges: Edges::NormalAndDev, forbidden: &["executor"], allowed: &[], why: "the watcher acts on expired timers through storage alone, it knows no executor" },
    Rule { crates: "workflow", edges: Edges::NormalAndDev, forbidden: &["storage-*", "@driver"], allowed: &[], why: "the workflow layer works through the storage traits and never names a backend" },
    Rule { crates: "node", edges: Edges::Normal, forbidden: &["storage-*", "@driver"], allowed: &[], why: "the node wires executors, the watcher and the pruner through the storage traits and never names a backend" },
    Rule { crates: "node", edges: Edges::DirectDev, forbidden: &["storage-*", "@driver"], allowed: &[], why: "the node's tests get their stores from test-support's factories, they name no backend themselves" },
    Rule { crates: "server", edges: Edges::Normal, forbidden: &["storage-*", "@driver"], allowed: &[], why: "the HTTP API serves any store through the storage traits and the node's operations, it names no backend" },
    Rule { crates: "server", edges: Edges::DirectDev, forbidden: &["storage-*", "@driver"], allowed: &[], why: "the server's tests get their stores from test-support's factories, they name no backend themselves" },
    Rule { crates: "ui", edges: Edges::Normal, forbidden: &["storage-*", "@driver"], allowed: &[], why: "the web UI reads any store through the API's reads and the storage traits, it names no backend" },
    Rule { crates: "ui", edges: Edges::DirectDev, forbidden: &["storage-*", "@driver"], allowed: &[], why: "the UI's tests get their stores from test-support's factories, they name no backend themselves" },
    Rule { crates: "storage-*", edges: Edges::Normal, forbidden: &["@workspace"], allowed: &["concepts", "sqlite-wal-batch"], why: "a backend implements the concepts traits and knows nothing built on top of them (sqlite-wal-batch is part of SQLite's driver)" },
    Rule { crates: "test-utils", edges: Edges::Normal, forbidden: &["@workspace"], allowed: &["concepts"], why: "every crate's tests use it, so it must sit below all of them but concepts" },
    Rule { crates: "conformance", edges: Edges::NormalAndDev, forbidden: &["storage-*"], allowed: &[], why: "the suite is run by every backend and names none of them" },
    Rule { crates: "simulation", edges: Edges::NormalAndDev, forbidden: &["storage-*", "@driver"], allowed: &["storage-memory"], why: "the simulation runs on the memory backend alone: no driver, no I/O, nothing that is not deterministic" },
    Rule { crates: "*", edges: Edges::Normal, forbidden: &["test-support"], allowed: &[], why: "test-support (backends, a driver) is for tests: reach it through [dev-dependencies] only" },
    Rule { crates: "executor", edges: Edges::Normal, forbidden: &["otel", "opentelemetry*", "tracing-opentelemetry"], allowed: &[], why: "runs join their traces through concepts::trace, which knows no tracing system; OpenTelemetry is the program's choice" },
    Rule { crates: "workflow", edges: Edges::Normal, forbidden: &["otel", "opentelemetry*", "tracing-opentelemetry"], allowed: &[], why: "children take their run's trace through concepts::trace, which knows no tracing system; OpenTelemetry is the program's choice" },
    Rule { crates: "node", edges: Edges::Normal, forbidden: &["otel", "opentelemetry*", "tracing-opentelemetry"], allowed: &[], why: "a submit reads the current trace through concepts::trace; OpenTelemetry is the program's choice" },
    Rule { crates: "server", edges: Edges::Normal, forbidden: &["otel", "opentelemetry*", "tracing-opentelemetry"], allowed: &[], why: "the API stores the caller's traceparent header as text; OpenTelemetry is the program's choice" },
    Rule { crates: "cli", edges: Edges::Normal, forbidden: &["otel", "opentelemetry*", "tracing-opentelemetry"], allowed: &[], why: "without its `otel` feature `stele` compiles nothing of OpenTelemetry" },
    Rule { crates: "xtask", edges: Edges::Normal, forbidden: &["@workspace"], allowed: &[], why: "automation drives the workspace through cargo, it links none of it" },
    Rule { crates: "*", edges: Edges::NormalAndDev, forbidden: &["xtask"], allowed: &[], why: "xtask is a tool, not a library" },
];

/// Runs `cargo metadata` in `root` and checks [`RULES`] against it.
pub fn run(root: &Path) -> anyhow::Result<()> {
    let output = Command::new("cargo")
        .args(["metadata", "--format-version", "1"])
        .current_dir(root)
        .output()
        .context("could not start `cargo metadata`")?;
    if !output.status.success() {
        bail!(
            "`cargo metadata` exited with {}:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let json = String::from_utf8(output.stdout).context("`cargo metadata` printed non-UTF-8")?;
    let graph = DepGraph::from_metadata_json(&json)?;
    let violations = check(&graph, RULES)?;
    if violations.is_empty() {
        println!(
            "deps: {} rules hold over {} workspace crates",
            RULES.len(),
            graph.members.len()
        );
        return Ok(());
    }
    for violation in &violations {
        println!("{violation}");
    }
    bail!("{} forbidden dependency edge(s)", violations.len())
}

/// The kinds of one resolved edge (a crate may be both a normal and a dev dependency).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct EdgeKinds {
    normal: bool,
    dev: bool,
}

/// The resolved package graph: names, workspace members and edges, keyed by package id.
#[derive(Debug)]
pub struct DepGraph {
    names: HashMap<String, String>,
    members: BTreeSet<String>,
    edges: HashMap<String, Vec<(String, EdgeKinds)>>,
}

#[derive(Deserialize)]
struct Metadata {
    packages: Vec<MetadataPackage>,
    workspace_members: Vec<String>,
    resolve: Option<MetadataResolve>,
}

#[derive(Deserialize)]
struct MetadataPackage {
    id: String,
    name: String,
}

#[derive(Deserialize)]
struct MetadataResolve {
    nodes: Vec<MetadataNode>,
}

#[derive(Deserialize)]
struct MetadataNode {
    id: String,
    deps: Vec<MetadataDep>,
}

#[derive(Deserialize)]
struct MetadataDep {
    pkg: String,
    dep_kinds: Vec<MetadataDepKind>,
}

#[derive(Deserialize)]
struct MetadataDepKind {
    kind: Option<String>,
}

impl DepGraph {
    /// Reads the output of `cargo metadata --format-version 1` (with its `resolve` section).
    pub fn from_metadata_json(json: &str) -> anyhow::Result<Self> {
        let metadata: Metadata =
            serde_json::from_str(json).context("`cargo metadata` output is not what I expect")?;
        let resolve = metadata
            .resolve
            .context("`cargo metadata` printed no resolve graph (was it run with --no-deps?)")?;
        let names = metadata
            .packages
            .into_iter()
            .map(|package| (package.id, package.name))
            .collect();
        let edges = resolve
            .nodes
            .into_iter()
            .map(|node| {
                let deps = node
                    .deps
                    .into_iter()
                    .map(|dep| {
                        let mut kinds = EdgeKinds::default();
                        for kind in dep.dep_kinds {
                            match kind.kind.as_deref() {
                                None | Some("normal") => kinds.normal = true,
                                Some("dev") => kinds.dev = true,
                                // Build scripts run on the host and are left out, like
                                // `cargo tree -e normal` leaves them out.
                                Some(_) => {}
                            }
                        }
                        (dep.pkg, kinds)
                    })
                    .collect();
                (node.id, deps)
            })
            .collect();
        Ok(Self {
            names,
            members: metadata.workspace_members.into_iter().collect(),
            edges,
        })
    }

    fn name<'a>(&'a self, id: &'a str) -> &'a str {
        self.names.get(id).map_or(id, String::as_str)
    }

    fn matches(&self, pattern: &str, id: &str) -> bool {
        match pattern {
            "@workspace" => self.members.contains(id),
            "@driver" => DRIVERS
                .iter()
                .any(|driver| name_matches(driver, self.name(id))),
            _ => name_matches(pattern, self.name(id)),
        }
    }
}

fn name_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == pattern,
    }
}

/// One edge of a reported path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hop {
    /// The crate depended upon.
    pub name: String,
    /// Whether the edge to it is a dev edge (only the first one can be).
    pub dev: bool,
}

/// A forbidden crate reached by a crate that a rule constrains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The rule broken.
    pub rule: Rule,
    /// The constrained crate.
    pub from: String,
    /// The path from it to the forbidden crate, the forbidden crate last.
    pub path: Vec<Hop>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rule = &self.rule;
        let edges = match rule.edges {
            Edges::Normal => "normal edges",
            Edges::NormalAndDev => "normal and dev edges",
            Edges::DirectDev => "its own dev edges",
        };
        write!(
            f,
            "forbidden edge: `{}` must not depend on {}",
            rule.crates,
            describe_patterns(rule.forbidden)
        )?;
        if !rule.allowed.is_empty() {
            write!(f, " (except {})", describe_patterns(rule.allowed))?;
        }
        writeln!(f, " ({edges}): {}", rule.why)?;
        write!(f, "    {}", self.from)?;
        for hop in &self.path {
            let arrow = if hop.dev { "-(dev)->" } else { "->" };
            write!(f, " {arrow} {}", hop.name)?;
        }
        Ok(())
    }
}

/// Patterns as a person reads them: `@driver` is "a database driver".
fn describe_patterns(patterns: &[&str]) -> String {
    patterns
        .iter()
        .map(|pattern| match *pattern {
            "@workspace" => "another workspace crate".to_owned(),
            "@driver" => "a database driver".to_owned(),
            name => format!("`{name}`"),
        })
        .collect::<Vec<_>>()
        .join(" or ")
}

/// Every violation of `rules` in `graph`, one per constrained crate and forbidden crate, with a
/// shortest path. A rule naming a crate (not a pattern) that the workspace lacks is an error,
/// so that renaming a crate cannot silently disable its rules.
pub fn check(graph: &DepGraph, rules: &[Rule]) -> anyhow::Result<Vec<Violation>> {
    let mut violations = Vec::new();
    for rule in rules {
        let subjects: Vec<&String> = graph
            .members
            .iter()
            .filter(|id| name_matches(rule.crates, graph.name(id)))
            .collect();
        if subjects.is_empty() && !rule.crates.ends_with('*') {
            bail!(
                "the dependency rule for `{}` names no workspace crate: update RULES in xtask/src/deps.rs",
                rule.crates
            );
        }
        for subject in subjects {
            violations.extend(violations_from(graph, rule, subject));
        }
    }
    Ok(violations)
}

/// Breadth-first walk from `subject`, stopping at forbidden crates.
fn violations_from(graph: &DepGraph, rule: &Rule, subject: &str) -> Vec<Violation> {
    let forbidden = |id: &str| {
        id != subject
            && rule.forbidden.iter().any(|p| graph.matches(p, id))
            && !rule.allowed.iter().any(|p| graph.matches(p, id))
    };
    // Predecessor of each reached crate, and whether the edge into it was dev-only.
    let mut reached: HashMap<&str, (&str, bool)> = HashMap::new();
    let mut visited: HashSet<&str> = HashSet::from([subject]);
    let mut queue: VecDeque<&str> = VecDeque::from([subject]);
    let mut found: Vec<&str> = Vec::new();
    while let Some(id) = queue.pop_front() {
        let first_hop = id == subject;
        let Some(deps) = graph.edges.get(id) else {
            continue;
        };
        for (dep, kinds) in deps {
            let followed = match rule.edges {
                Edges::Normal => kinds.normal,
                Edges::NormalAndDev => kinds.normal || (first_hop && kinds.dev),
                // Past the first hop nothing is followed: what a dev-dependency itself
                // depends on is its business.
                Edges::DirectDev => first_hop && kinds.dev,
            };
            if !followed || !visited.insert(dep.as_str()) {
                continue;
            }
            reached.insert(dep.as_str(), (id, !kinds.normal));
            if forbidden(dep) {
                found.push(dep.as_str());
            } else {
                queue.push_back(dep.as_str());
            }
        }
    }
    found
        .into_iter()
        .map(|target| {
            let mut path = Vec::new();
            let mut at = target;
            while at != subject {
                let (previous, dev) = reached[at];
                path.push(Hop {
                    name: graph.name(at).to_owned(),
                    dev,
                });
                at = previous;
            }
            path.reverse();
            Violation {
                rule: *rule,
                from: graph.name(subject).to_owned(),
                path,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
