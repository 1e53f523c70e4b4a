//! The SQL/JSON forms whose clauses are not function arguments, parsed by
//! weir's dialect ([`super::dialect`]) into calls of the function
//! registry's JSON functions ([`super::functions::json`]):
//!
//! - `JSON_VALUE(json, path [RETURNING type] [{NULL | ERROR | DEFAULT x}
//!   ON EMPTY] [{NULL | ERROR | DEFAULT x} ON ERROR])`: with any clause, a
//!   call of seven arguments (json, path, the type's name, the EMPTY
//!   behaviour and its default, the ERROR behaviour and its default);
//! - `JSON_OBJECT([KEY] k VALUE v, ... [NULL | ABSENT ON NULL])` and
//!   `JSON_ARRAY(v, ... [NULL | ABSENT ON NULL])`: a call whose first
//!   argument is a constant `"<NULL|ABSENT>;<kinds>"`, a kind per value:
//!   `J` for a nested JSON_OBJECT or JSON_ARRAY (inserted as JSON, not as
//!   a string), `T` for any other value;
//! - `s IS [NOT] JSON [VALUE | SCALAR | ARRAY | OBJECT]`: `IS_JSON(s,
//!   kind)`, under NOT.

use sqlparser::ast::{Expr, UnaryOperator, Value};
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token;

use super::synthetic::call;

fn text(s: &str) -> Expr {
    Expr::Value(Value::SingleQuotedString(s.to_string()).into())
}

fn null() -> Expr {
    Expr::Value(Value::Null.into())
}

/// `NULL`, `ERROR` or `DEFAULT x` before `ON EMPTY` / `ON ERROR`.
fn behaviour(parser: &mut Parser) -> Result<Option<(&'static str, Expr)>, ParserError> {
    // `NULL ON NULL` is not a behaviour of JSON_VALUE; NULL followed by
    // ON is.
    let on_next = matches!(&parser.peek_nth_token_ref(1).token,
        Token::Word(w) if w.keyword == Keyword::ON);
    if on_next && parser.parse_keyword(Keyword::NULL) {
        return Ok(Some(("NULL", null())));
    }
    if on_next && parser.parse_keyword(Keyword::ERROR) {
        return Ok(Some(("ERROR", null())));
    }
    if parser.parse_keyword(Keyword::DEFAULT) {
        return Ok(Some(("DEFAULT", parser.parse_expr()?)));
    }
    Ok(None)
}

pub fn json_value(parser: &mut Parser) -> Result<Expr, ParserError> {
    let name = parser.next_token();
    parser.expect_token(&Token::LParen)?;
    let json = parser.parse_expr()?;
    parser.expect_token(&Token::Comma)?;
    let path = parser.parse_expr()?;
    let returning = if parser.parse_keyword(Keyword::RETURNING) {
        Some(parser.parse_data_type()?.to_string())
    } else {
        None
    };
    let (mut empty, mut error) = (None, None);
    while let Some(b) = behaviour(parser)? {
        parser.expect_keyword(Keyword::ON)?;
        if parser.parse_keyword(Keyword::EMPTY) {
            empty = Some(b);
        } else if parser.parse_keyword(Keyword::ERROR) {
            error = Some(b);
        } else {
            return parser.expected("EMPTY or ERROR", parser.peek_token());
        }
    }
    parser.expect_token(&Token::RParen)?;
    if returning.is_none() && empty.is_none() && error.is_none() {
        return Ok(call("JSON_VALUE", name.span, vec![json, path]));
    }
    let (on_empty, empty_default) = empty.unwrap_or(("NULL", null()));
    let (on_error, error_default) = error.unwrap_or(("NULL", null()));
    Ok(call(
        "JSON_VALUE",
        name.span,
        vec![
            json,
            path,
            text(returning.as_deref().unwrap_or("VARCHAR")),
            text(on_empty),
            empty_default,
            text(on_error),
            error_default,
        ],
    ))
}

/// `NULL ON NULL` or `ABSENT ON NULL`, if next.
fn on_null(parser: &mut Parser) -> Option<&'static str> {
    if parser.parse_keywords(&[Keyword::NULL, Keyword::ON, Keyword::NULL]) {
        Some("NULL")
    } else if parser.parse_keywords(&[Keyword::ABSENT, Keyword::ON, Keyword::NULL]) {
        Some("ABSENT")
    } else {
        None
    }
}

