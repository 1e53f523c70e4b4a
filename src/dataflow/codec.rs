//! The binary encoding of values and rows: keys of hash exchanges and
//! state tables, and the values state tables hold. Self-describing (a tag
//! byte per value), so a reader that knows a table's codec can decode it
//! without the schema, and values have any size.
//!
//! Format: `tag | payload`; tags 0 null, 1 false, 2 true, 3 int (i64 LE),
//! 4 double (f64 LE), 5 decimal (i128 LE, scale u8), 6 string and 7 bytes
//! (varint length, bytes), 8 timestamp (i64 LE ms), 9 list and 10 struct
//! (varint count, values). A row is `kind (u8) | varint count | values`.

use super::row::{Decimal, Row, RowKind, Value};

/// A type state tables can hold: how it becomes bytes and back.
pub trait StateCodec: Sized {
    /// Names the encoding for `weir state` and errors.
    const NAME: &'static str;
    fn encode(&self, out: &mut Vec<u8>);
    fn decode(bytes: &[u8]) -> Result<Self, String>;
    /// Decodes into `self`, reusing its buffers where the type can.
    fn decode_into(&mut self, bytes: &[u8]) -> Result<(), String> {
        *self = Self::decode(bytes)?;
        Ok(())
    }
}

#[inline]
pub fn put_varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
pub fn get_varint(input: &mut &[u8]) -> Result<u64, String> {
    // One byte: a small count or length, the common case.
    if let Some((&b, rest)) = input.split_first() {
        if b < 0x80 {
            *input = rest;
            return Ok(u64::from(b));
        }
    }
    get_long_varint(input)
}

fn get_long_varint(input: &mut &[u8]) -> Result<u64, String> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = input
            .split_first()
            .ok_or("a length runs past the end of the bytes")?;
        *input = rest;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Ok(v);
        }
    }
    Err("a length is longer than 10 bytes".into())
}

fn take<'a>(input: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
    if input.len() < n {
        return Err(format!(
            "{n} bytes expected, {} left: the value is cut short",
            input.len()
        ));
    }
    let (head, rest) = input.split_at(n);
    *input = rest;
    Ok(head)
}

fn fixed<const N: usize>(input: &mut &[u8]) -> Result<[u8; N], String> {
    Ok(take(input, N)?.try_into().expect("N bytes"))
}

/// `tag | length (varint) | bytes`: a string's or a byte string's
/// encoding. Every keyed record encodes its key twice (routing, then the
/// keyed task): one reserve, and a short value's tag and length as one
/// write.
fn put_tagged(tag: u8, bytes: &[u8], out: &mut Vec<u8>) {
    out.reserve(bytes.len() + 11);
    if bytes.len() < 0x80 {
        out.extend_from_slice(&[tag, bytes.len() as u8]);
    } else {
        out.push(tag);
        put_varint(bytes.len() as u64, out);
    }
    out.extend_from_slice(bytes);
}

pub fn encode_value(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Null => out.push(0),
        Value::Bool(false) => out.push(1),
        Value::Bool(true) => out.push(2),
        Value::Int(i) => {
            out.push(3);
            out.extend_from_slice(&i.to_le_bytes());
        }
        Value::Double(d) => {
            out.push(4);
            // -0.0 and 0.0 are one key.
            let d = if *d == 0.0 { 0.0 } else { *d };
            out.extend_from_slice(&d.to_le_bytes());
        }
        Value::Decimal(d) => {
            out.push(5);
            out.extend_from_slice(&d.unscaled.to_le_bytes());
            out.push(d.scale);
        }
        Value::String(s) => put_tagged(6, s.as_bytes(), out),
        Value::Bytes(b) => put_tagged(7, b, out),
        Value::Timestamp(t) => {
            out.push(8);
            out.extend_from_slice(&t.to_le_bytes());
        }
        Value::List(items) | Value::Struct(items) => {
            out.push(if matches!(v, Value::List(_)) { 9 } else { 10 });
            put_varint(items.len() as u64, out);
            for item in items {
                encode_value(item, out);
            }
        }
    }
}

pub fn decode_value(input: &mut &[u8]) -> Result<Value, String> {
    let tag = fixed::<1>(input)?[0];
    Ok(match tag {
        0 => Value::Null,
        1 => Value::Bool(false),
        2 => Value::Bool(true),
        3 => Value::Int(i64::from_le_bytes(fixed(input)?)),
        4 => Value::Double(f64::from_le_bytes(fixed(input)?)),
        5 => {
            let unscaled = i128::from_le_bytes(fixed(input)?);
            let scale = fixed::<1>(input)?[0];
            Value::Decimal(Decimal { unscaled, scale })
        }
        6 | 7 => {
            let n = get_varint(input)? as usize;
            let bytes = take(input, n)?;
            if tag == 6 {
                Value::String(
                    std::str::from_utf8(bytes)
                        .map_err(|e| format!("a string is not UTF-8: {e}"))?
                        .to_string(),
                )
            } else {
                Value::Bytes(bytes.to_vec())
            }
        }
        8 => Value::Timestamp(i64::from_le_bytes(fixed(input)?)),
        9 | 10 => {
            let n = get_varint(input)? as usize;
            // Bounded by the bytes there are, not by a length that lies.
            let mut items = Vec::with_capacity(n.min(input.len()));
            for _ in 0..n {
                items.push(decode_value(input)?);
            }
            if tag == 9 {
                Value::List(items)
            } else {
                Value::Struct(items)
            }
        }
        other => return Err(format!("unknown value tag {other}")),
    })
}

