//! JSON functions over JSON text in a VARCHAR, with SQL/JSON paths
//! (`$.a.b[0]`, `$['key']`) read once when the job is planned.

use super::super::cast::cast_value;
use super::super::compiled::{Compiled, Ty};
use super::compose::{all_constant, constant_text, fold_if, strict, text};
use super::definition::{Call, Function};
use super::signature::{any_number, constant, p, Kind::*};
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
        "JSON_VALUE",
        &[
            p("json", Text),
            constant("path", Text),
            constant("returning", Text),
            constant("on_empty", Text),
            p("empty_default", Any),
            constant("on_error", Text),
            p("error_default", Any),
        ],
        "the RETURNING type",
        json_value_returning,
    )
    .written(
        "JSON_VALUE(json VARCHAR, path VARCHAR constant [RETURNING type] [{NULL | ERROR | \
         DEFAULT x} ON EMPTY] [{NULL | ERROR | DEFAULT x} ON ERROR])",
    )
    .doc(
        "the scalar at `path` as `type` (VARCHAR if left out). ON EMPTY says what a path that \
         leads nowhere (or to a JSON null) gives, ON ERROR what text that is not JSON, an \
         object or array, or a scalar that does not convert to `type` gives: NULL (the \
         default), an error (the value is NULL, counted and logged: [Errors on \
         values](#errors-on-values)) or `x`",
        "JSON_VALUE('{\"a\": 5}', '$.b' RETURNING INT DEFAULT -1 ON EMPTY)",
        "-1",
    ),
    Function::new(
        "JSON_QUERY",
        &[p("json", Text), constant("path", Text)],
        "VARCHAR",
        json_query,
    )
    .doc(
        "the object or array at `path` in `json`, as compact JSON text with its keys in the \
         document's order; NULL when it is absent or a scalar",
        "JSON_QUERY('{\"a\": {\"z\": 1, \"b\": [7, 8]}}', '$.a')",
        "'{\"z\":1,\"b\":[7,8]}'",
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
    Function::new(
        "JSON_OBJECT",
        &[constant("nulls", Text), any_number(p("entry", Any))],
        "VARCHAR",
        json_object,
    )
    .written("JSON_OBJECT([KEY] k VARCHAR VALUE v ANY, ... [NULL | ABSENT ON NULL])")
    .doc(
        "a JSON object of the keys and values in order; a NULL value is `null` (NULL ON \
         NULL, the default) or left out (ABSENT ON NULL); a nested JSON_OBJECT or JSON_ARRAY \
         is inserted as JSON, any other text as a string; a NULL key is an error",
        "JSON_OBJECT(KEY 'a' VALUE 1, 'b' VALUE JSON_ARRAY(1, NULL, 'x'))",
        "'{\"a\":1,\"b\":[1,\"x\"]}'",
    ),
    Function::new(
        "JSON_ARRAY",
        &[constant("nulls", Text), any_number(p("value", Any))],
        "VARCHAR",
        json_array,
    )
    .written("JSON_ARRAY(v ANY, ... [NULL | ABSENT ON NULL])")
    .doc(
        "a JSON array of the values in order; a NULL is left out (ABSENT ON NULL, the \
         default) or `null` (NULL ON NULL); a nested JSON_OBJECT or JSON_ARRAY is inserted as \
         JSON",
        "JSON_ARRAY(1, 'a', NULL, TRUE NULL ON NULL)",
        "'[1,\"a\",null,true]'",
    ),
    Function::new(
        "IS_JSON",
        &[p("s", Text), constant("kind", Text)],
        "BOOLEAN",
        is_json,
    )
    .written("s VARCHAR IS [NOT] JSON [VALUE | SCALAR | ARRAY | OBJECT]")
    .doc(
        "whether `s` is JSON text (VALUE, the default), and of the kind named: a SCALAR \
         (string, number, boolean or null), an ARRAY or an OBJECT; FALSE for NULL",
        "'{\"a\": [1]}' IS JSON OBJECT",
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
    parsed(find_raw(s, path)?)
}

/// A raw JSON value parsed (it was checked as JSON when it was read).
fn parsed(raw: &serde_json::value::RawValue) -> Option<serde_json::Value> {
    serde_json::from_str(raw.get()).ok()
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
        Ok(match find_raw(text(&v[0]), &path) {
            Some(raw) if raw.get().starts_with(['{', '[']) => Value::String(compact(raw.get())),
            _ => Value::Null,
        })
    }))
}

/// The value at `path` in the JSON text `s`, as its text there: an
/// object keeps its keys in the document's order (Flink's JSON_QUERY
/// does; a parsed `serde_json::Value` would sort them), and only the value
/// found is parsed further. None when `s` is not JSON or the path leads
/// nowhere.
fn find_raw<'a>(s: &'a str, path: &[PathStep]) -> Option<&'a serde_json::value::RawValue> {
    walk(serde_json::from_str(s).ok()?, path)
}

