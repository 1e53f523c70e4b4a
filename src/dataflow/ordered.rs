//! Order-preserving ("memcomparable") bytes for values: the bytes of `a`
//! sort before those of `b` exactly when `a` orders before `b`.
//!
//! State tables are RocksDB key ranges, kept in byte order. An operator
//! that needs its rows in a value's order (a top-N's best rows, an OVER
//! window's pending rows by time) keys each row's map entry by these
//! bytes and reads the first entries of its map, rather than one list it
//! decodes, re-sorts and rewrites whole on every record (Flink's
//! `RetractableTopNFunction` and `RowTimeRangeBoundedPrecedingFunction`
//! keep their rows in sorted state the same way).
//!
//! Each value's bytes are prefix-free, so a tuple of values is their bytes
//! one after another. Descending order inverts a value's bytes; where
//! NULLs go is a leading byte that is not inverted.

use super::compare::compare;
use super::row::{Decimal, Value};
use std::cmp::Ordering;

/// One ORDER BY column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SortKey {
    pub column: usize,
    pub descending: bool,
    pub nulls_first: bool,
}

impl SortKey {
    /// `a` against `b` by `keys` in turn, NULLs where each key puts them.
    pub fn compare_rows(keys: &[SortKey], a: &[Value], b: &[Value]) -> Ordering {
        for k in keys {
            let (x, y) = (&a[k.column], &b[k.column]);
            let o = match (x.is_null(), y.is_null()) {
                (true, true) => Ordering::Equal,
                (true, false) if k.nulls_first => Ordering::Less,
                (true, false) => Ordering::Greater,
                (false, true) if k.nulls_first => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) if k.descending => compare(y, x),
                (false, false) => compare(x, y),
            };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    }
}

/// The bytes of `values`' sort-key columns, in `keys`' order.
pub fn encode_sort_key(keys: &[SortKey], values: &[Value], out: &mut Vec<u8>) {
    for k in keys {
        let v = values.get(k.column).unwrap_or(&Value::Null);
        if v.is_null() {
            out.push(if k.nulls_first { 0x00 } else { 0x02 });
            continue;
        }
        out.push(0x01);
        let start = out.len();
        encode_value(v, out);
        if k.descending {
            for b in &mut out[start..] {
                *b = !*b;
            }
        }
    }
}

/// An event time's bytes (a signed 64-bit integer's).
pub fn encode_time(t: i64, out: &mut Vec<u8>) {
    out.extend_from_slice(&((t as u64) ^ (1 << 63)).to_be_bytes());
}

/// The time [`encode_time`] wrote at the front of `bytes`.
pub fn decode_time(bytes: &[u8]) -> Option<i64> {
    let b: [u8; 8] = bytes.get(..8)?.try_into().ok()?;
    Some((u64::from_be_bytes(b) ^ (1 << 63)) as i64)
}

/// One non-NULL value, ascending. A column holds one type, so the types
/// need not order among themselves; each starts with its own tag so that
/// two of different types never share bytes.
fn encode_value(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Null => out.push(0x00),
        Value::Bool(b) => out.extend_from_slice(&[0x10, u8::from(*b)]),
        Value::Int(i) => {
            out.push(0x20);
            encode_time(*i, out);
        }
        Value::Timestamp(t) => {
            out.push(0x21);
            encode_time(*t, out);
        }
        Value::Double(d) => {
            out.push(0x22);
            // IEEE 754 bits in total order (as `f64::total_cmp`):
            // negatives inverted, positives with the sign bit set.
            let bits = d.to_bits();
            let ordered = if bits >> 63 == 1 {
                !bits
            } else {
                bits | (1 << 63)
            };
            out.extend_from_slice(&ordered.to_be_bytes());
        }
        Value::Decimal(d) => {
            out.push(0x23);
            encode_decimal(d, out);
        }
        Value::String(s) => {
            out.push(0x30);
            encode_bytes(s.as_bytes(), out);
        }
        Value::Bytes(b) => {
            out.push(0x31);
            encode_bytes(b, out);
        }
        Value::List(items) | Value::Struct(items) => {
            out.push(if matches!(v, Value::List(_)) {
                0x40
            } else {
                0x41
            });
            // Element by element; a shorter list that is a prefix of a
            // longer one sorts first (its end, 0x00, before 0x01).
            for item in items {
                out.push(0x01);
                if item.is_null() {
                    out.push(0x00);
                } else {
                    encode_value(item, out);
                }
            }
            out.push(0x00);
        }
    }
}

/// Bytes with 0x00 escaped as 0x00 0xFF, ended by 0x00 0x00: prefix-free,
/// and a prefix sorts before what it starts.
fn encode_bytes(b: &[u8], out: &mut Vec<u8>) {
    for &x in b {
        out.push(x);
        if x == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0x00, 0x00]);
}

