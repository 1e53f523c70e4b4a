//! SQL's scalar functions: a registry of every function by name
//! ([`registry`]), the signatures calls are checked against with Flink's
//! implicit casts ([`signature`]), and one module per family. Each call is
//! checked when the job is planned and prepared once (a constant pattern
//! or date format is compiled then, not per row).

pub mod arithmetic;
pub mod calendar;
pub mod collection;
pub mod compose;
pub mod conditional;
pub mod definition;
pub mod hash;
pub mod json;
pub mod numeric;
pub mod patterns;
pub mod refused;
pub mod registry;
pub mod signature;
pub mod string;
pub mod temporal;
pub mod user;

use sqlparser::ast::Expr as E;

use super::compiled::{err, Compiled};
use super::session::Session;
use super::SqlError;
use registry::CallError;
use signature::Kind;

pub use arithmetic::arithmetic;
pub use string::like;
pub use temporal::extract;

/// A built-in scalar function's call by its upper-case name, placed at
/// `e` for its errors.
pub fn call(name: &str, args: Vec<Compiled>, e: &E) -> Result<Compiled, SqlError> {
    call_in(&Session::default(), name, args, e)
}

/// A scalar function's call, built-in or one of `session`'s user-defined
/// functions (a built-in name comes first).
pub fn call_in(
    session: &Session,
    name: &str,
    args: Vec<Compiled>,
    e: &E,
) -> Result<Compiled, SqlError> {
    registry::call(name, args.clone(), &session.time_zone).or_else(|problem| match problem {
        CallError::Refused(m) => Err(err(e, m)),
        CallError::Unknown if session.functions.get_scalar(name).is_some() => {
            let f = session.functions.get_scalar(name).expect("just found");
            user::call(f, args).map_err(|m| err(e, m))
        }
        CallError::Unknown if session.functions.get_table(name).is_some() => Err(err(
            e,
            format!("{name} is a table function: call it in FROM, as LATERAL TABLE({name}(...))"),
        )),
        CallError::Unknown => {
            // Function names are short: a quarter of the name's letters
            // (at least one) may differ, so FOO is not taken for MOD.
            let names = session
                .functions
                .names()
                .chain(registry::names().map(shorter));
            let hint = super::names::closest(name, names, |_| (name.len() / 4).max(1))
                .map_or(String::new(), |n| format!("; did you mean {n}?"));
            Err(err(
                e,
                format!("unknown function {name}{hint} (docs/sql.md lists weir's functions)"),
            ))
        }
    })
}

/// A built-in name at the lifetime of a user's names beside it.
fn shorter<'a>(name: &'static str) -> &'a str {
    name
}

/// Whether argument `i` of `name` is a time unit written as a keyword
/// (`TIMESTAMPADD(DAY, ...)`), which the expression compiler passes as
/// its name rather than reading it as a column.
pub fn takes_unit(name: &str, i: usize) -> bool {
    registry::forms(name).is_some_and(|forms| {
        forms
            .iter()
            .any(|f| f.params.get(i).is_some_and(|p| p.kind == Kind::Unit))
    })
}

