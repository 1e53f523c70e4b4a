//! A source's `schema`: a SQL column list, as Flink's `CREATE TABLE` body
//! writes it.
//!
//! ```text
//! auction BIGINT, price DECIMAL(10, 2), date_time TIMESTAMP(3),
//! day AS DATE_FORMAT(date_time, 'yyyy-MM-dd'),
//! WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
//! ```
//!
//! Physical columns are read from the record (JSON fields by name);
//! computed columns are expressions over them, evaluated as the record is
//! decoded; the watermark names the event-time column and how far behind
//! the highest time seen per partition the watermark stays.

use sqlparser::ast::{BinaryOperator, Expr as E};

use super::types::parse_type;
use crate::dataflow::row::{Field, Schema};

/// One source's columns as its `schema` declares them.
#[derive(Debug, Clone)]
pub struct TableSchema {
    /// The columns read from each record.
    pub physical: Schema,
    /// Computed columns, in order, after the physical ones.
    pub computed: Vec<(String, E)>,
    /// The event-time column and the watermark's delay in milliseconds.
    pub watermark: Option<(String, i64)>,
}

/// Splits at commas outside parentheses, angle brackets and quotes.
fn split_items(text: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut quote, mut start) = (0i32, None, 0);
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"' | '`') => quote = Some(c),
            (None, '(' | '<') => depth += 1,
            (None, ')' | '>') => depth -= 1,
            (None, ',') if depth == 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&text[start..]);
    items
        .into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

/// The first word of `item` (bare or quoted) and the rest.
fn first_word(item: &str) -> (String, &str) {
    let item = item.trim_start();
    if let Some(q @ ('`' | '"')) = item.chars().next() {
        if let Some(end) = item[1..].find(q) {
            return (item[1..1 + end].to_string(), &item[end + 2..]);
        }
    }
    let end = item
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(item.len());
    (item[..end].to_string(), &item[end..])
}

fn parse_expr(text: &str) -> Result<E, String> {
    super::dialect::parse_expr(text).map_err(|e| format!("{e}"))
}

/// Whether a column of that name (in any case) is declared already.
fn declared(fields: &[Field], computed: &[(String, E)], name: &str) -> bool {
    fields.iter().any(|f| f.name.eq_ignore_ascii_case(name))
        || computed.iter().any(|(c, _)| c.eq_ignore_ascii_case(name))
}

/// Parses a `schema`; Err names the item that is wrong.
pub fn parse_schema(text: &str) -> Result<TableSchema, String> {
    let mut fields: Vec<Field> = Vec::new();
    let mut computed = Vec::new();
    let mut watermark = None;
    for (n, item) in split_items(text).into_iter().enumerate() {
        let at = |m: String| format!("item {} ({item:?}): {m}", n + 1);
        let (name, rest) = first_word(item);
        if name.is_empty() {
            return Err(at("expected a column name".into()));
        }
        let rest = rest.trim();
        if name.eq_ignore_ascii_case("WATERMARK")
            && rest.len() > 3
            && rest[..3].eq_ignore_ascii_case("FOR")
        {
            let (column, tail) = first_word(&rest[3..]);
            let tail = tail.trim();
            let Some(expr) = tail
                .get(..2)
                .filter(|s| s.eq_ignore_ascii_case("AS"))
                .map(|_| &tail[2..])
            else {
                return Err(at(
                    "expected WATERMARK FOR column AS column - INTERVAL '..' SECOND".into(),
                ));
            };
            let e = parse_expr(expr).map_err(at)?;
            let delay = match &e {
                E::Identifier(i) if i.value.eq_ignore_ascii_case(&column) => 0,
                E::BinaryOp {
                    left,
                    op: BinaryOperator::Minus,
                    right,
                } if matches!(left.as_ref(), E::Identifier(i) if i.value.eq_ignore_ascii_case(&column)) => {
                    match right.as_ref() {
                        E::Interval(i) => {
                            super::expr::interval(i, &e).map_err(|m| at(m.message))?
                        }
                        _ => return Err(at("the watermark subtracts an INTERVAL".into())),
                    }
                }
                _ => {
                    return Err(at(format!(
                        "the watermark is {column} or {column} - INTERVAL '..' SECOND (a bounded \
                         delay)"
                    )))
                }
            };
            if watermark.is_some() {
                return Err(at("a source has one WATERMARK".into()));
            }
            watermark = Some((column, delay));
            continue;
        }
        if rest.len() > 2
            && rest[..2].eq_ignore_ascii_case("AS")
            && rest[2..].starts_with(char::is_whitespace)
        {
            let e = parse_expr(&rest[2..]).map_err(at)?;
            if declared(&fields, &computed, &name) {
                return Err(at(format!("column {name:?} is declared twice")));
            }
            computed.push((name, e));
            continue;
        }
        if declared(&fields, &computed, &name) {
            return Err(at(format!("column {name:?} is declared twice")));
        }
        let t = parse_type(rest).map_err(at)?;
        fields.push(Field::new(name, t));
    }
    if let Some((column, _)) = &watermark {
        let physical = fields.iter().find(|f| f.name.eq_ignore_ascii_case(column));
        match physical {
            Some(f) if !f.data_type.is_timestamp() => {
                return Err(format!(
                    "WATERMARK FOR {column}: the column is {}, not TIMESTAMP(3)",
                    f.data_type
                ))
            }
            // Without physical columns they come from a registry's schema:
            // the planner checks the column there.
            None if !fields.is_empty()
                && !computed.iter().any(|(c, _)| c.eq_ignore_ascii_case(column)) =>
            {
                return Err(format!("WATERMARK FOR {column}: no such column"))
            }
            _ => {}
        }
    }
    Ok(TableSchema {
        physical: Schema::new(fields),
        computed,
        watermark,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nexmark_bid_schema_parses() {
        let s = parse_schema(
            "auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
             date_time TIMESTAMP(3), extra VARCHAR, person ROW<name VARCHAR, city VARCHAR>,
             day AS DATE_FORMAT(date_time, 'yyyy-MM-dd'),
             WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND",
        )
        .unwrap();
        assert_eq!(s.physical.len(), 8);
        assert_eq!(s.computed.len(), 1);
        assert_eq!(s.watermark, Some(("date_time".into(), 4000)));
    }

    #[test]
    fn mistakes_name_their_item() {
        let e = parse_schema("a BIGINT, b BIGNT").unwrap_err();
        assert!(
            e.contains("item 2") && e.contains("unknown type BIGNT"),
            "{e}"
        );
        let e = parse_schema("a BIGINT, WATERMARK FOR a AS a - INTERVAL '1' SECOND").unwrap_err();
        assert!(e.contains("not TIMESTAMP(3)"), "{e}");
        let e = parse_schema("t TIMESTAMP(3), WATERMARK FOR t AS t * 2").unwrap_err();
        assert!(e.contains("bounded"), "{e}");
        let e = parse_schema("price BIGINT, PRICE AS price * 2").unwrap_err();
        assert!(e.contains("item 2") && e.contains("declared twice"), "{e}");
    }
}