/// A decimal as its sign, then (for non-zero) its decimal exponent and
/// significant digits: 1.5, 1.50 and 15E-1 are the same bytes, and the
/// order is numeric whatever the scales.
fn encode_decimal(d: &Decimal, out: &mut Vec<u8>) {
    if d.unscaled == 0 {
        out.push(0x01);
        return;
    }
    let negative = d.unscaled < 0;
    let digits = d.unscaled.unsigned_abs().to_string();
    // The value is 0.<digits> × 10^exponent.
    let exponent = digits.len() as i32 - i32::from(d.scale);
    let significant = digits.trim_end_matches('0');
    out.push(if negative { 0x00 } else { 0x02 });
    let start = out.len();
    // |exponent| ≤ 39 + 255: two bytes, offset to stay non-negative.
    out.extend_from_slice(&((exponent + 0x8000) as u16).to_be_bytes());
    out.extend_from_slice(significant.as_bytes());
    out.push(0x00);
    if negative {
        for b in &mut out[start..] {
            *b = !*b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(keys: &[SortKey], values: &[Value]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_sort_key(keys, values, &mut out);
        out
    }

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<i64>().prop_map(Value::Int),
            (-3i64..3).prop_map(Value::Int),
            any::<f64>()
                .prop_filter("not NaN", |d| !d.is_nan())
                .prop_map(Value::Double),
            ".{0,4}".prop_map(Value::String),
            prop::collection::vec(0u8..3, 0..4).prop_map(Value::Bytes),
            (any::<i64>(), 0u8..6).prop_map(|(u, s)| Value::Decimal(Decimal {
                unscaled: i128::from(u),
                scale: s
            })),
            (-1000i64..1000, 0u8..4).prop_map(|(u, s)| Value::Decimal(Decimal {
                unscaled: i128::from(u),
                scale: s
            })),
        ]
    }

    /// Two rows of one type per column, as a table's columns are.
    fn same_typed(a: &Value, b: &Value) -> bool {
        a.is_null() || b.is_null() || std::mem::discriminant(a) == std::mem::discriminant(b)
    }

    proptest! {
        /// Byte order is `SortKey::compare_rows`' order, whatever the
        /// direction and the place of NULLs; equal bytes only for rows
        /// that compare equal.
        #[test]
        fn bytes_order_as_the_rows_compare(
            a in value(),
            b in value(),
            descending in any::<bool>(),
            nulls_first in any::<bool>(),
        ) {
            prop_assume!(same_typed(&a, &b));
            let keys = [SortKey { column: 0, descending, nulls_first }];
            let (ra, rb) = ([a.clone(), Value::Int(0)], [b.clone(), Value::Int(0)]);
            let want = SortKey::compare_rows(&keys, &ra, &rb);
            prop_assert_eq!(key(&keys, &ra).cmp(&key(&keys, &rb)), want, "{:?} vs {:?}", a, b);
        }

        /// A tuple's order is its first column's, then the next one's.
        #[test]
        fn tuples_order_column_by_column(
            a in (-2i64..2, ".{0,2}"),
            b in (-2i64..2, ".{0,2}"),
        ) {
            let keys = [
                SortKey { column: 0, descending: true, nulls_first: false },
                SortKey { column: 1, descending: false, nulls_first: false },
            ];
            let ra = [Value::Int(a.0), Value::String(a.1)];
            let rb = [Value::Int(b.0), Value::String(b.1)];
            prop_assert_eq!(
                key(&keys, &ra).cmp(&key(&keys, &rb)),
                SortKey::compare_rows(&keys, &ra, &rb)
            );
        }

        #[test]
        fn times_round_trip_in_order(a in any::<i64>(), b in any::<i64>()) {
            let (mut x, mut y) = (Vec::new(), Vec::new());
            encode_time(a, &mut x);
            encode_time(b, &mut y);
            prop_assert_eq!(x.cmp(&y), a.cmp(&b));
            prop_assert_eq!(decode_time(&x), Some(a));
        }
    }

    #[test]
    fn decimals_of_different_scales_are_the_same_value() {
        let d = |unscaled, scale| Value::Decimal(Decimal { unscaled, scale });
        let asc = [SortKey {
            column: 0,
            descending: false,
            nulls_first: false,
        }];
        assert_eq!(key(&asc, &[d(15, 1)]), key(&asc, &[d(150, 2)]));
        assert_eq!(
            key(&asc, &[d(-100, 0)]).cmp(&key(&asc, &[d(-99, 0)])),
            Ordering::Less
        );
        assert_eq!(
            key(&asc, &[d(1, 3)]).cmp(&key(&asc, &[d(0, 0)])),
            Ordering::Greater
        );
    }
}
