//! SQL's ordering of values and the decimal view of a number: shared by
//! the expression compiler (comparisons, GREATEST, ARRAY_CONTAINS), the
//! aggregates (MIN, MAX, distinct sets) and the ordered state of top-N.

use std::cmp::Ordering;

use super::row::{Decimal, Value};

/// `d` at scale `scale` (>= its own), or None on overflow.
fn rescale(d: &Decimal, scale: u8) -> Option<i128> {
    d.unscaled
        .checked_mul(10i128.checked_pow(u32::from(scale - d.scale))?)
}

/// An integer or decimal as a decimal (an integer at scale 0).
pub(crate) fn as_decimal(v: &Value) -> Option<Decimal> {
    match v {
        Value::Decimal(d) => Some(*d),
        Value::Int(i) => Some(Decimal {
            unscaled: i128::from(*i),
            scale: 0,
        }),
        _ => None,
    }
}

/// SQL ordering of two non-NULL values of comparable types.
pub fn compare(a: &Value, b: &Value) -> Ordering {
    use Value::*;
    match (a, b) {
        (Int(x), Int(y)) => x.cmp(y),
        (String(x), String(y)) => x.cmp(y),
        (Timestamp(x), Timestamp(y)) => x.cmp(y),
        (Bool(x), Bool(y)) => x.cmp(y),
        (Bytes(x), Bytes(y)) => x.cmp(y),
        (Decimal(_), Decimal(_) | Int(_)) | (Int(_), Decimal(_)) => {
            let (x, y) = (
                as_decimal(a).expect("decimal"),
                as_decimal(b).expect("decimal"),
            );
            let s = x.scale.max(y.scale);
            match (rescale(&x, s), rescale(&y, s)) {
                (Some(x), Some(y)) => x.cmp(&y),
                _ => float(a).total_cmp(&float(b)),
            }
        }
        _ => float(a).total_cmp(&float(b)),
    }
}

fn float(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}
