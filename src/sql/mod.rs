//! Jobs in SQL: `[sources.NAME]` tables, `[sinks.NAME]` topics and the
//! statements of `[pipeline] sql`, compiled onto the job graph
//! ([`crate::dataflow`]) through the same builder a Rust job uses, so a
//! SQL job runs on the one engine in both modes with every guarantee a
//! job has (docs/sql.md).
//!
//! - [`types`]: SQL type names as weir's data types.
//! - [`schema`]: a source's column list, computed columns and watermark.
//! - [`expr`], [`functions`]: expressions compiled once into closures.
//! - [`dialect`]: Flink's SQL syntax, through sqlparser.
//! - [`bind`]: statements into a [`plan::LogicalPlan`], clause by clause.
//! - [`plan`]: the logical plan's nodes, each with its changelog mode,
//!   and their lowering onto the job graph.

pub mod aggregates;
pub mod bind;
pub mod cast;
pub mod compiled;
pub mod dialect;
pub mod expr;
pub mod formats;
pub mod functions;
pub mod joins;
pub mod json_syntax;
pub mod names;
pub mod plan;
pub mod schema;
pub mod session;
mod synthetic;
pub mod types;

use std::fmt;

use sqlparser::tokenizer::Span;

pub use bind::{plan, Plan};

/// One SQL expression over named, typed columns, compiled as a job's
/// would be: what the function reference's examples and the function
/// tests evaluate. A row gives the columns' values in order.
pub fn expression(
    text: &str,
    columns: &[(&str, crate::dataflow::row::DataType)],
) -> Result<compiled::Compiled, SqlError> {
    expression_in_zone(text, columns, "UTC")
}

/// As [`expression`], in the session time zone `time_zone` (as `[pipeline]
/// time_zone` gives it).
pub fn expression_in_zone(
    text: &str,
    columns: &[(&str, crate::dataflow::row::DataType)],
    time_zone: &str,
) -> Result<compiled::Compiled, SqlError> {
    let session = session::Session {
        time_zone: session::time_zone(time_zone).map_err(SqlError::general)?,
        ..session::Session::default()
    };
    let e = dialect::parse_expr(text).map_err(|m| SqlError::general(m.to_string()))?;
    let columns: Vec<expr::ScopeColumn> = columns
        .iter()
        .map(|(name, ty)| expr::ScopeColumn {
            name: name.to_string(),
            qualifier: None,
            ty: ty.clone(),
        })
        .collect();
    expr::compile(&e, &mut expr::Scope::plain(&columns, &session))
}

/// One problem in a job's SQL, where it is.
#[derive(Debug, Clone, PartialEq)]
pub struct SqlError {
    /// 1-based; 0 when the problem has no place in the text.
    pub line: u64,
    pub column: u64,
    /// Where the offending text ends (line, column), if known.
    pub end: Option<(u64, u64)>,
    pub message: String,
}

impl SqlError {
    pub fn at(span: Span, message: impl Into<String>) -> Self {
        let end = (span.end.line > 0).then_some((span.end.line, span.end.column));
        Self {
            line: span.start.line,
            column: span.start.column,
            end,
            message: message.into(),
        }
    }

    pub fn general(message: impl Into<String>) -> Self {
        Self {
            line: 0,
            column: 0,
            end: None,
            message: message.into(),
        }
    }

    /// `origin:line:column: message`, then the offending text of `sql`
    /// with a caret under where it starts.
    pub fn render(&self, origin: &str, sql: &str) -> String {
        if self.line == 0 {
            return format!("{origin}: {}", self.message);
        }
        let mut out = format!("{origin}:{}:{}: {}", self.line, self.column, self.message);
        if let Some(text) = sql.lines().nth(self.line as usize - 1) {
            let caret_at = text
                .chars()
                .take(self.column.saturating_sub(1) as usize)
                .map(|c| if c == '\t' { '\t' } else { ' ' })
                .collect::<String>();
            let width = match self.end {
                Some((l, c)) if l == self.line && c > self.column => (c - self.column) as usize,
                _ => 1,
            };
            out.push_str(&format!(
                "\n    {text}\n    {caret_at}{}",
                "^".repeat(width)
            ));
        }
        out
    }
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}:{}: {}", self.line, self.column, self.message)
        }
    }
}

/// Values an expression could not compute (an overflow, a division by
/// zero, a bad cast) and wrote as NULL instead.
pub static EVAL_ERRORS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Counts an evaluation error, logging the first and then every
/// power-of-two-th, so a stream of bad values does not flood the log.
pub fn note_eval_error(operator: &str, message: &str) {
    crate::observe::metrics::EXPRESSION_ERRORS
        .with_label_values(&[operator])
        .inc();
    let n = EVAL_ERRORS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    if n.is_power_of_two() {
        tracing::warn!(
            operator,
            error = message,
            errors_so_far = n,
            "a SQL expression failed on a value; the result is NULL"
        );
    }
}
