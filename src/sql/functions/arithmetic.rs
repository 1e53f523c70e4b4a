//! The arithmetic operators `+ - * / %` (and MOD): numbers widen as
//! Flink's do (INT, BIGINT, DECIMAL with SQL's precision rules, DOUBLE),
//! integers and decimals fail on overflow, and a timestamp moves by an
//! interval.

use sqlparser::ast::Expr as E;

use super::super::cast::{as_decimal_type, decimal_type, numeric, rescale_round, to_text, wider};
use super::super::compiled::{err, Compiled, Ty};
use super::super::SqlError;
use super::compose::strict2;
use crate::dataflow::compare::as_decimal;
use crate::dataflow::row::{DataType, Decimal, Value};

type Result<T> = std::result::Result<T, SqlError>;

/// `a op b` for `+ - * / %`.
pub fn arithmetic(op: &'static str, a: Compiled, b: Compiled, e: &E) -> Result<Compiled> {
    use DataType as T;
    // Timestamps and intervals.
    match (&a.ty, &b.ty, op) {
        // A day-time interval is milliseconds, on a TIMESTAMP's wall clock
        // or a TIMESTAMP_LTZ's instant alike (as Flink adds it).
        (Ty::Data(t), Ty::Interval, "+" | "-") | (Ty::Interval, Ty::Data(t), "+")
            if t.is_timestamp() =>
        {
            let sign = if op == "-" { -1 } else { 1 };
            let ty = Ty::Data(t.clone());
            let (f, g) = (a.eval, b.eval);
            let a_is_ts = matches!(&a.ty, Ty::Data(t) if t.is_timestamp());
            return Ok(strict2(ty, f, g, move |x, y| {
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
                // i64::MIN % -1 is 0 (Java's too), not an overflow.
                _ => Some(p.wrapping_rem(*q)),
            };
            r.map(Value::Int).ok_or_else(overflow)
        }
        DataType::Decimal { scale, .. } => {
            let (Some(p), Some(q)) = (as_decimal(x), as_decimal(y)) else {
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