/// Whether `v` is JSON to insert as it is: a nested constructor's.
fn kind(v: &Expr) -> char {
    match v {
        Expr::Function(f)
            if ["JSON_OBJECT", "JSON_ARRAY"]
                .iter()
                .any(|n| f.name.to_string().eq_ignore_ascii_case(n)) =>
        {
            'J'
        }
        _ => 'T',
    }
}

/// The entries of JSON_OBJECT (`pairs`) or JSON_ARRAY, up to `)`, and the
/// NULL clause (`default` without one).
fn constructor(parser: &mut Parser, pairs: bool, default: &str) -> Result<Vec<Expr>, ParserError> {
    parser.expect_token(&Token::LParen)?;
    let mut args = Vec::new();
    let mut kinds = String::new();
    let mut nulls = default.to_string();
    loop {
        if let Some(n) = on_null(parser) {
            nulls = n.to_string();
            parser.expect_token(&Token::RParen)?;
            break;
        }
        if parser.consume_token(&Token::RParen) {
            break;
        }
        if pairs {
            let _ = parser.parse_keyword(Keyword::KEY);
            args.push(parser.parse_expr()?);
            parser.expect_keyword(Keyword::VALUE)?;
        }
        let v = parser.parse_expr()?;
        kinds.push(kind(&v));
        args.push(v);
        if !parser.consume_token(&Token::Comma) {
            if let Some(n) = on_null(parser) {
                nulls = n.to_string();
            }
            parser.expect_token(&Token::RParen)?;
            break;
        }
    }
    args.insert(0, text(&format!("{nulls};{kinds}")));
    Ok(args)
}

/// JSON_OBJECT: NULL ON NULL unless told otherwise, as in Flink.
pub fn json_object(parser: &mut Parser) -> Result<Expr, ParserError> {
    let name = parser.next_token();
    let args = constructor(parser, true, "NULL")?;
    Ok(call("JSON_OBJECT", name.span, args))
}

/// JSON_ARRAY: ABSENT ON NULL unless told otherwise, as in Flink.
pub fn json_array(parser: &mut Parser) -> Result<Expr, ParserError> {
    let name = parser.next_token();
    let args = constructor(parser, false, "ABSENT")?;
    Ok(call("JSON_ARRAY", name.span, args))
}

/// JSON_ARRAYAGG(v [NULL | ABSENT ON NULL]): ABSENT ON NULL unless told
/// otherwise, as in Flink.
pub fn json_arrayagg(parser: &mut Parser) -> Result<Expr, ParserError> {
    let name = parser.next_token();
    let args = constructor(parser, false, "ABSENT")?;
    if args.len() != 2 {
        return parser.expected("one value in JSON_ARRAYAGG", parser.peek_token());
    }
    Ok(call("JSON_ARRAYAGG", name.span, args))
}

/// JSON_OBJECTAGG([KEY] k VALUE v [NULL | ABSENT ON NULL]): NULL ON NULL
/// unless told otherwise, as in Flink.
pub fn json_objectagg(parser: &mut Parser) -> Result<Expr, ParserError> {
    let name = parser.next_token();
    let args = constructor(parser, true, "NULL")?;
    if args.len() != 3 {
        return parser.expected("one KEY k VALUE v in JSON_OBJECTAGG", parser.peek_token());
    }
    Ok(call("JSON_OBJECTAGG", name.span, args))
}

/// `expr IS [NOT] JSON [VALUE | SCALAR | ARRAY | OBJECT]`, from IS on.
pub fn is_json(parser: &mut Parser, expr: Expr) -> Result<Expr, ParserError> {
    let is = parser.next_token();
    let not = parser.parse_keyword(Keyword::NOT);
    parser.expect_keyword(Keyword::JSON)?;
    let kind = match parser.parse_one_of_keywords(&[
        Keyword::VALUE,
        Keyword::SCALAR,
        Keyword::ARRAY,
        Keyword::OBJECT,
    ]) {
        Some(Keyword::SCALAR) => "SCALAR",
        Some(Keyword::ARRAY) => "ARRAY",
        Some(Keyword::OBJECT) => "OBJECT",
        _ => "VALUE",
    };
    let test = call("IS_JSON", is.span, vec![expr, text(kind)]);
    Ok(if not {
        Expr::UnaryOp {
            op: UnaryOperator::Not,
            expr: Box::new(test),
        }
    } else {
        test
    })
}
