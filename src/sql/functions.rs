//! Scalar functions and arithmetic of weir's SQL, each checked against its
//! arguments' types when the job is planned and prepared once (a constant
//! pattern or date format is compiled then, not per row).

use std::sync::Arc;

use sqlparser::ast::Expr as E;

use super::cast::{
    as_decimal_type, common_type, decimal_type, numeric, rescale_round, to_text, wider,
};
use super::compiled::{err, Compiled, EvalFn, Ty};
use super::SqlError;
use crate::dataflow::json::{format_timestamp, parse_timestamp};
use crate::dataflow::row::{DataType, Decimal, Value};

type Result<T> = std::result::Result<T, SqlError>;

fn to_decimal(v: &Value) -> Option<Decimal> {
    match v {
        Value::Decimal(d) => Some(*d),
        Value::Int(i) => Some(Decimal {
            unscaled: i128::from(*i),
            scale: 0,
        }),
        _ => None,
    }
}

/// `a op b` for `+ - * / %`.
pub fn arithmetic(op: &'static str, a: Compiled, b: Compiled, e: &E) -> Result<Compiled> {
    use DataType as T;
    // Timestamps and intervals.
    match (&a.ty, &b.ty, op) {
        (Ty::Data(T::Timestamp), Ty::Interval, "+" | "-")
        | (Ty::Interval, Ty::Data(T::Timestamp), "+") => {
            let sign = if op == "-" { -1 } else { 1 };
            let (f, g) = (a.eval, b.eval);
            let a_is_ts = matches!(a.ty, Ty::Data(T::Timestamp));
            return Ok(strict2(Ty::Data(T::Timestamp), f, g, move |x, y| {
                let (ts, iv) = if a_is_ts { (x, y) } else { (y, x) };
                match (ts, iv) {
                    (Value::Timestamp(t), Value::Int(ms)) => t
                        .checked_add(sign * ms)
                        .map(Value::Timestamp)
                        .ok_or_else(|| "timestamp overflow".to_string()),
                    _ => Ok(Value::Null),
                }
            }));
        }
        (Ty::Interval, Ty::Interval, "+" | "-") => {
            let sign = if op == "-" { -1 } else { 1 };
            let (f, g) = (a.eval, b.eval);
            return Ok(strict2(Ty::Interval, f, g, move |x, y| match (x, y) {
                (Value::Int(p), Value::Int(q)) => Ok(Value::Int(p + sign * q)),
                _ => Ok(Value::Null),
            }));
        }
        _ => {}
    }
    let (ta, tb) = match (&a.ty, &b.ty) {
        (Ty::Null, Ty::Null) => return Ok(Compiled::constant(Value::Null, Ty::Null)),
        (Ty::Null, Ty::Data(t)) | (Ty::Data(t), Ty::Null) if numeric(t) => (t.clone(), t.clone()),
        (Ty::Data(x), Ty::Data(y)) if numeric(x) && numeric(y) => (x.clone(), y.clone()),
        _ => {
            return Err(err(
                e,
                format!("no arithmetic {op} between {} and {}", a.ty, b.ty),
            ))
        }
    };
    let result = match (&ta, &tb) {
        (T::Double, _) | (_, T::Double) => T::Double,
        (T::Int | T::BigInt, T::Int | T::BigInt) => wider(&ta, &tb),
        _ => {
            let (p1, s1) = as_decimal_type(&ta).expect("decimal");
            let (p2, s2) = as_decimal_type(&tb).expect("decimal");
            match op {
                "+" | "-" => {
                    let s = s1.max(s2);
                    decimal_type((p1 - s1).max(p2 - s2) + s + 1, s)
                }
                "*" => decimal_type(p1 + p2, s1 + s2),
                "/" => {
                    let s = 6.max(s1 + p2 + 1).min(38);
                    decimal_type(p1 - s1 + s2 + s, s)
                }
                _ => {
                    let s = s1.max(s2);
                    decimal_type(p2.min(p1), s)
                }
            }
        }
    };
    let (f, g) = (a.eval, b.eval);
    let rt = result.clone();
    Ok(strict2(Ty::Data(result), f, g, move |x, y| {
        arith_values(op, &x, &y, &rt)
    }))
}