/// The value at `path` below `at`: every JSON function's one path walk.
fn walk<'a>(
    mut at: &'a serde_json::value::RawValue,
    path: &[PathStep],
) -> Option<&'a serde_json::value::RawValue> {
    use serde_json::value::RawValue;
    for step in path {
        at = match step {
            PathStep::Field(f) => {
                let members: std::collections::HashMap<String, &'a RawValue> =
                    serde_json::from_str(at.get()).ok()?;
                *members.get(f)?
            }
            PathStep::Index(i) => {
                let items: Vec<&'a RawValue> = serde_json::from_str(at.get()).ok()?;
                *items.get(*i)?
            }
        };
    }
    Some(at)
}

/// JSON text without the whitespace between its tokens, each string
/// written as serde_json (and Jackson) write one: `"\u00e9"` as `"é"`.
fn compact(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let mut chars = json.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        if c == '"' {
            let mut escaped = false;
            let mut end = json.len();
            for (i, d) in chars.by_ref() {
                match (escaped, d) {
                    (true, _) => escaped = false,
                    (false, '\\') => escaped = true,
                    (false, '"') => {
                        end = i + 1;
                        break;
                    }
                    _ => {}
                }
            }
            let token = &json[start..end];
            match serde_json::from_str::<String>(token) {
                Ok(text) => out.push_str(&serde_json::Value::String(text).to_string()),
                Err(_) => out.push_str(token),
            }
        } else if !c.is_whitespace() {
            out.push(c);
        }
    }
    out
}

fn json_exists(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let (path, json) = path_and_json(args)?;
    Ok(strict(T::Boolean, json, move |v| {
        Ok(Value::Bool(find_raw(text(&v[0]), &path).is_some()))
    }))
}

/// What JSON_VALUE's ON EMPTY or ON ERROR does.
#[derive(Clone)]
enum Behaviour {
    Null,
    Error,
    Default(std::sync::Arc<super::super::compiled::EvalFn>),
}

impl Behaviour {
    fn of(
        kind: Option<String>,
        default: &Compiled,
        to: &T,
        clause: &'static str,
    ) -> Result<Self, String> {
        Ok(match kind.as_deref() {
            Some("ERROR") => Self::Error,
            Some("DEFAULT") => {
                let (f, to) = (default.eval.clone(), to.clone());
                Self::Default(std::sync::Arc::new(move |row| {
                    cast_value(f(row)?, &to)
                        .map_err(|m| format!("JSON_VALUE's DEFAULT ... ON {clause}: {m}"))
                }))
            }
            _ => Self::Null,
        })
    }

    fn apply(&self, row: &[Value], why: String) -> Result<Value, String> {
        match self {
            Self::Null => Ok(Value::Null),
            Self::Error => Err(why),
            Self::Default(f) => f(row),
        }
    }
}

/// A JSON scalar as a weir value, before its cast to the RETURNING type.
fn scalar(j: serde_json::Value) -> Value {
    match j {
        serde_json::Value::Bool(b) => Value::Bool(b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => n.as_f64().map_or(Value::Null, Value::Double),
        },
        serde_json::Value::String(s) => Value::String(s),
        other => Value::String(other.to_string()),
    }
}

fn json_value_returning(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let path = json_path(&constant_text(&args, 1).unwrap_or_default())?;
    let to = crate::sql::types::parse_type(&constant_text(&args, 2).unwrap_or_default())
        .map_err(|m| format!("JSON_VALUE's RETURNING type: {m}"))?;
    let empty = Behaviour::of(constant_text(&args, 3), &args[4], &to, "EMPTY")?;
    let error = Behaviour::of(constant_text(&args, 5), &args[6], &to, "ERROR")?;
    let (json, target) = (args[0].eval.clone(), to.clone());
    Ok(Compiled::new(Ty::Data(to), move |row| {
        let s = match json(row)? {
            Value::Null => return Ok(Value::Null),
            v => text(&v).to_string(),
        };
        let Ok(doc) = serde_json::from_str::<&serde_json::value::RawValue>(&s) else {
            return error.apply(row, "JSON_VALUE: the text is not JSON".into());
        };
        match walk(doc, &path).and_then(parsed) {
            None | Some(serde_json::Value::Null) => {
                empty.apply(row, "JSON_VALUE: nothing at the path".into())
            }
            Some(j @ (serde_json::Value::Object(_) | serde_json::Value::Array(_))) => error.apply(
                row,
                format!(
                    "JSON_VALUE: the path leads to {}, not a scalar",
                    if j.is_object() {
                        "an object"
                    } else {
                        "an array"
                    }
                ),
            ),
            Some(j) => match cast_value(scalar(j), &target) {
                Ok(v) => Ok(v),
                Err(m) => error.apply(row, format!("JSON_VALUE: {m}")),
            },
        }
    }))
}

