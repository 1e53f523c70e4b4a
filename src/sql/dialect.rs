//! Flink SQL's dialect, as a `sqlparser` [`Dialect`]: what Flink parses
//! parses, and every syntax error keeps its line and column.
//!
//! Over sqlparser's generic dialect it adds:
//! - `TABLE t` as the first argument of a window table function
//!   (`TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' SECOND)`), with
//!   SESSION's `PARTITION BY` (`SESSION(TABLE bid PARTITION BY bidder,
//!   DESCRIPTOR(ts), INTERVAL '5' MINUTE)`): see [`table_argument`].
//! - `t FOR SYSTEM_TIME AS OF e` on a join's table (a temporal join), as
//!   sqlparser's `TableVersion::ForSystemTimeAsOf`.
//! - Aliases as Calcite allows them: a word that is not one of Flink's
//!   reserved words that can follow a SELECT item or a table (`AS top`,
//!   `SELECT x top`, `FROM t top`).

use sqlparser::ast::{Expr, Ident};
use sqlparser::dialect::Dialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token;

use super::synthetic::call;
use super::SqlError;

/// Flink SQL (Calcite's grammar, as much of it as weir reads).
#[derive(Debug, Default, Clone, Copy)]
pub struct FlinkDialect;

/// The name a window function's `TABLE t` argument parses to: a call
/// `TABLE(t)`, or `TABLE(t, PARTITION_BY(a, b))` with SESSION's clause.
pub const TABLE_ARGUMENT: &str = "TABLE";
/// The call holding SESSION's `PARTITION BY` columns inside [`TABLE_ARGUMENT`].
pub const PARTITION_BY: &str = "PARTITION_BY";

/// Words that end a SELECT item or a table reference, so cannot be an
/// alias written without AS: the clauses and operators that may follow.
const NOT_AN_ALIAS: &[Keyword] = &[
    Keyword::FROM,
    Keyword::WHERE,
    Keyword::GROUP,
    Keyword::HAVING,
    Keyword::ORDER,
    Keyword::LIMIT,
    Keyword::OFFSET,
    Keyword::FETCH,
    Keyword::WINDOW,
    Keyword::UNION,
    Keyword::EXCEPT,
    Keyword::INTERSECT,
    Keyword::MINUS,
    Keyword::ON,
    Keyword::USING,
    Keyword::JOIN,
    Keyword::INNER,
    Keyword::LEFT,
    Keyword::RIGHT,
    Keyword::FULL,
    Keyword::CROSS,
    Keyword::NATURAL,
    Keyword::OUTER,
    Keyword::LATERAL,
    Keyword::FOR,
    Keyword::MATCH_RECOGNIZE,
    Keyword::TABLESAMPLE,
    Keyword::AS,
    Keyword::WITH,
    Keyword::SELECT,
    Keyword::VALUES,
    Keyword::INTO,
    Keyword::SET,
    Keyword::AND,
    Keyword::OR,
    Keyword::NOT,
    Keyword::IS,
    Keyword::IN,
    Keyword::BETWEEN,
    Keyword::LIKE,
    Keyword::ESCAPE,
    Keyword::CASE,
    Keyword::WHEN,
    Keyword::THEN,
    Keyword::ELSE,
    Keyword::END,
    Keyword::OVER,
    Keyword::FILTER,
    Keyword::PARTITION,
    Keyword::CREATE,
    Keyword::INSERT,
];

impl Dialect for FlinkDialect {
    /// sqlparser enables some syntax by the dialect's type (`UNNEST` in
    /// FROM, among others): Flink's is the generic dialect's, with the
    /// methods below on top.
    fn dialect(&self) -> std::any::TypeId {
        std::any::TypeId::of::<sqlparser::dialect::GenericDialect>()
    }

    fn is_identifier_start(&self, ch: char) -> bool {
        ch.is_alphabetic() || ch == '_' || ch == '$'
    }

    fn is_identifier_part(&self, ch: char) -> bool {
        ch.is_alphanumeric() || ch == '_' || ch == '$'
    }