fn arith_values(
    op: &str,
    x: &Value,
    y: &Value,
    result: &DataType,
) -> std::result::Result<Value, String> {
    let overflow = || format!("overflow in {} {op} {}", to_text(x), to_text(y));
    match result {
        DataType::Double => {
            let (p, q) = (
                x.as_f64().unwrap_or(f64::NAN),
                y.as_f64().unwrap_or(f64::NAN),
            );
            Ok(Value::Double(match op {
                "+" => p + q,
                "-" => p - q,
                "*" => p * q,
                "/" => p / q,
                _ => p % q,
            }))
        }
        DataType::Int | DataType::BigInt => {
            let (Value::Int(p), Value::Int(q)) = (x, y) else {
                return Ok(Value::Null);
            };
            let r = match op {
                "+" => p.checked_add(*q),
                "-" => p.checked_sub(*q),
                "*" => p.checked_mul(*q),
                "/" | "%" if *q == 0 => return Err(format!("division by zero: {p} {op} 0")),
                "/" => p.checked_div(*q),
                _ => p.checked_rem(*q),
            };
            r.map(Value::Int).ok_or_else(overflow)
        }
        DataType::Decimal { scale, .. } => {
            let (Some(p), Some(q)) = (to_decimal(x), to_decimal(y)) else {
                return Ok(Value::Null);
            };
            let d = match op {
                "+" | "-" => {
                    let s = p.scale.max(q.scale);
                    let a = rescale_round(p, s).ok_or_else(overflow)?.unscaled;
                    let b = rescale_round(q, s).ok_or_else(overflow)?.unscaled;
                    let u = if op == "+" {
                        a.checked_add(b)
                    } else {
                        a.checked_sub(b)
                    };
                    Decimal {
                        unscaled: u.ok_or_else(overflow)?,
                        scale: s,
                    }
                }
                "*" => Decimal {
                    unscaled: { p.unscaled }
                        .checked_mul(q.unscaled)
                        .ok_or_else(overflow)?,
                    scale: p.scale + q.scale,
                },
                "/" => {
                    if q.unscaled == 0 {
                        return Err(format!("division by zero: {p} / 0"));
                    }
                    // p / q at `scale` + 1 digits, then rounded.
                    let shift = u32::from(*scale) + 1 + u32::from(q.scale);
                    let shift = shift.checked_sub(u32::from(p.scale));
                    let num = match shift {
                        Some(s) => { p.unscaled }
                            .checked_mul(10i128.checked_pow(s).ok_or_else(overflow)?)
                            .ok_or_else(overflow)?,
                        None => return Err(overflow()),
                    };
                    Decimal {
                        unscaled: num / q.unscaled,
                        scale: *scale + 1,
                    }
                }
                _ => {
                    if q.unscaled == 0 {
                        return Err(format!("division by zero: {p} % 0"));
                    }
                    let s = p.scale.max(q.scale);
                    let a = rescale_round(p, s).ok_or_else(overflow)?.unscaled;
                    let b = rescale_round(q, s).ok_or_else(overflow)?.unscaled;
                    Decimal {
                        unscaled: a % b,
                        scale: s,
                    }
                }
            };
            rescale_round(d, *scale)
                .map(Value::Decimal)
                .ok_or_else(overflow)
        }
        _ => Ok(Value::Null),
    }
}

/// A two-argument function that is NULL when either argument is.
fn strict2(
    ty: Ty,
    f: Arc<EvalFn>,
    g: Arc<EvalFn>,
    h: impl Fn(Value, Value) -> std::result::Result<Value, String> + Send + Sync + 'static,
) -> Compiled {
    Compiled {
        eval: Arc::new(move |row| {
            let x = f(row)?;
            if x.is_null() {
                return Ok(Value::Null);
            }
            let y = g(row)?;
            if y.is_null() {
                return Ok(Value::Null);
            }
            h(x, y)
        }),
        ty,
        constant: None,
    }
}

/// A function that is NULL when any argument is.
fn strict(
    ty: DataType,
    args: Vec<Compiled>,
    h: impl Fn(&[Value]) -> std::result::Result<Value, String> + Send + Sync + 'static,
) -> Compiled {
    let constant = args.iter().all(|a| a.constant.is_some());
    let fs: Vec<Arc<EvalFn>> = args.into_iter().map(|a| a.eval).collect();
    let c = Compiled {
        eval: Arc::new(move |row| {
            let mut vals: smallvec::SmallVec<[Value; 4]> = smallvec::SmallVec::new();
            for f in &fs {
                let v = f(row)?;
                if v.is_null() {
                    return Ok(Value::Null);
                }
                vals.push(v);
            }
            h(&vals)
        }),
        ty: Ty::Data(ty),
        constant: None,
    };
    if constant {
        if let Ok(v) = (c.eval)(&[]) {
            return Compiled::constant(v, c.ty);
        }
    }
    c
}

fn arity(
    name: &str,
    args: &[Compiled],
    range: std::ops::RangeInclusive<usize>,
    e: &E,
) -> Result<()> {
    if range.contains(&args.len()) {
        Ok(())
    } else {
        let want = if range.start() == range.end() {
            range.start().to_string()
        } else {
            format!("{} to {}", range.start(), range.end())
        };
        Err(err(
            e,
            format!("{name} takes {want} arguments, not {}", args.len()),
        ))
    }
}

fn want(
    args: &[Compiled],
    i: usize,
    what: &str,
    ok: impl Fn(&DataType) -> bool,
    name: &str,
    e: &E,
) -> Result<()> {
    match &args[i].ty {
        Ty::Null => Ok(()),
        Ty::Data(t) if ok(t) => Ok(()),
        t => Err(err(
            e,
            format!("argument {} of {name} must be {what}, not {t}", i + 1),
        )),
    }
}

fn is_string(t: &DataType) -> bool {
    *t == DataType::String
}

fn is_int(t: &DataType) -> bool {
    matches!(t, DataType::Int | DataType::BigInt)
}

fn constant_string(args: &[Compiled], i: usize, name: &str, e: &E) -> Result<String> {
    match &args[i].constant {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(err(
            e,
            format!("argument {} of {name} must be a constant string", i + 1),
        )),
    }
}