pub fn encode_values(values: &[Value], out: &mut Vec<u8>) {
    put_varint(values.len() as u64, out);
    for v in values {
        encode_value(v, out);
    }
}

pub fn decode_values(input: &mut &[u8]) -> Result<Vec<Value>, String> {
    let n = get_varint(input)? as usize;
    let mut values = Vec::with_capacity(n.min(input.len()));
    for _ in 0..n {
        values.push(decode_value(input)?);
    }
    Ok(values)
}

/// The key of `row` on `columns`: what a hash exchange routes by and what
/// keyed state is stored under.
pub fn encode_key(row: &Row, columns: &[usize], out: &mut Vec<u8>) {
    for c in columns {
        encode_value(row.get(*c), out);
    }
}

/// The values of a key encoded by [`encode_key`].
pub fn decode_key(mut bytes: &[u8]) -> Result<Vec<Value>, String> {
    let mut values = Vec::new();
    while !bytes.is_empty() {
        values.push(decode_value(&mut bytes)?);
    }
    Ok(values)
}

fn no_trailing(rest: &[u8]) -> Result<(), String> {
    if rest.is_empty() {
        Ok(())
    } else {
        Err(format!("{} bytes left after the value", rest.len()))
    }
}

impl StateCodec for Row {
    const NAME: &'static str = "row";

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.kind.to_byte());
        encode_values(&self.values, out);
    }

    fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut input = bytes;
        let row = Row::decode_prefix(&mut input)?;
        no_trailing(input)?;
        Ok(row)
    }
}

impl Row {
    /// Decodes the row at the front of `input` and moves past it (a row's
    /// encoding says where it ends).
    pub fn decode_prefix(input: &mut &[u8]) -> Result<Row, String> {
        let kind = fixed::<1>(input)?[0];
        let kind = RowKind::from_byte(kind).ok_or_else(|| format!("unknown row kind {kind}"))?;
        let values = decode_values(input)?;
        Ok(Row { kind, values })
    }
}

impl StateCodec for Value {
    const NAME: &'static str = "value";

    fn encode(&self, out: &mut Vec<u8>) {
        encode_value(self, out);
    }

    fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut input = bytes;
        let v = decode_value(&mut input)?;
        no_trailing(input)?;
        Ok(v)
    }
}

impl StateCodec for Vec<Value> {
    const NAME: &'static str = "values";

    fn encode(&self, out: &mut Vec<u8>) {
        encode_values(self, out);
    }

    fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut input = bytes;
        let v = decode_values(&mut input)?;
        no_trailing(input)?;
        Ok(v)
    }
}

impl StateCodec for i64 {
    const NAME: &'static str = "i64";

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }

    fn decode(bytes: &[u8]) -> Result<Self, String> {
        let b: [u8; 8] = bytes
            .try_into()
            .map_err(|_| format!("an i64 is 8 bytes, not {}", bytes.len()))?;
        Ok(i64::from_le_bytes(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::Int),
            any::<f64>()
                .prop_filter("NaN is not equal to itself", |d| !d.is_nan() && *d != 0.0)
                .prop_map(Value::Double),
            (any::<i128>(), 0u8..38)
                .prop_map(|(unscaled, scale)| Value::Decimal(Decimal { unscaled, scale })),
            ".{0,200}".prop_map(Value::String),
            proptest::collection::vec(any::<u8>(), 0..20).prop_map(Value::Bytes),
            any::<i64>().prop_map(Value::Timestamp),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::List),
                proptest::collection::vec(inner, 0..4).prop_map(Value::Struct),
            ]
        })
    }

    proptest! {
        #[test]
        fn rows_round_trip(values in proptest::collection::vec(value(), 0..8), kind in 0u8..4) {
            let row = Row::new(RowKind::from_byte(kind).unwrap(), values);
            let mut bytes = Vec::new();
            row.encode(&mut bytes);
            prop_assert_eq!(Row::decode(&bytes).unwrap(), row);
        }

        #[test]
        fn keys_round_trip(values in proptest::collection::vec(value(), 1..4)) {
            let row = Row::insert(values.clone());
            let mut key = Vec::new();
            encode_key(&row, &(0..values.len()).collect::<Vec<_>>(), &mut key);
            prop_assert_eq!(decode_key(&key).unwrap(), values);
        }

        #[test]
        fn varints_round_trip(v in any::<u64>(), tail in any::<u8>()) {
            let mut bytes = Vec::new();
            put_varint(v, &mut bytes);
            bytes.push(tail);
            let mut input = bytes.as_slice();
            prop_assert_eq!(get_varint(&mut input).unwrap(), v);
            prop_assert_eq!(input, &[tail][..]);
        }

        #[test]
        fn garbage_is_an_error_not_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Row::decode(&bytes);
            let _ = decode_key(&bytes);
        }
    }

    #[test]
    fn cut_values_say_so() {
        let mut bytes = Vec::new();
        Row::insert(vec![Value::String("hello".into())]).encode(&mut bytes);
        let e = Row::decode(&bytes[..bytes.len() - 2]).unwrap_err();
        assert!(e.contains("cut short"), "{e}");
        assert!(Row::decode(&[0, 1, 99]).unwrap_err().contains("tag 99"));
    }
}
