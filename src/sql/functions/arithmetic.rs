//! The arithmetic operators `+ - * / %` (and MOD): numbers widen as
//! Flink's do (INT, BIGINT, DECIMAL with SQL's precision rules, DOUBLE),
//! integers and decimals fail on overflow; and intervals: a timestamp, a
//! date or a time moves by one, two of a kind add up, and a whole number
//! scales one.

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
    if let Some(c) = temporal_arithmetic(op, &a, &b, e)? {
        return Ok(c);
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

/// The arithmetic of intervals, when `a` or `b` is one: `None` when
/// neither is.
///
/// As Flink computes them:
/// - a day-time interval moves a TIMESTAMP's wall clock and a
///   TIMESTAMP_LTZ's instant alike, a TIME around its day, and a DATE by
///   its whole days (the milliseconds divided by a day's, toward zero);
/// - a year-month interval moves a TIMESTAMP or a DATE on the calendar,
///   the day clamped to the month's last (Jan 31 + 1 month is Feb 28); a
///   TIMESTAMP_LTZ on UTC's calendar, as Flink's addMonths does its
///   milliseconds;
/// - intervals of one kind add and subtract; an interval times or divided
///   by a whole number is an interval (division toward zero).
fn temporal_arithmetic(
    op: &'static str,
    a: &Compiled,
    b: &Compiled,
    e: &E,
) -> Result<Option<Compiled>> {
    use DataType as T;
    let is_interval = |t: &Ty| matches!(t, Ty::Interval | Ty::MonthInterval);
    if !is_interval(&a.ty) && !is_interval(&b.ty) {
        return Ok(None);
    }
    let refuse = || {
        err(
            e,
            format!("no arithmetic {op} between {} and {}", a.ty, b.ty),
        )
    };
    let (f, g) = (a.eval.clone(), b.eval.clone());
    let overflow = |what: &str| format!("{what} overflows");
    let moved = match (&a.ty, &b.ty, op) {
        (Ty::Data(t), iv, "+" | "-") if is_interval(iv) => {
            Some((t.clone(), iv.clone(), f.clone(), g.clone(), op == "-"))
        }
        (iv, Ty::Data(t), "+") if is_interval(iv) => {
            Some((t.clone(), iv.clone(), g.clone(), f.clone(), false))
        }
        _ => None,
    };
    if let Some((t, iv, value, interval, minus)) = moved {
        let sign: i64 = if minus { -1 } else { 1 };
        let months = iv == Ty::MonthInterval;
        let step: fn(i64, i64) -> std::result::Result<i64, String> = match (&t, months) {
            (T::Timestamp | T::TimestampLtz, false) => |ms, d| {
                ms.checked_add(d)
                    .ok_or_else(|| "timestamp overflow".to_string())
            },
            (T::Timestamp | T::TimestampLtz | T::Date, true) => super::calendar::add_months,
            (T::Date, false) => |ms, d| {
                let days = d / crate::dataflow::json::MS_PER_DAY;
                days.checked_mul(crate::dataflow::json::MS_PER_DAY)
                    .and_then(|x| ms.checked_add(x))
                    .ok_or_else(|| "date overflow".to_string())
            },
            (T::Time, false) => |ms, d| {
                Ok((ms + d % crate::dataflow::json::MS_PER_DAY)
                    .rem_euclid(crate::dataflow::json::MS_PER_DAY))
            },
            _ => return Err(refuse()),
        };
        return Ok(Some(strict2(
            Ty::Data(t),
            value,
            interval,
            move |x, y| match (x, y) {
                (Value::Timestamp(ms), Value::Int(n)) => step(ms, sign * n).map(Value::Timestamp),
                _ => Ok(Value::Null),
            },
        )));
    }
    let whole = |t: &Ty| matches!(t, Ty::Null | Ty::Data(T::Int | T::BigInt));
    let c = match (&a.ty, &b.ty, op) {
        (x, y, "+" | "-") if x == y => {
            let sign = if op == "-" { -1 } else { 1 };
            strict2(a.ty.clone(), f, g, move |x, y| match (x, y) {
                (Value::Int(p), Value::Int(q)) => p
                    .checked_add(sign * q)
                    .map(Value::Int)
                    .ok_or_else(|| overflow("an interval")),
                _ => Ok(Value::Null),
            })
        }
        // An interval scaled by a whole number, on either side of `*`.
        (iv, n, "*" | "/") | (n, iv, "*") if is_interval(iv) && whole(n) => {
            let divide = op == "/";
            let (interval, n) = if is_interval(&a.ty) { (f, g) } else { (g, f) };
            strict2(iv.clone(), interval, n, move |x, y| match (x, y) {
                (Value::Int(_), Value::Int(0)) if divide => {
                    Err("an interval divided by zero".into())
                }
                (Value::Int(p), Value::Int(q)) => if divide {
                    p.checked_div(q)
                } else {
                    p.checked_mul(q)
                }
                .map(Value::Int)
                .ok_or_else(|| overflow("an interval")),
                _ => Ok(Value::Null),
            })
        }
        _ => return Err(refuse()),
    };
    Ok(Some(c))
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