fn regex(pattern: &str, e: &E) -> Result<regex::Regex> {
    regex::Regex::new(pattern).map_err(|m| err(e, format!("bad regular expression: {m}")))
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

fn int(v: &Value) -> i64 {
    v.as_int().unwrap_or(0)
}

/// A scalar function call by its upper-case name.
pub fn call(name: &str, args: Vec<Compiled>, e: &E) -> Result<Compiled> {
    use DataType as T;
    let s = |a: &Vec<Compiled>, i| want(a, i, "VARCHAR", is_string, name, e);
    let n = |a: &Vec<Compiled>, i| want(a, i, "a number", numeric, name, e);
    let i_ = |a: &Vec<Compiled>, i| want(a, i, "an integer", is_int, name, e);
    let ts = |a: &Vec<Compiled>, i| want(a, i, "TIMESTAMP(3)", |t| *t == T::Timestamp, name, e);
    Ok(match name {
        "MOD" => {
            arity(name, &args, 2..=2, e)?;
            let mut a = args.into_iter();
            arithmetic("%", a.next().expect("2"), a.next().expect("2"), e)?
        }
        "ABS" => {
            arity(name, &args, 1..=1, e)?;
            n(&args, 0)?;
            let t = args[0].ty.column_type();
            strict(t, args, |v| {
                Ok(match &v[0] {
                    Value::Int(i) => Value::Int(i.checked_abs().ok_or("BIGINT overflow in ABS")?),
                    Value::Double(d) => Value::Double(d.abs()),
                    Value::Decimal(d) => Value::Decimal(Decimal {
                        unscaled: { d.unscaled }.abs(),
                        scale: d.scale,
                    }),
                    other => other.clone(),
                })
            })
        }
        "FLOOR" | "CEIL" | "CEILING" => {
            arity(name, &args, 1..=1, e)?;
            n(&args, 0)?;
            let up = name != "FLOOR";
            let t = match args[0].ty.column_type() {
                T::Decimal { precision, .. } => T::Decimal {
                    precision,
                    scale: 0,
                },
                t => t,
            };
            strict(t, args, move |v| {
                Ok(match &v[0] {
                    Value::Double(d) => Value::Double(if up { d.ceil() } else { d.floor() }),
                    Value::Decimal(d) => {
                        let p = 10i128.pow(u32::from(d.scale));
                        let u = d.unscaled;
                        let q = if up { div_ceil(u, p) } else { u.div_euclid(p) };
                        Value::Decimal(Decimal {
                            unscaled: q,
                            scale: 0,
                        })
                    }
                    other => other.clone(),
                })
            })
        }
        "ROUND" => {
            arity(name, &args, 1..=2, e)?;
            n(&args, 0)?;
            let places = match args.get(1) {
                None => 0,
                Some(c) => match c.constant {
                    Some(Value::Int(p)) if (0..=38).contains(&p) => p as u8,
                    _ => return Err(err(e, "ROUND's places must be a constant from 0 to 38")),
                },
            };
            let t = match args[0].ty.column_type() {
                T::Decimal { precision, scale } => T::Decimal {
                    precision,
                    scale: scale.min(places),
                },
                t => t,
            };
            let first = args.into_iter().next().expect("1");
            strict(t, vec![first], move |v| {
                Ok(match &v[0] {
                    Value::Double(d) => {
                        let m = 10f64.powi(i32::from(places));
                        Value::Double((d * m).round() / m)
                    }
                    Value::Decimal(d) if d.scale > places => {
                        Value::Decimal(rescale_round(*d, places).ok_or("DECIMAL overflow")?)
                    }
                    other => other.clone(),
                })
            })
        }
        "LOWER" | "UPPER" => {
            arity(name, &args, 1..=1, e)?;
            s(&args, 0)?;
            let up = name == "UPPER";
            // The argument's value is this call's own: ASCII text changes
            // case in place, without a second copy.
            let f = args[0].eval.clone();
            let constant = args[0].constant.is_some();
            let c = Compiled {
                eval: Arc::new(move |row| match f(row)? {
                    Value::String(mut t) if t.is_ascii() => {
                        if up {
                            t.make_ascii_uppercase()
                        } else {
                            t.make_ascii_lowercase()
                        }
                        Ok(Value::String(t))
                    }
                    Value::String(t) => Ok(Value::String(if up {
                        t.to_uppercase()
                    } else {
                        t.to_lowercase()
                    })),
                    _ => Ok(Value::Null),
                }),
                ty: Ty::Data(T::String),
                constant: None,
            };
            match (constant, (c.eval)(&[])) {
                (true, Ok(v)) => Compiled::constant(v, c.ty),
                _ => c,
            }
        }
        "TRIM" | "LTRIM" | "RTRIM" | "BTRIM" => {
            arity(name, &args, 1..=2, e)?;
            s(&args, 0)?;
            let mut args = args;
            if args.len() == 1 {
                args.push(Compiled::constant(Value::from(" "), Ty::Data(T::String)));
            }
            s(&args, 1)?;
            let side = name.to_string();
            strict(T::String, args, move |v| {
                let chars: Vec<char> = text(&v[1]).chars().collect();
                let x = text(&v[0]);
                let t = match side.as_str() {
                    "LTRIM" => x.trim_start_matches(chars.as_slice()),
                    "RTRIM" => x.trim_end_matches(chars.as_slice()),
                    _ => x.trim_matches(chars.as_slice()),
                };
                Ok(Value::String(t.to_string()))
            })
        }
        "CHAR_LENGTH" | "CHARACTER_LENGTH" | "LENGTH" => {
            arity(name, &args, 1..=1, e)?;
            s(&args, 0)?;
            strict(T::Int, args, |v| {
                Ok(Value::Int(text(&v[0]).chars().count() as i64))
            })
        }
        "SUBSTRING" | "SUBSTR" => {
            arity(name, &args, 2..=3, e)?;
            s(&args, 0)?;
            i_(&args, 1)?;
            if args.len() == 3 {
                i_(&args, 2)?;
            }
            strict(T::String, args, |v| {
                let chars: Vec<char> = text(&v[0]).chars().collect();
                let start = int(&v[1]);
                // SQL: characters from `start` (1-based; 0 and below count
                // toward the length), `len` of them.
                let from = start.max(1);
                let to = match v.get(2) {
                    Some(l) if int(l) < 0 => return Err("SUBSTRING's length is negative".into()),
                    Some(l) => start.saturating_add(int(l)),
                    None => i64::MAX,
                };
                let (a, b) = ((from - 1) as usize, (to.max(1) - 1) as usize);
                let b = b.min(chars.len());
                Ok(Value::String(if a < b {
                    chars[a..b].iter().collect()
                } else {
                    String::new()
                }))
            })
        }
        "REPLACE" => {
            arity(name, &args, 3..=3, e)?;
            for i in 0..3 {
                s(&args, i)?;
            }
            strict(T::String, args, |v| {
                Ok(Value::String(text(&v[0]).replace(text(&v[1]), text(&v[2]))))
            })
        }
        "POSITION" | "LOCATE" => {
            arity(name, &args, 2..=2, e)?;
            s(&args, 0)?;
            s(&args, 1)?;
            strict(T::Int, args, |v| {
                let (needle, hay) = (text(&v[0]), text(&v[1]));
                Ok(Value::Int(match hay.find(needle) {
                    Some(b) => hay[..b].chars().count() as i64 + 1,
                    None => 0,
                }))
            })
        }
        "CONCAT" | "CONCAT_NULL" => {
            if args.is_empty() {
                return Err(err(e, "CONCAT takes at least one argument"));
            }
            for i in 0..args.len() {
                s(&args, i)?;
            }
            strict(T::String, args, |v| {
                Ok(Value::String(v.iter().map(text).collect()))
            })
        }
        "CONCAT_WS" => {
            if args.len() < 2 {
                return Err(err(
                    e,
                    "CONCAT_WS takes a separator and at least one string",
                ));
            }
            for i in 0..args.len() {
                s(&args, i)?;
            }
            let fs: Vec<Arc<EvalFn>> = args.into_iter().map(|a| a.eval).collect();
            Compiled {
                ty: Ty::Data(T::String),
                constant: None,
                eval: Arc::new(move |row| {
                    let sep = fs[0](row)?;
                    if sep.is_null() {
                        return Ok(Value::Null);
                    }
                    let mut parts = Vec::new();
                    for f in &fs[1..] {
                        let v = f(row)?;
                        if !v.is_null() {
                            parts.push(text(&v).to_string());
                        }
                    }
                    Ok(Value::String(parts.join(text(&sep))))
                }),
            }
        }
        "SPLIT_INDEX" => {
            arity(name, &args, 3..=3, e)?;
            s(&args, 0)?;
            s(&args, 1)?;
            i_(&args, 2)?;
            strict(T::String, args, |v| {
                let i = int(&v[2]);
                let sep = text(&v[1]);
                if i < 0 || sep.is_empty() {
                    return Ok(Value::Null);
                }
                Ok(text(&v[0])
                    .split(sep)
                    .nth(i as usize)
                    .map_or(Value::Null, |p| Value::String(p.to_string())))
            })
        }
        "SPLIT" => {
            arity(name, &args, 2..=2, e)?;
            s(&args, 0)?;
            s(&args, 1)?;
            strict(T::List(Box::new(T::String)), args, |v| {
                let sep = text(&v[1]);
                let x = text(&v[0]);
                let parts: Vec<Value> = if sep.is_empty() {
                    x.chars().map(|c| Value::String(c.to_string())).collect()
                } else {
                    x.split(sep).map(|p| Value::String(p.to_string())).collect()
                };
                Ok(Value::List(parts))
            })
        }
        "WORDS" => {
            // The words of a text, split on Unicode whitespace (runs of it
            // and the ends make no empty words): word count's split.
            arity(name, &args, 1..=1, e)?;
            s(&args, 0)?;
            strict(T::List(Box::new(T::String)), args, |v| {
                Ok(Value::List(
                    text(&v[0])
                        .split_whitespace()
                        .map(|w| Value::String(w.to_string()))
                        .collect(),
                ))
            })
        }
        "REGEXP_EXTRACT" => {
            arity(name, &args, 2..=3, e)?;
            s(&args, 0)?;
            let re = regex(&constant_string(&args, 1, name, e)?, e)?;
            let group = match args.get(2) {
                None => 0,
                Some(c) => match c.constant {
                    Some(Value::Int(g)) if g >= 0 && (g as usize) < re.captures_len() => g as usize,
                    _ => {
                        return Err(err(
                            e,
                            format!(
                                "REGEXP_EXTRACT's group must be a constant from 0 to {}",
                                re.captures_len() - 1
                            ),
                        ))
                    }
                },
            };
            let first = args.into_iter().next().expect("1");
            strict(T::String, vec![first], move |v| {
                Ok(re
                    .captures(text(&v[0]))
                    .and_then(|c| c.get(group))
                    .map_or(Value::Null, |m| Value::String(m.as_str().to_string())))
            })
        }
        "REGEXP_REPLACE" => {
            arity(name, &args, 3..=3, e)?;
            s(&args, 0)?;
            s(&args, 2)?;
            let re = regex(&constant_string(&args, 1, name, e)?, e)?;
            let mut a = args.into_iter();
            let (x, _, r) = (a.next().expect("3"), a.next(), a.next().expect("3"));
            strict(T::String, vec![x, r], move |v| {
                Ok(Value::String(
                    re.replace_all(text(&v[0]), text(&v[1])).into_owned(),
                ))
            })
        }
        "REGEXP" | "REGEXP_LIKE" => {
            arity(name, &args, 2..=2, e)?;
            s(&args, 0)?;
            let re = regex(&constant_string(&args, 1, name, e)?, e)?;
            let first = args.into_iter().next().expect("1");
            strict(T::Boolean, vec![first], move |v| {
                Ok(Value::Bool(re.is_match(text(&v[0]))))
            })
        }
        "JSON_VALUE" => {
            arity(name, &args, 2..=2, e)?;
            s(&args, 0)?;
            let path = json_path(&constant_string(&args, 1, name, e)?).map_err(|m| err(e, m))?;
            let first = args.into_iter().next().expect("1");
            strict(T::String, vec![first], move |v| {
                let Ok(mut j) = serde_json::from_str::<serde_json::Value>(text(&v[0])) else {
                    return Ok(Value::Null);
                };
                for step in &path {
                    j = match (step, j) {
                        (PathStep::Field(f), serde_json::Value::Object(mut m)) => {
                            m.remove(f).unwrap_or(serde_json::Value::Null)
                        }
                        (PathStep::Index(i), serde_json::Value::Array(mut a)) if *i < a.len() => {
                            a.swap_remove(*i)
                        }
                        _ => return Ok(Value::Null),
                    };
                }
                Ok(match j {
                    serde_json::Value::Null
                    | serde_json::Value::Object(_)
                    | serde_json::Value::Array(_) => Value::Null,
                    serde_json::Value::String(s) => Value::String(s),
                    other => Value::String(other.to_string()),
                })
            })
        }
        "COALESCE" => {
            if args.is_empty() {
                return Err(err(e, "COALESCE takes at least one argument"));
            }
            let items: Vec<(Compiled, &E)> = args.into_iter().map(|a| (a, e)).collect();
            let ty = common_type(&items, e)?;
            let fs: Vec<Arc<EvalFn>> = items
                .into_iter()
                .map(|(c, _)| super::cast::coerce_to(c, &ty).eval)
                .collect();
            Compiled {
                ty,
                constant: None,
                eval: Arc::new(move |row| {
                    for f in &fs {
                        let v = f(row)?;
                        if !v.is_null() {
                            return Ok(v);
                        }
                    }
                    Ok(Value::Null)
                }),
            }
        }
        "NULLIF" => {
            arity(name, &args, 2..=2, e)?;
            let ty = args[0].ty.clone();
            let mut a = args.into_iter();
            let (f, g) = (a.next().expect("2").eval, a.next().expect("2").eval);
            Compiled {
                ty,
                constant: None,
                eval: Arc::new(move |row| {
                    let x = f(row)?;
                    let y = g(row)?;
                    Ok(
                        if !x.is_null()
                            && !y.is_null()
                            && crate::dataflow::expr::compare(&x, &y).is_eq()
                        {
                            Value::Null
                        } else {
                            x
                        },
                    )
                }),
            }
        }
        "IF" => {
            arity(name, &args, 3..=3, e)?;
            want(&args, 0, "BOOLEAN", |t| *t == T::Boolean, name, e)?;
            let mut a = args.into_iter();
            let c = a.next().expect("3");
            let items = vec![(a.next().expect("3"), e), (a.next().expect("3"), e)];
            let ty = common_type(&items, e)?;
            let mut fs = items
                .into_iter()
                .map(|(x, _)| super::cast::coerce_to(x, &ty).eval);
            let (t, f, c) = (fs.next().expect("2"), fs.next().expect("2"), c.eval);
            Compiled {
                ty,
                constant: None,
                eval: Arc::new(move |row| {
                    if c(row)? == Value::Bool(true) {
                        t(row)
                    } else {
                        f(row)
                    }
                }),
            }
        }
        "HOUR" | "MINUTE" | "SECOND" | "YEAR" | "MONTH" | "DAYOFMONTH" | "DAYOFYEAR"
        | "DAYOFWEEK" => {
            arity(name, &args, 1..=1, e)?;
            ts(&args, 0)?;
            let part = match name {
                "DAYOFMONTH" => "DAY",
                "DAYOFYEAR" => "DOY",
                "DAYOFWEEK" => "DOW1",
                "HOUR" => "HOUR",
                "MINUTE" => "MINUTE",
                "SECOND" => "SECOND",
                "YEAR" => "YEAR",
                _ => "MONTH",
            };
            extract(args.into_iter().next().expect("1"), part)?
        }
        "DATE_FORMAT" => {
            arity(name, &args, 2..=2, e)?;
            want(
                &args,
                0,
                "TIMESTAMP(3) or VARCHAR",
                |t| *t == T::Timestamp || *t == T::String,
                name,
                e,
            )?;
            let pattern = java_pattern(&constant_string(&args, 1, name, e)?);
            let first = args.into_iter().next().expect("1");
            strict(T::String, vec![first], move |v| {
                let ms = match &v[0] {
                    Value::Timestamp(ms) => *ms,
                    Value::String(s) => parse_timestamp(s)?,
                    _ => return Ok(Value::Null),
                };
                Ok(Value::String(format_pattern(ms, &pattern)))
            })
        }
        "TO_TIMESTAMP" => {
            arity(name, &args, 1..=2, e)?;
            s(&args, 0)?;
            let pattern = match args.len() {
                2 => Some(java_pattern(&constant_string(&args, 1, name, e)?)),
                _ => None,
            };
            let first = args.into_iter().next().expect("1");
            strict(T::Timestamp, vec![first], move |v| {
                let s = text(&v[0]);
                Ok(Value::Timestamp(match &pattern {
                    None => parse_timestamp(s)?,
                    Some(p) => parse_pattern(s, p)?,
                }))
            })
        }
        "UNIX_TIMESTAMP" => {
            if args.is_empty() {
                return Err(err(
                    e,
                    "UNIX_TIMESTAMP() without an argument is the wall clock, which a replay \
                     after a crash would not repeat; give it a timestamp string",
                ));
            }
            arity(name, &args, 1..=2, e)?;
            want(
                &args,
                0,
                "VARCHAR or TIMESTAMP(3)",
                |t| *t == T::Timestamp || *t == T::String,
                name,
                e,
            )?;
            let pattern = match args.len() {
                2 => java_pattern(&constant_string(&args, 1, name, e)?),
                _ => java_pattern("yyyy-MM-dd HH:mm:ss"),
            };
            let first = args.into_iter().next().expect("1");
            strict(T::BigInt, vec![first], move |v| {
                let ms = match &v[0] {
                    Value::Timestamp(ms) => *ms,
                    Value::String(s) => {
                        parse_pattern(s, &pattern).or_else(|_| parse_timestamp(s))?
                    }
                    _ => return Ok(Value::Null),
                };
                Ok(Value::Int(ms.div_euclid(1000)))
            })
        }
        "CURRENT_WATERMARK" => {
            // Flink's: the watermark of the operator evaluating the row,
            // NULL before its first. Its argument names the time column
            // (Flink's rowtime attribute); only its type is checked here.
            arity(name, &args, 1..=1, e)?;
            want(&args, 0, "TIMESTAMP(3)", |t| *t == T::Timestamp, name, e)?;
            Compiled::new(Ty::Data(T::Timestamp), |_| {
                let w = crate::dataflow::operator::task_watermark();
                Ok(if w == crate::time::MIN_WATERMARK {
                    Value::Null
                } else {
                    Value::Timestamp(w)
                })
            })
        }
        "NOW" | "CURRENT_TIMESTAMP" | "LOCALTIMESTAMP" | "PROCTIME" | "RAND" | "UUID" => {
            return Err(err(
                e,
                format!(
                    "{name} is not deterministic: a replay after a crash would compute other \
                     values, and exactly-once output needs the same ones"
                ),
            ))
        }
        _ => {
            // Function names are short: a quarter of the name's letters
            // (at least one) may differ, so FOO is not taken for MOD.
            let hint =
                super::names::closest(name, NAMES.iter().copied(), |_| (name.len() / 4).max(1))
                    .map_or(String::new(), |n| format!("; did you mean {n}?"));
            return Err(err(
                e,
                format!("unknown function {name}{hint} (docs/sql.md lists weir's functions)"),
            ));
        }
    })
}

/// Every name [`call`] knows, for the hint an unknown name gets (the
/// non-deterministic functions it refuses among them, so that a typo of
/// one is told why). A unit test holds it to `call`.
const NAMES: &[&str] = &[
    "MOD",
    "ABS",
    "FLOOR",
    "CEIL",
    "CEILING",
    "ROUND",
    "LOWER",
    "UPPER",
    "TRIM",
    "LTRIM",
    "RTRIM",
    "BTRIM",
    "CHAR_LENGTH",
    "CHARACTER_LENGTH",
    "LENGTH",
    "SUBSTRING",
    "SUBSTR",
    "REPLACE",
    "POSITION",
    "LOCATE",
    "CONCAT",
    "CONCAT_NULL",
    "CONCAT_WS",
    "SPLIT_INDEX",
    "SPLIT",
    "WORDS",
    "REGEXP_EXTRACT",
    "REGEXP_REPLACE",
    "REGEXP",
    "REGEXP_LIKE",
    "JSON_VALUE",
    "COALESCE",
    "NULLIF",
    "IF",
    "HOUR",
    "MINUTE",
    "SECOND",
    "YEAR",
    "MONTH",
    "DAYOFMONTH",
    "DAYOFYEAR",
    "DATE_FORMAT",
    "TO_TIMESTAMP",
    "UNIX_TIMESTAMP",
    "CURRENT_WATERMARK",
    "NOW",
    "CURRENT_TIMESTAMP",
    "LOCALTIMESTAMP",
    "PROCTIME",
    "RAND",
    "UUID",
];

fn div_ceil(a: i128, b: i128) -> i128 {
    -((-a).div_euclid(b))
}

/// A part of a timestamp as BIGINT.
pub fn extract(x: Compiled, part: &'static str) -> Result<Compiled> {
    Ok(strict(DataType::BigInt, vec![x], move |v| {
        let Value::Timestamp(ms) = v[0] else {
            return Ok(Value::Null);
        };
        let c = Civil::of(ms);
        Ok(Value::Int(match part {
            "YEAR" => c.year,
            "MONTH" => c.month,
            "DAY" => c.day,
            "HOUR" => c.hour,
            "MINUTE" => c.minute,
            "SECOND" => c.second,
            "MILLISECOND" => c.second * 1000 + c.milli,
            "DOW" => c.weekday,      // 0 = Sunday (PostgreSQL, DuckDB)
            "DOW1" => c.weekday + 1, // 1 = Sunday (Flink's DAYOFWEEK)
            "DOY" => c.yday,
            _ => ms.div_euclid(1000),
        }))
    }))
}

/// A UTC instant's calendar fields.
pub struct Civil {
    pub year: i64,
    pub month: i64,
    pub day: i64,
    pub hour: i64,
    pub minute: i64,
    pub second: i64,
    pub milli: i64,
    /// 0 = Sunday.
    pub weekday: i64,
    /// 1 = January 1.
    pub yday: i64,
}

impl Civil {
    /// Howard Hinnant's `civil_from_days`.
    pub fn of(ms: i64) -> Self {
        let days = ms.div_euclid(86_400_000);
        let in_day = ms.rem_euclid(86_400_000);
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        let jan1 = days_from_civil(year, 1, 1);
        Self {
            year,
            month,
            day,
            hour: in_day / 3_600_000,
            minute: in_day / 60_000 % 60,
            second: in_day / 1000 % 60,
            milli: in_day % 1000,
            weekday: (days + 4).rem_euclid(7),
            yday: days - jan1 + 1,
        }
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// One piece of a Java date pattern (`yyyy-MM-dd HH:mm:ss.SSS`).
#[derive(Debug, Clone, PartialEq)]
pub enum PatternPart {
    Field(char, usize),
    Literal(String),
}

/// Java's `SimpleDateFormat` letters (the ones a date needs): y M d H h m
/// s S a, quoted text, everything else literal.
pub fn java_pattern(p: &str) -> Vec<PatternPart> {
    let mut out = Vec::new();
    let chars: Vec<char> = p.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' {
            let mut lit = String::new();
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                lit.push(chars[i]);
                i += 1;
            }
            i += 1;
            out.push(PatternPart::Literal(if lit.is_empty() {
                "'".into()
            } else {
                lit
            }));
        } else if "yMdHhmsSa".contains(c) {
            let mut n = 0;
            while i < chars.len() && chars[i] == c {
                n += 1;
                i += 1;
            }
            out.push(PatternPart::Field(c, n));
        } else {
            out.push(PatternPart::Literal(c.to_string()));
            i += 1;
        }
    }
    out
}