    /// Flink quotes identifiers with backticks.
    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        ch == '`' || ch == '"'
    }

    fn supports_filter_during_aggregation(&self) -> bool {
        true
    }

    fn supports_table_versioning(&self) -> bool {
        true
    }

    fn supports_window_function_null_treatment_arg(&self) -> bool {
        true
    }

    fn is_column_alias(&self, kw: &Keyword, _parser: &mut Parser) -> bool {
        !NOT_AN_ALIAS.contains(kw)
    }

    fn is_table_alias(&self, kw: &Keyword, _parser: &mut Parser) -> bool {
        !NOT_AN_ALIAS.contains(kw)
    }

    fn parse_prefix(&self, parser: &mut Parser) -> Option<Result<Expr, ParserError>> {
        // `TABLE name` only where a window function's argument starts:
        // TABLE followed by a word that is not `(`.
        let is_table = matches!(&parser.peek_token_ref().token,
            Token::Word(w) if w.keyword == Keyword::TABLE);
        let then_name = matches!(&parser.peek_nth_token_ref(1).token, Token::Word(_));
        if is_table && then_name {
            return Some(table_argument(parser));
        }
        // The SQL/JSON calls whose clauses are not function arguments.
        let called = parser.peek_nth_token_ref(1).token == Token::LParen;
        match &parser.peek_token_ref().token {
            Token::Word(w) if called && w.value.eq_ignore_ascii_case("JSON_VALUE") => {
                Some(super::json_syntax::json_value(parser))
            }
            Token::Word(w) if called && w.value.eq_ignore_ascii_case("JSON_OBJECT") => {
                Some(super::json_syntax::json_object(parser))
            }
            Token::Word(w) if called && w.value.eq_ignore_ascii_case("JSON_ARRAY") => {
                Some(super::json_syntax::json_array(parser))
            }
            Token::Word(w) if called && w.value.eq_ignore_ascii_case("JSON_ARRAYAGG") => {
                Some(super::json_syntax::json_arrayagg(parser))
            }
            Token::Word(w) if called && w.value.eq_ignore_ascii_case("JSON_OBJECTAGG") => {
                Some(super::json_syntax::json_objectagg(parser))
            }
            // A cast to Flink's `ROW<...>` or `MAP<...>`, which sqlparser's
            // types do not read.
            Token::Word(w)
                if called
                    && matches!(w.keyword, Keyword::CAST | Keyword::TRY_CAST)
                    && angled_cast(parser) =>
            {
                Some(cast_to_written_type(parser))
            }
            // Flink's `MAP[k1, v1, k2, v2]`.
            Token::Word(w)
                if w.value.eq_ignore_ascii_case("MAP")
                    && parser.peek_nth_token_ref(1).token == Token::LBracket =>
            {
                Some(map_constructor(parser))
            }
            _ => None,
        }
    }

    fn parse_infix(
        &self,
        parser: &mut Parser,
        expr: &Expr,
        _precedence: u8,
    ) -> Option<Result<Expr, ParserError>> {
        // `s IS [NOT] JSON [VALUE | SCALAR | ARRAY | OBJECT]`.
        let word = |n: usize, k: Keyword| matches!(&parser.peek_nth_token_ref(n).token, Token::Word(w) if w.keyword == k);
        let is_json = word(0, Keyword::IS)
            && (word(1, Keyword::JSON) || (word(1, Keyword::NOT) && word(2, Keyword::JSON)));
        is_json.then(|| super::json_syntax::is_json(parser, expr.clone()))
    }
}

/// `TABLE t [PARTITION BY a, b]`: a call `TABLE(t)` or `TABLE(t,
/// PARTITION_BY(a, b))`, the call's name spanning the keyword so that an
/// error points at it. The columns of PARTITION BY run up to the next
/// `DESCRIPTOR`, or to the closing parenthesis.
fn table_argument(parser: &mut Parser) -> Result<Expr, ParserError> {
    let keyword = parser.next_token();
    let table = parser.parse_object_name(false)?;
    let table_expr = match table.0.len() {
        1 => Expr::Identifier(
            table.0[0]
                .as_ident()
                .cloned()
                .unwrap_or_else(|| Ident::new(table.to_string())),
        ),
        _ => Expr::CompoundIdentifier(
            table
                .0
                .iter()
                .map(|p| {
                    p.as_ident()
                        .cloned()
                        .unwrap_or_else(|| Ident::new(p.to_string()))
                })
                .collect(),
        ),
    };
    let mut args = vec![table_expr];
    let partition_at = parser.peek_token();
    if parser.parse_keywords(&[Keyword::PARTITION, Keyword::BY]) {
        let mut columns = Vec::new();
        loop {
            columns.push(Expr::Identifier(parser.parse_identifier()?));
            let more = parser.peek_token_ref().token == Token::Comma
                && !matches!(&parser.peek_nth_token_ref(1).token,
                    Token::Word(w) if w.value.eq_ignore_ascii_case("DESCRIPTOR"));
            if !more {
                break;
            }
            parser.next_token();
        }
        args.push(call(PARTITION_BY, partition_at.span, columns));
    }
    Ok(call(TABLE_ARGUMENT, keyword.span, args))
}

