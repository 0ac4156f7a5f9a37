//! Statements sent together: each with its parameters (for the multi-row ones, one array per
//! column, one element per row), prepared once per connection, sent in one pipeline and
//! answered in order.

use crate::error::map_pg_error;
use concepts::{DbError, ExecutionId};
use deadpool_postgres::ClientWrapper;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio_postgres::{Row, types::ToSql};

/// The round trips a store waited for ([`crate::PostgresStore::round_trips`] says what counts),
/// shared through the store's writer by every part of it that talks to the server.
#[derive(Debug, Default)]
pub(crate) struct Trips(AtomicU64);

impl Trips {
    pub(crate) fn one(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A parameter of a statement.
pub(crate) type Param<'a> = Box<dyn ToSql + Sync + Send + 'a>;

/// The parameters of a statement: each value boxed as a [`Param`].
macro_rules! params {
    ($($param:expr),* $(,)?) => {
        vec![$(Box::new($param) as crate::pipeline::Param<'_>),*]
    };
}
pub(crate) use params;

/// One statement of a pipeline.
pub(crate) struct Statement<'a> {
    pub(crate) sql: std::borrow::Cow<'static, str>,
    pub(crate) params: Vec<Param<'a>>,
}

/// The multi-row statement `$sql` over the items of `$items`: each `$column` an array of
/// `$ty`, with `$value` (of the item `$item`) as each row's element; `None` when there are no
/// items, so that a statement with nothing to do is never sent. Inside a function returning
/// `Result<_, DbError>`, a value may use `?`.
macro_rules! unnest {
    ($sql:expr, $items:expr, |$item:pat_param| { $($column:ident: $ty:ty = $value:expr),+ $(,)? }) => {{
        $(let mut $column: Vec<$ty> = Vec::new();)+
        for $item in $items {
            $($column.push($value);)+
        }
        let rows = [$($column.len()),+][0];
        (rows > 0).then(|| crate::pipeline::Statement {
            sql: $sql.into(),
            params: crate::pipeline::params![$($column),+],
        })
    }};
}
pub(crate) use unnest;

/// Prepares `statements` on `client` (each once per connection), in order.
pub(crate) async fn prepare(
    client: &ClientWrapper,
    statements: &[Statement<'_>],
) -> Result<Vec<tokio_postgres::Statement>, DbError> {
    let mut prepared = Vec::with_capacity(statements.len());
    for statement in statements {
        let next = client.prepare_cached(&statement.sql).await;
        prepared.push(next.map_err(map_pg_error)?);
    }
    Ok(prepared)
}

/// Runs the `prepared` `statements` in one pipeline: the rows of each, in order, or the first
/// error in statement order (after a failed statement every later one of a transaction fails
/// with "current transaction is aborted": the first one says why).
pub(crate) async fn run(
    client: &ClientWrapper,
    statements: &[Statement<'_>],
    prepared: &[tokio_postgres::Statement],
) -> Result<Vec<Vec<Row>>, tokio_postgres::Error> {
    let queries = statements
        .iter()
        .zip(prepared)
        .map(|(statement, prepared)| {
            let params: Vec<&(dyn ToSql + Sync)> = (statement.params.iter())
                .map(|param| param.as_ref() as &(dyn ToSql + Sync))
                .collect();
            async move { client.query(prepared, &params).await }
        });
    futures_util::future::join_all(queries)
        .await
        .into_iter()
        .collect()
}

/// Runs the statements that are present in one pipeline (after [`crate::load::BEGIN_WRITE`] when
/// `begin`): the rows of each, empty for the absent ones. The round trip counts in `trips`, if
/// not already counted.
pub(crate) async fn run_present<const N: usize>(
    client: &ClientWrapper,
    trips: Option<&Trips>,
    begin: bool,
    statements: [Option<Statement<'_>>; N],
) -> Result<[Vec<Row>; N], DbError> {
    let (positions, statements): (Vec<usize>, Vec<Statement<'_>>) = (statements.into_iter())
        .enumerate()
        .filter_map(|(i, statement)| Some((i, statement?)))
        .unzip();
    let prepared = prepare(client, &statements).await?;
    if let Some(trips) = trips {
        trips.one();
    }
    let (began, rows) = tokio::join!(
        biased;
        crate::load::begin_write(client, begin),
        run(client, &statements, &prepared),
    );
    began.map_err(map_pg_error)?;
    let mut results = std::array::from_fn(|_| Vec::new());
    for (position, rows) in positions.into_iter().zip(rows.map_err(map_pg_error)?) {
        results[position] = rows;
    }
    Ok(results)
}

/// One statement's parameters.
pub(crate) fn statement<'a>(
    sql: impl Into<std::borrow::Cow<'static, str>>,
    params: Vec<Param<'a>>,
) -> Statement<'a> {
    Statement {
        sql: sql.into(),
        params,
    }
}

/// Appends `part` to `sql` with each parameter `$n` renumbered `$(n + offset)`; returns the
/// highest `n` it found (0 for none).
pub(crate) fn push_renumbered(sql: &mut String, part: &str, offset: usize) -> usize {
    let (mut rest, mut highest) = (part, 0);
    while let Some(at) = rest.find('$') {
        let (before, after) = rest.split_at(at + 1);
        sql.push_str(before);
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let n: usize = (after[..digits].parse())
            .expect("every `$` of a write's statements starts a parameter's number");
        let _ = write!(sql, "{}", n + offset);
        highest = highest.max(n);
        rest = &after[digits..];
    }
    sql.push_str(rest);
    highest
}

/// `sql` over the ids `$1`, unless there are none.
pub(crate) fn for_ids<'a>(sql: &'static str, ids: &'a [ExecutionId]) -> Option<Statement<'a>> {
    let ids: Vec<&str> = ids.iter().map(ExecutionId::as_str).collect();
    (!ids.is_empty()).then(|| statement(sql, params![ids]))
}