/// A JSON array of `items` (a NULL left out unless `keep_nulls`), each
/// inserted as JSON when its flag says it is (a nested constructor's
/// text): JSON_ARRAY's and JSON_ARRAYAGG's.
pub fn array_text<'a>(
    items: impl IntoIterator<Item = (&'a Value, bool)>,
    keep_nulls: bool,
) -> String {
    let items: Vec<String> = items
        .into_iter()
        .filter(|(v, _)| keep_nulls || !v.is_null())
        .map(|(v, raw)| member(v, raw))
        .collect();
    format!("[{}]", items.join(","))
}

/// Appends `"key":value` to the object text `out` (which holds `{` and
/// the members so far).
fn push_member(out: &mut String, key: &str, v: &Value, raw: bool) {
    if out.len() > 1 {
        out.push(',');
    }
    out.push_str(&serde_json::Value::String(key.to_string()).to_string());
    out.push(':');
    out.push_str(&member(v, raw));
}

/// A JSON object of `pairs` in order (a NULL value left out unless
/// `keep_nulls`); Err for a NULL or repeated key.
pub fn object_text<'a>(
    pairs: impl IntoIterator<Item = (&'a Value, &'a Value)>,
    keep_nulls: bool,
    raw: bool,
) -> Result<String, String> {
    let mut seen = std::collections::HashSet::new();
    let mut out = String::from("{");
    for (k, v) in pairs {
        let Value::String(key) = k else {
            return Err("a JSON object's key is NULL".into());
        };
        if !seen.insert(key.clone()) {
            return Err(format!("the key {key:?} twice in a JSON object"));
        }
        if v.is_null() && !keep_nulls {
            continue;
        }
        push_member(&mut out, key, v, raw);
    }
    out.push('}');
    Ok(out)
}

/// The options argument of JSON_OBJECT and JSON_ARRAY (`"NULL;TJ"`):
/// whether a NULL value is kept, and per value whether it is JSON.
pub fn options(args: &[Compiled]) -> (bool, Vec<bool>) {
    let o = constant_text(args, 0).unwrap_or_default();
    let (nulls, kinds) = o.split_once(';').unwrap_or((o.as_str(), ""));
    (nulls == "NULL", kinds.chars().map(|k| k == 'J').collect())
}

/// A value's JSON text inside an object or an array.
fn member(v: &Value, raw: bool) -> String {
    match v {
        Value::String(s) if raw => s.clone(),
        v => crate::dataflow::json::value_json(v).to_string(),
    }
}

fn json_object(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let (keep_nulls, raw) = options(&args);
    let entries: Vec<_> = args[1..].iter().map(|a| a.eval.clone()).collect();
    if entries.len() % 2 != 0 {
        return Err("JSON_OBJECT takes KEY k VALUE v pairs".into());
    }
    for (i, k) in args[1..].iter().step_by(2).enumerate() {
        if !matches!(k.ty, Ty::Data(T::String) | Ty::Null) {
            return Err(format!(
                "JSON_OBJECT's key {} must be VARCHAR, not {}",
                i + 1,
                k.ty
            ));
        }
    }
    let constant = all_constant(&args);
    Ok(fold_if(
        constant,
        Compiled::new(Ty::Data(T::String), move |row| {
            let mut out = String::from("{");
            for (i, pair) in entries.chunks(2).enumerate() {
                let key = match pair[0](row)? {
                    Value::String(k) => k,
                    _ => return Err(format!("JSON_OBJECT's key {} is NULL", i + 1)),
                };
                let value = pair[1](row)?;
                if value.is_null() && !keep_nulls {
                    continue;
                }
                push_member(&mut out, &key, &value, raw.get(i).copied().unwrap_or(false));
            }
            out.push('}');
            Ok(Value::String(out))
        }),
    ))
}

fn json_array(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let (keep_nulls, raw) = options(&args);
    let values: Vec<_> = args[1..].iter().map(|a| a.eval.clone()).collect();
    let constant = all_constant(&args);
    Ok(fold_if(
        constant,
        Compiled::new(Ty::Data(T::String), move |row| {
            let items = values
                .iter()
                .map(|f| f(row))
                .collect::<Result<Vec<_>, _>>()?;
            let flags = raw.iter().copied().chain(std::iter::repeat(false));
            Ok(Value::String(array_text(
                items.iter().zip(flags),
                keep_nulls,
            )))
        }),
    ))
}

fn is_json(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let kind = constant_text(&args, 1).unwrap_or_else(|| "VALUE".into());
    let s = args[0].eval.clone();
    let constant = all_constant(&args);
    Ok(fold_if(
        constant,
        Compiled::new(Ty::Data(T::Boolean), move |row| {
            let j = match s(row)? {
                Value::String(t) => serde_json::from_str::<serde_json::Value>(&t).ok(),
                _ => None,
            };
            Ok(Value::Bool(match (j, kind.as_str()) {
                (None, _) => false,
                (Some(j), "SCALAR") => !j.is_object() && !j.is_array(),
                (Some(j), "ARRAY") => j.is_array(),
                (Some(j), "OBJECT") => j.is_object(),
                (Some(_), _) => true,
            }))
        }),
    ))
}