/// Whether the CAST ahead names a type with `<` in it: its tokens after
/// its `AS`, up to its closing parenthesis.
fn angled_cast(parser: &Parser) -> bool {
    let mut depth = 0usize;
    let mut after_as = false;
    for n in 2.. {
        match &parser.peek_nth_token_ref(n).token {
            Token::EOF => return false,
            Token::LParen => depth += 1,
            Token::RParen if depth == 0 => return false,
            Token::RParen => depth -= 1,
            Token::Word(w) if depth == 0 && w.keyword == Keyword::AS => after_as = true,
            Token::Lt if after_as => return true,
            _ => {}
        }
    }
    false
}

/// `CAST(e AS type)` (or TRY_CAST) whose type is read by weir's own type
/// parser: the type's tokens are kept as written, in a custom type name
/// that `sql_type` parses.
fn cast_to_written_type(parser: &mut Parser) -> Result<Expr, ParserError> {
    let keyword = parser.next_token();
    let kind = match &keyword.token {
        Token::Word(w) if w.keyword == Keyword::TRY_CAST => sqlparser::ast::CastKind::TryCast,
        _ => sqlparser::ast::CastKind::Cast,
    };
    parser.expect_token(&Token::LParen)?;
    let expr = parser.parse_expr()?;
    parser.expect_keyword(Keyword::AS)?;
    let mut text = String::new();
    let mut depth = 0usize;
    loop {
        let t = parser.next_token();
        match &t.token {
            Token::EOF => return parser.expected("the type's closing )", t),
            Token::RParen if depth == 0 => break,
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            _ => {}
        }
        text.push_str(&t.token.to_string());
        text.push(' ');
    }
    Ok(Expr::Cast {
        kind,
        expr: Box::new(expr),
        data_type: sqlparser::ast::DataType::Custom(
            sqlparser::ast::ObjectName::from(vec![Ident::new(text.trim_end())]),
            vec![],
        ),
        format: None,
    })
}

/// `MAP[k1, v1, ...]`: a call `MAP(k1, v1, ...)`.
fn map_constructor(parser: &mut Parser) -> Result<Expr, ParserError> {
    let keyword = parser.next_token();
    parser.expect_token(&Token::LBracket)?;
    let mut args = Vec::new();
    if !parser.consume_token(&Token::RBracket) {
        loop {
            args.push(parser.parse_expr()?);
            if !parser.consume_token(&Token::Comma) {
                parser.expect_token(&Token::RBracket)?;
                break;
            }
        }
    }
    Ok(call("MAP", keyword.span, args))
}

/// The statements of `sql`, or the syntax error with its line and column.
pub fn parse_statements(sql: &str) -> Result<Vec<sqlparser::ast::Statement>, SqlError> {
    Parser::new(&FlinkDialect)
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_statements())
        .map_err(|e| explained(parse_error(&e.to_string()), sql))
}

/// A syntax error at a construct Flink places elsewhere, said as such:
/// `t AS x FOR SYSTEM_TIME AS OF e` has the version after the alias.
fn explained(mut e: SqlError, sql: &str) -> SqlError {
    let Some(line) = sql.lines().nth((e.line as usize).wrapping_sub(1)) else {
        return e;
    };
    let at: String = line
        .chars()
        .skip(e.column.saturating_sub(1) as usize)
        .collect();
    let words: Vec<String> = at
        .split_whitespace()
        .take(4)
        .map(str::to_ascii_uppercase)
        .collect();
    // sqlparser stops at FOR, or at SYSTEM_TIME after reading FOR as the
    // start of FOR UPDATE.
    let before: String = line
        .chars()
        .take(e.column.saturating_sub(1) as usize)
        .collect();
    let trimmed = before.trim_end();
    let after_for = words.first().is_some_and(|w| w == "SYSTEM_TIME")
        && trimmed.to_ascii_uppercase().ends_with("FOR")
        && words.get(1..3).is_some_and(|w| w == ["AS", "OF"]);
    if after_for {
        e.column = (trimmed.chars().count() - 2) as u64;
        e.end = None;
    }
    if after_for || words == ["FOR", "SYSTEM_TIME", "AS", "OF"] {
        e.message = "FOR SYSTEM_TIME AS OF is not on the table of a join: it follows the name of a table on the right of a JOIN, before its alias (s JOIN t FOR SYSTEM_TIME AS OF s.time AS x ON ...)".into();
    }
    e
}

