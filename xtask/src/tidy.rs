//! Repository rules checked as ordinary tests (`cargo nextest run -p xtask`, part of
//! `cargo xtask ci`): every source file says what it is for, no library file grows past a size
//! a reader can hold, no storage backend writes a rule of the model, and only the node spawns
//! executors.

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// The longest library source file, in lines.
    const MAX_LIBRARY_LINES: usize = 800;

    fn workspace_root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("xtask lives in the workspace root")
            .to_path_buf()
    }

    /// Every `.rs` file under `dir`, skipping build output.
    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n == "target") {
                    continue;
                }
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// Every source file of the workspace, relative to its root (`crates/x/src/lib.rs`), so
    /// that the rules never see where the checkout happens to live.
    fn workspace_sources() -> Vec<PathBuf> {
        let root = workspace_root();
        let mut files = Vec::new();
        for top in ["crates", "tests", "xtask"] {
            rust_files(&root.join(top), &mut files);
        }
        let mut files: Vec<PathBuf> = files
            .into_iter()
            .map(|path| {
                path.strip_prefix(&root)
                    .expect("found under the root")
                    .to_path_buf()
            })
            .collect();
        files.sort();
        assert!(
            !files.is_empty(),
            "no sources found under {}",
            root.display()
        );
        files
    }

    /// The text of a workspace file (relative path); a file that cannot be read fails the rule
    /// rather than slipping past it.
    fn read(path: &Path) -> String {
        std::fs::read_to_string(workspace_root().join(path))
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
    }

    /// Library code: under a crate's `src/`, and not a unit-test module (`tests.rs`, or a
    /// file under a `tests/` folder of `src/`). `path` is relative to the workspace root.
    fn is_library_source(path: &Path) -> bool {
        let mut below_src = path.components().skip_while(|c| c.as_os_str() != "src");
        let in_src = below_src.next().is_some();
        let in_test_folder = below_src.any(|c| c.as_os_str() == "tests");
        let is_test_module = path.file_name().is_some_and(|n| n == "tests.rs");
        in_src && !in_test_folder && !is_test_module
    }

    /// Whether a line of a backend's library code builds a `ValidationError`: a path through
    /// the type (`ValidationError::EmptyBatch`, `concepts::ValidationError::InvalidRequest`) or
    /// an alias that would hide it; comment lines are prose, not code.
    fn constructs_validation_error(line: &str) -> bool {
        let code = line.trim_start();
        !code.starts_with("//")
            && (code.contains("ValidationError::") || code.contains("ValidationError as "))
    }

    /// The call that spawns an executor loop, spelled in two halves so that this file does not
    /// hold it.
    const SPAWN_EXECUTOR: &str = concat!("ExecTask::", "spawn_new");

    /// Whether a line calls [`SPAWN_EXECUTOR`] in code: comment lines (doc comments and their
    /// examples included) are prose.
    fn spawns_an_executor(line: &str) -> bool {
        let code = line.trim_start();
        !code.starts_with("//") && code.contains(SPAWN_EXECUTOR)
    }

    /// Where executors may be spawned by hand: the node, which wires them for everyone else;
    /// the executor's own unit tests; the conformance suite's executor scenarios, which test
    /// the executor itself.
    fn may_spawn_executors(path: &Path) -> bool {
        let executor_tests = path.starts_with("crates/executor/src")
            && (path.file_name().is_some_and(|n| n == "tests.rs")
                || path.components().any(|c| c.as_os_str() == "tests"));
        path.starts_with("crates/node/src")
            || executor_tests
            || path.starts_with("tests/conformance/src/executor_scenarios")
    }

    #[test]
    fn only_the_node_spawns_executors() {
        let offending: Vec<String> = workspace_sources()
            .into_iter()
            .filter(|path| !may_spawn_executors(path))
            .flat_map(|path| {
                read(&path)
                    .lines()
                    .enumerate()
                    .filter(|(_, line)| spawns_an_executor(line))
                    .map(|(n, line)| format!("{}:{}: {}", path.display(), n + 1, line.trim()))
                    .collect::<Vec<_>>()
            })
            .collect();
        assert!(
            offending.is_empty(),
            "executors are wired by the node (`node::Node::builder`, with the timers watcher and \
             the pruner beside them); start a node instead of calling {SPAWN_EXECUTOR}:\n{}",
            offending.join("\n")
        );
    }

    #[test]
    fn executor_spawns_are_told_from_mentions_and_placed() {
        let call = format!("    let handle = {SPAWN_EXECUTOR}(worker, config, Now, db);");
        assert!(spawns_an_executor(&call));
        assert!(spawns_an_executor(&format!("executor::{SPAWN_EXECUTOR}(")));
        for mention in [
            format!("/// Use [`{SPAWN_EXECUTOR}`] in production"),
            format!("//!     {SPAWN_EXECUTOR}(Arc::new(worker), config, Now, db)"),
            format!("    // not {SPAWN_EXECUTOR} here"),
            "    let task = ExecTask::new(worker, config, clock, db);".to_string(),
        ] {
            assert!(!spawns_an_executor(&mention), "{mention}");
        }
        for allowed in [
            "crates/node/src/builder.rs",
            "crates/executor/src/exec_task/tests.rs",
            "crates/executor/src/exec_task/tests/drain.rs",
            "tests/conformance/src/executor_scenarios/spawned.rs",
        ] {
            assert!(may_spawn_executors(Path::new(allowed)), "{allowed}");
        }
        for refused in [
            "crates/executor/src/exec_task.rs",
            "crates/cli/src/commands/node.rs",
            "crates/cli/examples/order.rs",
            "crates/bench/src/multi.rs",
            "tests/durability/src/main.rs",
            "tests/conformance/src/workflow_scenarios/fixture.rs",
            "crates/node/tests/node.rs",
        ] {
            assert!(!may_spawn_executors(Path::new(refused)), "{refused}");
        }
    }

    #[test]
    fn every_source_file_starts_with_a_doc_line() {
        let missing: Vec<String> = workspace_sources()
            .into_iter()
            .filter(|path| !read(path).trim_start().starts_with("//!"))
            .map(|path| path.display().to_string())
            .collect();
        assert!(
            missing.is_empty(),
            "these files do not start with a `//!` line saying what they are for:\n{}",
            missing.join("\n")
        );
    }

    #[test]
    fn no_library_source_file_is_over_the_size_budget() {
        let too_long: Vec<String> = workspace_sources()
            .into_iter()
            .filter(|path| is_library_source(path))
            .filter_map(|path| {
                let lines = read(&path).lines().count();
                (lines > MAX_LIBRARY_LINES).then(|| format!("{} ({lines} lines)", path.display()))
            })
            .collect();
        assert!(
            too_long.is_empty(),
            "library files over {MAX_LIBRARY_LINES} lines; split them by what they do:\n{}",
            too_long.join("\n")
        );
    }

    #[test]
    fn storage_backends_construct_no_validation_error() {
        let offending: Vec<String> = workspace_sources()
            .into_iter()
            .filter(|path| path.starts_with("crates") && is_library_source(path))
            .filter(|path| {
                path.components().nth(1).is_some_and(|krate| {
                    krate.as_os_str().to_string_lossy().starts_with("storage-")
                })
            })
            .flat_map(|path| {
                read(&path)
                    .lines()
                    .enumerate()
                    .filter(|(_, line)| constructs_validation_error(line))
                    .map(|(n, line)| format!("{}:{}: {}", path.display(), n + 1, line.trim()))
                    .collect::<Vec<_>>()
            })
            .collect();
        assert!(
            offending.is_empty(),
            "storage backends only load and persist; the rules of the model (and their \
             messages) live in `concepts::kernel`:\n{}",
            offending.join("\n")
        );
    }

    /// The library sources of the storage backends, with their text.
    fn backend_sources() -> Vec<(PathBuf, String)> {
        workspace_sources()
            .into_iter()
            .filter(|path| path.starts_with("crates") && is_library_source(path))
            .filter(|path| {
                path.components().nth(1).is_some_and(|krate| {
                    krate.as_os_str().to_string_lossy().starts_with("storage-")
                })
            })
            .map(|path| {
                let text = read(&path);
                (path, text)
            })
            .collect()
    }

    /// `text` without comment lines and without any white space: what the code says, whatever
    /// the formatter made of its lines.
    fn code_of(text: &str) -> String {
        text.lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .flat_map(|line| line.chars().filter(|c| !c.is_whitespace()))
            .collect()
    }

    /// The kinds of write the backends must not name: each is a module of `concepts::kernel`,
    /// and a backend runs them all the same way. (`LockPendingRequest` is named where its
    /// grants are handed over; `CreateRequest` is the data of a new execution in a plan.)
    const WRITE_KINDS: [&str; 8] = [
        "CreateBatch",
        "AppendBatchRequest",
        "OutcomeWrite",
        "AppendOutcomes",
        "AppendResponse",
        "CancelRequest",
        "CompleteRequest",
        "PruneRequest",
    ];

    /// Which of `text`'s code names a kind of write.
    fn named_write_kinds(text: &str) -> Vec<&'static str> {
        let code = code_of(text);
        WRITE_KINDS
            .into_iter()
            .filter(|kind| {
                code.match_indices(kind).any(|(at, _)| {
                    let before = code[..at].chars().next_back();
                    let after = code[at + kind.len()..].chars().next();
                    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
                    !word(before) && !word(after)
                })
            })
            .collect()
    }

    #[test]
    fn storage_backends_name_no_kind_of_write() {
        let offending: Vec<String> = backend_sources()
            .into_iter()
            .flat_map(|(path, text)| {
                named_write_kinds(&text)
                    .into_iter()
                    .map(move |kind| format!("{} names {kind}", path.display()))
            })
            .collect();
        assert!(
            offending.is_empty(),
            "a backend runs every kind of write through `kernel::Write`, knowing none by \
             name; what a kind does is its module's in `concepts::kernel`:\n{}",
            offending.join("\n")
        );
    }

    /// The backends' files that load a write's keys: the only ones that read them.
    const LOADERS: [&str; 6] = [
        "crates/storage-memory/src/state.rs",
        "crates/storage-sqlite/src/ops.rs",
        "crates/storage-postgres/src/load.rs",
        "crates/storage-memory/src/schedules.rs",
        "crates/storage-sqlite/src/schedules.rs",
        "crates/storage-postgres/src/schedules.rs",
    ];

    #[test]
    fn backends_read_the_keys_of_a_write_only_to_load_them() {
        let fields = [
            "executions",
            "new_executions",
            "subtrees",
            "finished_results",
            "open_delays",
            "prune",
            "join_sets",
            "delays",
            "child_responses",
            "due",
            "schedules",
            "due_schedules",
        ];
        let offending: Vec<String> = backend_sources()
            .into_iter()
            .filter(|(path, _)| !LOADERS.iter().any(|loader| path == Path::new(loader)))
            .filter_map(|(path, text)| {
                let code = code_of(&text);
                let read: Vec<_> = (fields.iter())
                    .filter(|field| code.contains(&format!("keys.{field}")))
                    .collect();
                (!read.is_empty()).then(|| format!("{} reads keys.{read:?}", path.display()))
            })
            .collect();
        assert!(
            offending.is_empty(),
            "which writes share a transaction, and how they combine, is the kernel's \
             (`Keys::shares_a_transaction`, `Keys::union`, `GroupPlanner`); a backend reads \
             keys only to load them:\n{}",
            offending.join("\n")
        );
        for loader in LOADERS {
            assert!(
                workspace_root().join(loader).is_file(),
                "{loader} is named as a loader but does not exist"
            );
        }
    }

    #[test]
    fn the_postgres_group_writer_plans_its_groups_with_the_kernel() {
        let code = code_of(&read(Path::new("crates/storage-postgres/src/writer.rs")));
        for call in ["GroupPlanner::owning(", "Keys::union("] {
            assert!(
                code.contains(call),
                "the group writer no longer calls `{call}`: a group is loaded for the union \
                 of its keys and planned by the kernel's `GroupPlanner`"
            );
        }
        let store = code_of(&read(Path::new("crates/storage-postgres/src/lib.rs")));
        assert!(
            store.contains("kernel::Groups::spawn("),
            "which writes share a transaction is the kernel's `Groups` (`shares_a_transaction`)"
        );
    }

    #[test]
    fn kinds_of_write_are_told_from_other_names() {
        assert_eq!(
            named_write_kinds("fn f(w: OutcomeWrite) {}"),
            ["OutcomeWrite"]
        );
        assert_eq!(
            named_write_kinds("let x = kernel::CreateBatch(reqs);"),
            ["CreateBatch"]
        );
        assert!(named_write_kinds("// an OutcomeWrite in prose").is_empty());
        assert!(named_write_kinds("let outcome_write_count = 1; MyOutcomeWrites").is_empty());
        assert_eq!(code_of("a .\n  // b\n  b"), "a.b");
    }

    #[test]
    fn the_library_filter_tells_library_code_from_unit_tests() {
        assert!(is_library_source(Path::new(
            "crates/storage-sqlite/src/ops.rs"
        )));
        assert!(is_library_source(Path::new("tests/conformance/src/lib.rs")));
        assert!(!is_library_source(Path::new(
            "crates/storage-sqlite/src/tests.rs"
        )));
        assert!(!is_library_source(Path::new(
            "crates/storage-sqlite/src/tests/faults.rs"
        )));
        assert!(!is_library_source(Path::new(
            "crates/storage-postgres/tests/postgres.rs"
        )));
        assert!(!is_library_source(Path::new(
            "tests/durability/tests/common/mod.rs"
        )));
    }

    #[test]
    fn the_sources_are_named_relative_to_the_root() {
        let sources = workspace_sources();
        assert!(sources.iter().all(|path| path.is_relative()), "{sources:?}");
        assert!(
            sources.contains(&PathBuf::from("xtask/src/tidy.rs")),
            "{sources:?}"
        );
    }

    #[test]
    fn constructions_are_told_from_mentions() {
        for code in [
            "return Err(ValidationError::EmptyBatch(\"create_batch\").into());",
            "    DbError::Validation(concepts::ValidationError::InvalidRequest(format!(",
            "use concepts::ValidationError as Invalid;",
        ] {
            assert!(constructs_validation_error(code), "{code}");
        }
        for mention in [
            "use concepts::{DbError, ValidationError};",
            "impl From<concepts::ValidationError> for SqliteError {",
            "    // a ValidationError::InvalidRequest comes from the kernel",
            "/// Maps a [`ValidationError::EmptyBatch`] ...",
        ] {
            assert!(!constructs_validation_error(mention), "{mention}");
        }
    }
}