/// docs/sql.md's function reference, generated from the registry.
pub fn reference_markdown() -> String {
    let mut out = String::new();
    for family in registry::families() {
        out.push_str(&format!("\n### {}\n\n", family.title));
        out.push_str("| function | what it gives | example |\n|---|---|---|\n");
        for f in family.functions {
            // A second name of a function says which.
            let summary = if !f.summary.is_empty()
                && f.summary
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c == '_')
            {
                format!("as `{}`", f.summary)
            } else {
                f.summary.to_string()
            };
            let example = match f.example {
                ("", _) => String::new(),
                (call, result) => format!("`{call}` = `{result}`"),
            };
            out.push_str(&format!(
                "| `{}` | {} | {} |\n",
                f.signature().replace('|', "\\|"),
                summary.replace('|', "\\|"),
                example.replace('|', "\\|")
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::cast::rescale_round;
    use super::super::compiled::Ty;
    use super::*;
    use crate::dataflow::row::{DataType, Decimal, Value};

    #[test]
    fn decimals_round_half_away_from_zero() {
        let d = |u, s| Decimal {
            unscaled: u,
            scale: s,
        };
        assert_eq!({ rescale_round(d(12345, 3), 2).unwrap().unscaled }, 1235);
        assert_eq!({ rescale_round(d(-12345, 3), 2).unwrap().unscaled }, -1235);
        assert_eq!({ rescale_round(d(12, 0), 2).unwrap().unscaled }, 1200);
    }

    #[test]
    fn current_watermark_is_the_running_operators_and_null_before_its_first() {
        use crate::dataflow::operator::set_task_watermark;
        let e = E::Identifier(sqlparser::ast::Ident::new("date_time"));
        let column = Compiled::column(0, DataType::Timestamp);
        let f = call("CURRENT_WATERMARK", vec![column], &e).unwrap();
        assert_eq!(f.ty, Ty::Data(DataType::Timestamp));
        let row = [Value::Timestamp(10_000)];
        set_task_watermark(crate::time::MIN_WATERMARK);
        assert_eq!((f.eval)(&row), Ok(Value::Null));
        set_task_watermark(6_000);
        assert_eq!((f.eval)(&row), Ok(Value::Timestamp(6_000)));
        let text = Compiled::column(0, DataType::String);
        let refused = call("CURRENT_WATERMARK", vec![text], &e).unwrap_err();
        assert!(
            refused.message.contains("TIMESTAMP(3)"),
            "{}",
            refused.message
        );
    }

    #[test]
    fn words_split_on_unicode_whitespace_without_empty_words() {
        let e = E::Identifier(sqlparser::ast::Ident::new("line"));
        let f = call("WORDS", vec![Compiled::column(0, DataType::String)], &e).unwrap();
        assert_eq!(f.ty, Ty::Data(DataType::List(Box::new(DataType::String))));
        let words = |s: &str| match (f.eval)(&[Value::from(s)]) {
            Ok(Value::List(l)) => l
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            words("  Hello\u{3000}WORLD\t hello\u{a0}Ünï "),
            ["Hello", "WORLD", "hello", "Ünï"]
        );
        assert!(words(" \t ").is_empty());
        assert_eq!((f.eval)(&[Value::Null]), Ok(Value::Null));
    }

    #[test]
    fn lower_and_upper_change_case_in_place_for_ascii_and_by_unicode_otherwise() {
        let e = E::Identifier(sqlparser::ast::Ident::new("s"));
        let column = || Compiled::column(0, DataType::String);
        let lower = call("LOWER", vec![column()], &e).unwrap();
        let upper = call("UPPER", vec![column()], &e).unwrap();
        let on = |c: &Compiled, s: &str| (c.eval)(&[Value::from(s)]).unwrap();
        assert_eq!(on(&lower, "Hello WORLD"), Value::from("hello world"));
        assert_eq!(on(&lower, "ÀÉ İx"), Value::from("àé i\u{307}x"));
        assert_eq!(on(&upper, "straße"), Value::from("STRASSE"));
        assert_eq!((lower.eval)(&[Value::Null]), Ok(Value::Null));
        let folded = call(
            "LOWER",
            vec![Compiled::constant(
                Value::from("AB"),
                Ty::Data(DataType::String),
            )],
            &e,
        )
        .unwrap();
        assert_eq!(folded.constant, Some(Value::from("ab")));
    }

    #[test]
    fn the_functions_sql_syntax_stands_for_are_in_the_registry() {
        // `a || b`, SUBSTRING(s FROM i), TRIM(LEADING c FROM s),
        // POSITION(a IN b), FLOOR(t TO unit) and LISTAGG are compiled
        // into calls of these by name.
        for name in [
            "CONCAT",
            "SUBSTRING",
            "TRIM",
            "LTRIM",
            "RTRIM",
            "POSITION",
            "FLOOR",
            "CEIL",
            "ARRAY_JOIN",
        ] {
            assert!(registry::forms(name).is_some(), "{name}");
        }
        let source = include_str!("../expr.rs");
        for (i, _) in source.match_indices("functions::call(\"") {
            let name = source[i + 17..].split('"').next().unwrap();
            assert!(registry::forms(name).is_some(), "expr.rs calls {name}");
        }
    }

    #[test]
    fn an_unknown_function_is_named_with_the_nearest_known_one() {
        let e = E::Identifier(sqlparser::ast::Ident::new("f"));
        let column = || Compiled::column(0, DataType::String);
        let refused = call("LOWR", vec![column()], &e).unwrap_err();
        assert!(
            refused
                .message
                .contains("unknown function LOWR; did you mean LOWER?"),
            "{}",
            refused.message
        );
        let refused = call("FOO", vec![column()], &e).unwrap_err();
        assert!(
            refused
                .message
                .starts_with("unknown function FOO (docs/sql.md"),
            "{}",
            refused.message
        );
        // Every name the registry knows is known to `call` (its refusal,
        // with no arguments, is about arguments or determinism).
        for name in registry::names() {
            if let Err(refused) = call(name, Vec::new(), &e) {
                assert!(!refused.message.contains("unknown function"), "{name}");
            }
        }
    }
}