pub fn format_pattern(ms: i64, pattern: &[PatternPart]) -> String {
    let c = Civil::of(ms);
    let mut out = String::new();
    for p in pattern {
        match p {
            PatternPart::Literal(l) => out.push_str(l),
            PatternPart::Field(f, n) => {
                let v = match f {
                    'y' if *n == 2 => c.year.rem_euclid(100),
                    'y' => c.year,
                    'M' => c.month,
                    'd' => c.day,
                    'H' => c.hour,
                    'h' => (c.hour + 11) % 12 + 1,
                    'm' => c.minute,
                    's' => c.second,
                    'S' => c.milli,
                    _ => {
                        out.push_str(if c.hour < 12 { "AM" } else { "PM" });
                        continue;
                    }
                };
                let width = if *f == 'S' { 3.min(*n).max(*n) } else { *n };
                out.push_str(&format!("{v:0width$}"));
            }
        }
    }
    out
}

/// Reads `s` by `pattern` as a UTC instant.
pub fn parse_pattern(s: &str, pattern: &[PatternPart]) -> std::result::Result<i64, String> {
    let bad = || format!("{s:?} does not match the date format");
    let (mut y, mut mo, mut d, mut h, mut mi, mut sec, mut milli) = (1970, 1, 1, 0, 0, 0, 0);
    let mut pm = None;
    let mut rest = s;
    for p in pattern {
        match p {
            PatternPart::Literal(l) => rest = rest.strip_prefix(l.as_str()).ok_or_else(bad)?,
            PatternPart::Field('a', _) => {
                let upper = rest.get(..2).map(str::to_ascii_uppercase);
                pm = Some(upper.as_deref() == Some("PM"));
                rest = rest.get(2..).ok_or_else(bad)?;
            }
            PatternPart::Field(f, n) => {
                let take = rest.bytes().take_while(u8::is_ascii_digit).count().min(
                    if *n > 1 || *f == 'y' {
                        (*n).max(if *f == 'y' { 4 } else { 2 })
                    } else {
                        2
                    },
                );
                if take == 0 {
                    return Err(bad());
                }
                let v: i64 = rest[..take].parse().map_err(|_| bad())?;
                rest = &rest[take..];
                match f {
                    'y' => y = v,
                    'M' => mo = v,
                    'd' => d = v,
                    'H' | 'h' => h = v,
                    'm' => mi = v,
                    's' => sec = v,
                    _ => milli = v,
                }
            }
        }
    }
    if !rest.is_empty() {
        return Err(bad());
    }
    if pm == Some(true) && h < 12 {
        h += 12;
    }
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return Err(bad());
    }
    Ok(((days_from_civil(y, mo, d) * 24 + h) * 60 + mi) * 60_000 + sec * 1000 + milli)
}

