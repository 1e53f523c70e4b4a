//! Types that widen, values that convert: `CAST`, the common type of a
//! CASE's branches or a COALESCE's arguments, DECIMAL rescaling, and a
//! value as text.

use sqlparser::ast::Expr as E;

use super::compiled::{err, Compiled, Ty};
use super::SqlError;
use crate::dataflow::row::{DataType, Decimal, Value};

pub fn numeric(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int | DataType::BigInt | DataType::Double | DataType::Decimal { .. }
    )
}

/// A number type as DECIMAL (precision, scale); None for DOUBLE.
pub fn as_decimal_type(t: &DataType) -> Option<(u32, u32)> {
    match t {
        DataType::Int => Some((10, 0)),
        DataType::BigInt => Some((19, 0)),
        DataType::Decimal { precision, scale } => Some((u32::from(*precision), u32::from(*scale))),
        _ => None,
    }
}

pub fn decimal_type(precision: u32, scale: u32) -> DataType {
    let scale = scale.min(38);
    DataType::Decimal {
        precision: precision.clamp(scale.max(1), 38) as u8,
        scale: scale as u8,
    }
}

/// The type two numbers widen to.
pub fn wider(a: &DataType, b: &DataType) -> DataType {
    use DataType as T;
    match (a, b) {
        (T::Double, _) | (_, T::Double) => T::Double,
        (T::Int, T::Int) => T::Int,
        (T::Int | T::BigInt, T::Int | T::BigInt) => T::BigInt,
        _ => {
            let (p1, s1) = as_decimal_type(a).unwrap_or((38, 0));
            let (p2, s2) = as_decimal_type(b).unwrap_or((38, 0));
            let s = s1.max(s2);
            decimal_type((p1 - s1).max(p2 - s2) + s, s)
        }
    }
}

/// `d` at `scale`, rounding half away from zero when the scale shrinks.
pub fn rescale_round(d: Decimal, scale: u8) -> Option<Decimal> {
    let unscaled = d.unscaled;
    let have = d.scale;
    let unscaled = if scale >= have {
        unscaled.checked_mul(10i128.checked_pow(u32::from(scale - have))?)?
    } else {
        let p = 10i128.checked_pow(u32::from(have - scale))?;
        let q = unscaled / p;
        let r = (unscaled % p).abs();
        if r * 2 >= p {
            q + unscaled.signum()
        } else {
            q
        }
    };
    Some(Decimal { unscaled, scale })
}

/// A value as text, as `CAST(v AS VARCHAR)` writes it.
pub fn to_text(v: &Value) -> String {
    match v {
        Value::Null => "NULL".into(),
        Value::Bool(b) => if *b { "TRUE" } else { "FALSE" }.into(),
        Value::Int(i) => i.to_string(),
        Value::Double(d) => d.to_string(),
        Value::Decimal(d) => d.to_string(),
        Value::String(s) => s.clone(),
        Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        Value::Timestamp(ms) => {
            // Flink's form: `2026-11-30 10:00:00.004`.
            let t = crate::dataflow::json::format_timestamp(*ms);
            t.trim_end_matches('Z').replacen('T', " ", 1)
        }
        Value::List(_) | Value::Struct(_) => crate::dataflow::json::value_json(v).to_string(),
    }
}

