//! JSON functions over JSON text in a VARCHAR, with SQL/JSON paths
//! (`$.a.b[0]`, `$['key']`) read once when the job is planned.

use super::super::compiled::Compiled;
use super::compose::{constant_text, strict, text};
use super::definition::{Call, Function};
use super::signature::{constant, p, Kind::*};
use crate::dataflow::row::{DataType as T, Value};

pub const FUNCTIONS: &[Function] = &[
    Function::new(
        "JSON_VALUE",
        &[p("json", Text), constant("path", Text)],
        "VARCHAR",
        json_value,
    )
    .doc(
        "the scalar at `path` in `json`, as text; NULL when it is absent, not a scalar, or \
         `json` is not JSON",
        "JSON_VALUE('{\"a\": {\"b\": [7, 8]}}', '$.a.b[1]')",
        "'8'",
    ),
    Function::new(
        "JSON_QUERY",
        &[p("json", Text), constant("path", Text)],
        "VARCHAR",
        json_query,
    )
    .doc(
        "the object or array at `path` in `json`, as JSON text; NULL when it is absent or a \
         scalar",
        "JSON_QUERY('{\"a\": {\"b\": [7, 8]}}', '$.a')",
        "'{\"b\":[7,8]}'",
    ),
    Function::new(
        "JSON_EXISTS",
        &[p("json", Text), constant("path", Text)],
        "BOOLEAN",
        json_exists,
    )
    .doc(
        "whether `json` has a value (JSON null included) at `path`; FALSE when `json` is not \
         JSON",
        "JSON_EXISTS('{\"a\": null}', '$.a')",
        "TRUE",
    ),
];

enum PathStep {
    Field(String),
    Index(usize),
}

/// `$.a.b[0]`: the steps of a SQL/JSON path in lax mode.
fn json_path(p: &str) -> Result<Vec<PathStep>, String> {
    let bad = || format!("{p:?} is not a JSON path like '$.a.b[0]'");
    let p = p.trim();
    let p = p.strip_prefix("lax").map_or(p, str::trim_start);
    let mut rest = p.strip_prefix('$').ok_or_else(bad)?;
    let mut out = Vec::new();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if end == 0 {
                return Err(bad());
            }
            out.push(PathStep::Field(r[..end].to_string()));
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']').ok_or_else(bad)?;
            let inner = r[..end].trim();
            match inner.parse() {
                Ok(i) => out.push(PathStep::Index(i)),
                Err(_) => out.push(PathStep::Field(
                    inner.trim_matches(|c| c == '\'' || c == '"').to_string(),
                )),
            }
            rest = &r[end + 1..];
        } else {
            return Err(bad());
        }
    }
    Ok(out)
}

/// The value at `path` in the JSON text `s`; None when `s` is not JSON
/// or the path leads nowhere.
fn find(s: &str, path: &[PathStep]) -> Option<serde_json::Value> {
    let mut j = serde_json::from_str::<serde_json::Value>(s).ok()?;
    for step in path {
        j = match (step, j) {
            (PathStep::Field(f), serde_json::Value::Object(mut m)) => m.remove(f)?,
            (PathStep::Index(i), serde_json::Value::Array(mut a)) if *i < a.len() => {
                a.swap_remove(*i)
            }
            _ => return None,
        };
    }
    Some(j)
}

/// The compiled path of argument 1, and the JSON argument alone.
fn path_and_json(args: Vec<Compiled>) -> Result<(Vec<PathStep>, Vec<Compiled>), String> {
    let path = json_path(&constant_text(&args, 1).unwrap_or_default())?;
    Ok((path, args.into_iter().take(1).collect()))
}

fn json_value(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let (path, json) = path_and_json(args)?;
    Ok(strict(T::String, json, move |v| {
        Ok(match find(text(&v[0]), &path) {
            Some(serde_json::Value::String(s)) => Value::String(s),
            Some(
                serde_json::Value::Null
                | serde_json::Value::Object(_)
                | serde_json::Value::Array(_),
            )
            | None => Value::Null,
            Some(other) => Value::String(other.to_string()),
        })
    }))
}

fn json_query(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let (path, json) = path_and_json(args)?;
    Ok(strict(T::String, json, move |v| {
        Ok(match find(text(&v[0]), &path) {
            Some(j @ (serde_json::Value::Object(_) | serde_json::Value::Array(_))) => {
                Value::String(j.to_string())
            }
            _ => Value::Null,
        })
    }))
}

fn json_exists(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let (path, json) = path_and_json(args)?;
    Ok(strict(T::Boolean, json, move |v| {
        Ok(Value::Bool(find(text(&v[0]), &path).is_some()))
    }))
}