enum PathStep {
    Field(String),
    Index(usize),
}

/// `$.a.b[0]` (JSON path, the part JSON_VALUE needs).
fn json_path(p: &str) -> std::result::Result<Vec<PathStep>, String> {
    let bad = || format!("{p:?} is not a JSON path like '$.a.b[0]'");
    let mut rest = p.trim().strip_prefix('$').ok_or_else(bad)?;
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

/// `x [NOT] LIKE pattern`: `%` any run, `_` one character.
pub fn like(
    x: Compiled,
    p: Compiled,
    negated: bool,
    insensitive: bool,
    escape: Option<char>,
) -> std::result::Result<Compiled, String> {
    let to_regex = move |pattern: &str| -> std::result::Result<regex::Regex, String> {
        let mut re = String::from(if insensitive { "(?s)(?i)^" } else { "(?s)^" });
        let mut chars = pattern.chars();
        while let Some(c) = chars.next() {
            match c {
                c if Some(c) == escape => match chars.next() {
                    Some(n) => re.push_str(&regex::escape(&n.to_string())),
                    None => return Err("LIKE pattern ends with its escape character".into()),
                },
                '%' => re.push_str(".*"),
                '_' => re.push('.'),
                c => re.push_str(&regex::escape(&c.to_string())),
            }
        }
        re.push('$');
        regex::Regex::new(&re).map_err(|e| e.to_string())
    };
    match &p.constant {
        Some(Value::String(pattern)) => {
            let re = to_regex(pattern)?;
            Ok(strict(DataType::Boolean, vec![x], move |v| {
                Ok(Value::Bool(re.is_match(text(&v[0])) != negated))
            }))
        }
        _ => Ok(strict(DataType::Boolean, vec![x, p], move |v| {
            let re = to_regex(text(&v[1]))?;
            Ok(Value::Bool(re.is_match(text(&v[0])) != negated))
        })),
    }
}

/// For tests and docs: a timestamp as the sink writes it.
pub fn show_timestamp(ms: i64) -> String {
    format_timestamp(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_fields_and_patterns() {
        // 2026-11-30T10:00:00.123Z, a Monday.
        let ms = parse_timestamp("2026-11-30T10:00:00.123Z").unwrap();
        let c = Civil::of(ms);
        assert_eq!(
            (c.year, c.month, c.day, c.hour, c.milli),
            (2026, 11, 30, 10, 123)
        );
        assert_eq!(c.weekday, 1);
        assert_eq!(c.yday, 334);
        let p = java_pattern("yyyy-MM-dd HH:mm:ss.SSS");
        assert_eq!(format_pattern(ms, &p), "2026-11-30 10:00:00.123");
        assert_eq!(parse_pattern("2026-11-30 10:00:00.123", &p), Ok(ms));
        assert_eq!(
            format_pattern(ms, &java_pattern("yyyy-MM-dd")),
            "2026-11-30"
        );
        assert_eq!(Civil::of(-1).year, 1969);
        assert_eq!(days_from_civil(1970, 1, 1), 0);
    }

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
        // NAMES is what `call` knows: each name is known (its refusal, with
        // no arguments, is about arguments or determinism)...
        for name in NAMES {
            if let Err(refused) = call(name, Vec::new(), &e) {
                assert!(!refused.message.contains("unknown function"), "{name}");
            }
        }
        // ...and every name `call` matches is in NAMES.
        let source = include_str!("functions.rs");
        let body =
            &source[source.find("pub fn call(").unwrap()..source.find("fn div_ceil").unwrap()];
        for line in body.lines() {
            let arm = line.trim_start();
            if line.starts_with("        \"") && arm.contains("=>") {
                for name in arm.split("=>").next().unwrap().split('|') {
                    let name = name.trim().trim_matches('"');
                    assert!(NAMES.contains(&name), "{name} is not in NAMES");
                }
            }
        }
    }
}