/// A value of `t` as `CAST(v AS VARCHAR)` writes it, where the type
/// decides the form: Flink's text of an ARRAY (`[1, 2]`), a MAP
/// (`{a=1, b=2}`) and a ROW (`(1, a)`), strings unquoted and a NULL inside
/// written `NULL`; a DATE as its day and a TIME as its time of day.
pub fn to_text_of(v: &Value, t: &DataType) -> String {
    let inner = |v: &Value, t: &DataType| {
        if v.is_null() {
            "NULL".to_string()
        } else {
            to_text_of(v, t)
        }
    };
    match (t, v) {
        (DataType::List(e), Value::List(items)) => format!(
            "[{}]",
            items
                .iter()
                .map(|x| inner(x, e))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        (DataType::Map(k, w), map) => format!(
            "{{{}}}",
            crate::dataflow::row::map_entries(map)
                .map(|(key, value)| format!("{}={}", inner(key, k), inner(value, w)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        (DataType::Struct(fields), Value::Struct(items)) => format!(
            "({})",
            items
                .iter()
                .zip(fields)
                .map(|(x, f)| inner(x, &f.data_type))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        (DataType::Date, Value::Timestamp(ms)) => crate::dataflow::json::format_date(*ms),
        (DataType::Time, Value::Timestamp(ms)) => crate::dataflow::json::format_time(*ms),
        _ => to_text(v),
    }
}

/// The type all of `items` fit (numbers widen: INT, BIGINT, DECIMAL, DOUBLE).
pub fn common_type(items: &[(Compiled, &E)], e: &E) -> Result<Ty, SqlError> {
    let mut ty = Ty::Null;
    for (c, x) in items {
        ty = match (&ty, &c.ty) {
            (Ty::Null, t) | (t, Ty::Null) => t.clone(),
            (Ty::Data(a), Ty::Data(b)) if a == b => ty.clone(),
            (Ty::Data(a), Ty::Data(b)) if numeric(a) && numeric(b) => Ty::Data(wider(a, b)),
            (a, b) => {
                return Err(err(
                    x,
                    format!("the branches of {e} have different types: {a} and {b}"),
                ))
            }
        };
    }
    Ok(ty)
}

/// `c` converted to `ty` (a number to a wider number), if it differs.
pub fn coerce_to(c: Compiled, ty: &Ty) -> Compiled {
    match (ty, &c.ty) {
        (Ty::Data(t), Ty::Data(have)) if t != have => {
            let (f, t2) = (c.eval.clone(), t.clone());
            Compiled::new(ty.clone(), move |row| cast_value(f(row)?, &t2))
        }
        _ => c,
    }
}

/// The midnight of the day of `ms`.
pub fn day(ms: i64) -> i64 {
    ms.div_euclid(crate::dataflow::json::MS_PER_DAY) * crate::dataflow::json::MS_PER_DAY
}

/// `CAST(v AS t)`.
pub fn cast_value(v: Value, t: &DataType) -> Result<Value, String> {
    use DataType as T;
    if v.is_null() {
        return Ok(Value::Null);
    }
    let out = match (t, v) {
        // Bytes are text when they are UTF-8 (Flink 2's cast checks).
        (T::String, Value::Bytes(b)) => Value::String(
            String::from_utf8(b).map_err(|e| format!("the bytes are not UTF-8 text: {e}"))?,
        ),
        (T::String, Value::String(s)) => Value::String(s),
        (T::String, v) => Value::String(to_text(&v)),
        (T::Int | T::BigInt, Value::Int(i)) => Value::Int(i),
        (T::Int | T::BigInt, Value::Double(d)) => {
            let x = d.trunc();
            if !x.is_finite() || x.abs() >= 9.2e18 {
                return Err(format!("{d} does not fit BIGINT"));
            }
            Value::Int(x as i64)
        }
        (T::Int | T::BigInt, Value::Decimal(d)) => {
            let p = 10i128.pow(u32::from(d.scale));
            i64::try_from(d.unscaled / p)
                .map(Value::Int)
                .map_err(|_| format!("{d} does not fit BIGINT"))?
        }
        (T::Int | T::BigInt, Value::String(s)) => Value::Int(
            s.trim()
                .parse()
                .map_err(|_| format!("{s:?} is not an integer"))?,
        ),
        (T::Int | T::BigInt, Value::Bool(b)) => Value::Int(i64::from(b)),
        (T::Double, v @ (Value::Int(_) | Value::Double(_) | Value::Decimal(_))) => {
            Value::Double(v.as_f64().expect("a number"))
        }
        (T::Double, Value::String(s)) => Value::Double(
            s.trim()
                .parse()
                .map_err(|_| format!("{s:?} is not a number"))?,
        ),
        (T::Decimal { precision, scale }, v) => {
            let d = match v {
                Value::Int(i) => Decimal {
                    unscaled: i128::from(i),
                    scale: 0,
                },
                Value::Decimal(d) => d,
                Value::Double(x) => {
                    Decimal::parse(&format!("{x:.*}", *scale as usize + 1), *scale)?
                }
                Value::String(s) => Decimal::parse(&s, *scale)?,
                other => return Err(format!("cannot cast {other:?} to {t}")),
            };
            let d = rescale_round(d, *scale).ok_or("DECIMAL overflow")?;
            let limit = 10i128.pow(u32::from(*precision));
            if d.unscaled.abs() >= limit {
                return Err(format!("{d} does not fit {t}"));
            }
            Value::Decimal(d)
        }
        // A DATE from text (`yyyy-MM-dd`, or a timestamp's day) and from a
        // timestamp (its day).
        (T::Date, Value::String(s)) => Value::Timestamp(
            crate::dataflow::json::parse_date(&s)
                .or_else(|_| crate::dataflow::json::parse_timestamp(&s).map(day))?,
        ),
        (T::Date, Value::Timestamp(ms)) => Value::Timestamp(day(ms)),
        // A TIME from text (`HH:mm:ss[.SSS]`, or a timestamp's time) and
        // from a timestamp (its time of day).
        (T::Time, Value::String(s)) => {
            Value::Timestamp(crate::dataflow::json::parse_time(&s).or_else(|_| {
                crate::dataflow::json::parse_timestamp(&s)
                    .map(|ms| ms.rem_euclid(crate::dataflow::json::MS_PER_DAY))
            })?)
        }
        (T::Time, Value::Timestamp(ms)) => {
            Value::Timestamp(ms.rem_euclid(crate::dataflow::json::MS_PER_DAY))
        }
        (T::Timestamp, Value::Timestamp(ms)) => Value::Timestamp(ms),
        (T::Timestamp, Value::String(s)) => {
            Value::Timestamp(crate::dataflow::json::parse_timestamp(&s)?)
        }
        (T::Timestamp, Value::Int(ms)) => Value::Timestamp(ms),
        (T::Boolean, Value::Bool(b)) => Value::Bool(b),
        (T::Boolean, Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => return Err(format!("{s:?} is not a BOOLEAN")),
        },
        (T::Boolean, Value::Int(i)) => Value::Bool(i != 0),
        (T::Bytes, Value::String(s)) => Value::Bytes(s.into_bytes()),
        (T::Bytes, Value::Bytes(b)) => Value::Bytes(b),
        // A ROW's fields by position, an ARRAY's elements, a MAP's keys
        // and values: each cast to its own type.
        (T::Struct(fields), Value::Struct(items)) => {
            if fields.len() != items.len() {
                return Err(format!(
                    "a ROW of {} fields cannot be cast to {t}, which has {}",
                    items.len(),
                    fields.len()
                ));
            }
            Value::Struct(
                items
                    .into_iter()
                    .zip(fields)
                    .map(|(v, f)| cast_value(v, &f.data_type))
                    .collect::<Result<_, _>>()?,
            )
        }
        (T::List(element), Value::List(items)) => Value::List(
            items
                .into_iter()
                .map(|v| cast_value(v, element))
                .collect::<Result<_, _>>()?,
        ),
        (T::Map(k, v), Value::List(entries)) => {
            let mut pairs = Vec::with_capacity(entries.len());
            for e in entries {
                let Value::Struct(mut kv) = e else {
                    return Err(format!("cannot cast {e:?} to {t}"));
                };
                let value = kv.pop().unwrap_or(Value::Null);
                let key = kv.pop().unwrap_or(Value::Null);
                pairs.push((cast_value(key, k)?, cast_value(value, v)?));
            }
            crate::dataflow::row::map_of(pairs)?
        }
        (t, v) => return Err(format!("cannot cast {v:?} to {t}")),
    };
    // An INT is 32 bits whatever it was cast from (text, a double, a
    // decimal, a BIGINT); it is held in an i64 like a BIGINT.
    match (t, &out) {
        (T::Int, Value::Int(i)) if i32::try_from(*i).is_err() => {
            Err(format!("{i} does not fit INT"))
        }
        _ => Ok(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_int_is_32_bits_whatever_it_is_cast_from() {
        let int = DataType::Int;
        for v in [
            Value::Int(i64::from(i32::MAX) + 1),
            Value::String("3000000000".into()),
            Value::Double(-3e9),
            Value::Decimal(Decimal {
                unscaled: 30_000_000_000,
                scale: 1,
            }),
        ] {
            let shown = format!("{v:?}");
            let e = cast_value(v, &int).expect_err(&shown);
            assert!(e.contains("does not fit INT"), "{shown}: {e}");
        }
        assert_eq!(
            cast_value(Value::String(" -2147483648 ".into()), &int),
            Ok(Value::Int(-2_147_483_648))
        );
        assert_eq!(
            cast_value(Value::Double(2147483647.9), &int),
            Ok(Value::Int(2_147_483_647))
        );
        assert_eq!(
            cast_value(Value::Int(3_000_000_000), &DataType::BigInt),
            Ok(Value::Int(3_000_000_000))
        );
    }
}