/// One expression (a computed column, a WATERMARK's delay).
pub fn parse_expr(sql: &str) -> Result<Expr, ParserError> {
    Parser::new(&FlinkDialect)
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_expr())
}

/// sqlparser's "... at Line: 3, Column: 12" as a located error.
fn parse_error(message: &str) -> SqlError {
    let re = regex::Regex::new(r"at Line: (\d+), Column: (\d+)").expect("a valid regex");
    let message = message.trim_start_matches("sql parser error: ");
    match re.captures(message) {
        Some(c) => SqlError {
            line: c[1].parse().unwrap_or(0),
            column: c[2].parse().unwrap_or(0),
            end: None,
            message: format!("syntax error: {}", re.replace(message, "").trim_end()),
        },
        None => SqlError::general(format!("syntax error: {message}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::ast::{SetExpr, Statement, TableFactor, TableVersion};

    fn select(sql: &str) -> Box<sqlparser::ast::Select> {
        let statements = parse_statements(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        let Statement::Query(q) = &statements[0] else {
            panic!("not a query")
        };
        let SetExpr::Select(s) = &*q.body else {
            panic!("not a select")
        };
        s.clone()
    }

    #[test]
    fn a_window_functions_table_argument_is_a_table_call() {
        let s =
            select("SELECT * FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' SECOND))");
        let TableFactor::TableFunction { expr, .. } = &s.from[0].relation else {
            panic!("{:?}", s.from[0].relation)
        };
        assert_eq!(
            expr.to_string(),
            "TUMBLE(TABLE(bid), DESCRIPTOR(ts), INTERVAL '10' SECOND)"
        );
    }

    #[test]
    fn sessions_partition_by_runs_to_the_descriptor() {
        let s = select(
            "SELECT * FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, auction, DESCRIPTOR(ts), INTERVAL '5' MINUTE))",
        );
        let TableFactor::TableFunction { expr, .. } = &s.from[0].relation else {
            panic!()
        };
        assert_eq!(
            expr.to_string(),
            "SESSION(TABLE(bid, PARTITION_BY(bidder, auction)), DESCRIPTOR(ts), INTERVAL '5' MINUTE)"
        );
    }

    #[test]
    fn for_system_time_as_of_is_the_tables_version_before_its_alias() {
        let s = select(
            "SELECT * FROM orders AS o JOIN rates FOR SYSTEM_TIME AS OF o.ts AS r ON o.c = r.c",
        );
        let TableFactor::Table { version, alias, .. } = &s.from[0].joins[0].relation else {
            panic!()
        };
        assert!(
            matches!(version, Some(TableVersion::ForSystemTimeAsOf(e)) if e.to_string() == "o.ts")
        );
        assert_eq!(alias.as_ref().unwrap().name.value, "r");
    }

    #[test]
    fn unnest_in_from_is_a_table_of_its_items() {
        let s = select("SELECT w FROM lines CROSS JOIN UNNEST(SPLIT(line, ' ')) AS t(w)");
        assert!(matches!(
            s.from[0].joins[0].relation,
            TableFactor::UNNEST { .. }
        ));
    }

    #[test]
    fn keywords_flink_does_not_reserve_are_aliases() {
        for sql in [
            "SELECT a AS top FROM t",
            "SELECT a top FROM t",
            "SELECT t.top FROM t AS top",
            "SELECT x.a FROM t top JOIN u x ON top.a = x.a",
            "SELECT a AS `value`, b AS `count` FROM t",
        ] {
            select(sql);
        }
        let s = select("SELECT a FROM t top WHERE a > 1");
        assert!(s.selection.is_some());
    }

    #[test]
    fn a_syntax_error_keeps_its_line_and_column() {
        let e = parse_statements("INSERT INTO s\nSELECT a,, b FROM t").unwrap_err();
        assert_eq!((e.line, e.column), (2, 10), "{e}");
        assert!(e.message.starts_with("syntax error"), "{e}");
        let e = parse_statements(
            "SELECT 1 FROM s JOIN t AS x\n  FOR SYSTEM_TIME AS OF s.ts ON s.k = x.k",
        )
        .unwrap_err();
        assert_eq!((e.line, e.column), (2, 3), "{e}");
        assert!(e.message.contains("before its alias"), "{e}");
    }
}
