//! Unit tests of the node's argument handling and ids.

use super::*;

#[test]
fn database_urls_parse() {
    assert_eq!(
        DatabaseUrl::parse("sqlite:///tmp/x.sqlite").unwrap(),
        DatabaseUrl::Sqlite(PathBuf::from("/tmp/x.sqlite"))
    );
    assert_eq!(
        DatabaseUrl::parse("sqlite://rel.sqlite").unwrap(),
        DatabaseUrl::Sqlite(PathBuf::from("rel.sqlite"))
    );
    for url in ["postgres://u@h/db", "postgresql://u@h:5432/db?pool_size=4"] {
        assert_eq!(
            DatabaseUrl::parse(url).unwrap(),
            DatabaseUrl::Postgres(url.to_string())
        );
    }
    for bad in ["sqlite://", "x.sqlite", "mysql://h/db", ""] {
        let err = DatabaseUrl::parse(bad).unwrap_err().to_string();
        assert!(err.contains("sqlite://"), "{bad}: {err}");
    }
}

#[test]
fn the_command_line_parses() {
    let cli = Cli::try_parse_from([
        "durability-node",
        "run",
        "--database",
        "sqlite://x",
        "--executions",
        "5",
        "--role",
        "watcher",
    ])
    .unwrap();
    let Command::Run(args) = cli.command;
    assert_eq!(args.executions, 5);
    assert_eq!(args.role, Role::Watcher);
    assert_eq!(args.lock_expiry_ms, 1_500);
    assert!(Cli::try_parse_from(["durability-node", "run", "--executions", "5"]).is_err());
}

#[test]
fn the_multi_process_options_parse() {
    let cli = Cli::try_parse_from([
        "durability-node",
        "run",
        "--database",
        "postgres://u@h/db",
        "--executions",
        "5",
        "--role",
        "executor",
        "--submit",
        "never",
        "--executor-tick-ms",
        "10000",
        "--trace-waits",
    ])
    .unwrap();
    let Command::Run(args) = cli.command;
    assert_eq!(args.submit, Submit::Never);
    assert_eq!(args.executor_tick_ms, Some(10_000));
    assert_eq!(args.tick_ms, 100);
    assert!(args.trace_waits);
    let defaults = Cli::try_parse_from([
        "durability-node",
        "run",
        "--database",
        "sqlite://x",
        "--executions",
        "5",
    ])
    .unwrap();
    let Command::Run(defaults) = defaults.command;
    assert_eq!(defaults.submit, Submit::IfEmpty);
    assert_eq!(defaults.executor_tick_ms, None);
    assert!(!defaults.trace_waits);
}
