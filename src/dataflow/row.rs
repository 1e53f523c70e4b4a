//! Rows: typed values under a schema fixed before the job runs, each row
//! with a change kind (Flink's `RowKind`), so that an updating result can
//! flow into a later stage and be retracted there.

use std::fmt;

/// What a row says about the table its stream describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RowKind {
    /// A new row (the only kind on an append-only stream).
    Insert,
    /// The previous value of a key that changes, retracted; an
    /// `UpdateAfter` follows it.
    UpdateBefore,
    /// The new value of a key that changed.
    UpdateAfter,
    /// The row is gone.
    Delete,
}

impl RowKind {
    /// Insert and update-after add a row; update-before and delete take one away.
    pub fn is_addition(self) -> bool {
        matches!(self, RowKind::Insert | RowKind::UpdateAfter)
    }

    /// Flink's short names, as changelog output shows them.
    pub fn short(self) -> &'static str {
        match self {
            RowKind::Insert => "+I",
            RowKind::UpdateBefore => "-U",
            RowKind::UpdateAfter => "+U",
            RowKind::Delete => "-D",
        }
    }

    pub fn to_byte(self) -> u8 {
        match self {
            RowKind::Insert => 0,
            RowKind::UpdateBefore => 1,
            RowKind::UpdateAfter => 2,
            RowKind::Delete => 3,
        }
    }

    pub fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            0 => RowKind::Insert,
            1 => RowKind::UpdateBefore,
            2 => RowKind::UpdateAfter,
            3 => RowKind::Delete,
            _ => return None,
        })
    }
}

/// An exact decimal: `unscaled · 10^-scale`.
///
/// Packed to 8-byte alignment: an `i128` would make [`Value`] (and every
/// row's buffer) 16-byte aligned and 48 bytes long, and the allocator
/// serves a 16-aligned row of two values (96 bytes) by over-allocating and
/// aligning inside the block, which slows every allocation and free of its
/// page: about 300 instructions per word of the word count. Packed, a
/// value is 32 bytes and a row an ordinary allocation. (Fields are read by
/// value; a packed field cannot be borrowed.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C, packed(8))]
pub struct Decimal {
    pub unscaled: i128,
    pub scale: u8,
}

impl Decimal {
    /// Parses `"-12.345"`, `"7"` or `"1e3"`-free decimal text at `scale`,
    /// rounding half away from zero past the scale (as SQL's CAST does).
    pub fn parse(text: &str, scale: u8) -> Result<Self, String> {
        let t = text.trim();
        let (negative, digits) = match t.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, t.strip_prefix('+').unwrap_or(t)),
        };
        let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
        if int.is_empty() && frac.is_empty()
            || !int.bytes().all(|b| b.is_ascii_digit())
            || !frac.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(format!("{text:?} is not a decimal number"));
        }
        let overflow = || format!("{text:?} does not fit DECIMAL(38, {scale})");
        let mut unscaled: i128 = 0;
        for b in int.bytes() {
            unscaled = unscaled
                .checked_mul(10)
                .and_then(|v| v.checked_add(i128::from(b - b'0')))
                .ok_or_else(overflow)?;
        }
        let frac = frac.as_bytes();
        for i in 0..scale as usize {
            let d = frac.get(i).map_or(0, |b| b - b'0');
            unscaled = unscaled
                .checked_mul(10)
                .and_then(|v| v.checked_add(i128::from(d)))
                .ok_or_else(overflow)?;
        }
        if frac.get(scale as usize).is_some_and(|b| *b >= b'5') {
            unscaled = unscaled.checked_add(1).ok_or_else(overflow)?;
        }
        Ok(Self {
            unscaled: if negative { -unscaled } else { unscaled },
            scale,
        })
    }

    /// The nearest double (for arithmetic that leaves exact decimals).
    pub fn to_f64(self) -> f64 {
        self.unscaled as f64 / 10f64.powi(i32::from(self.scale))
    }
}

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.unscaled < 0 { "-" } else { "" };
        let abs = self.unscaled.unsigned_abs();
        if self.scale == 0 {
            return write!(f, "{sign}{abs}");
        }
        let p = 10u128.pow(u32::from(self.scale));
        write!(
            f,
            "{sign}{}.{:0width$}",
            abs / p,
            abs % p,
            width = self.scale as usize
        )
    }
}

/// One value of a row.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    /// INT and BIGINT.
    Int(i64),
    Double(f64),
    Decimal(Decimal),
    String(String),
    Bytes(Vec<u8>),
    /// Milliseconds since the Unix epoch, UTC.
    Timestamp(i64),
    List(Vec<Value>),
    /// The fields of a ROW, in the order of its type.
    Struct(Vec<Value>),
}

impl Value {
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_timestamp(&self) -> Option<i64> {
        match self {
            Value::Timestamp(t) => Some(*t),
            _ => None,
        }
    }

    /// A number as a double (INT, DOUBLE, DECIMAL); None otherwise.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(i) => Some(*i as f64),
            Value::Double(d) => Some(*d),
            Value::Decimal(d) => Some(d.to_f64()),
            _ => None,
        }
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Double(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::String(v.to_string())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::String(v)
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}

/// A MAP value of `pairs` (how [`DataType::Map`] is carried), a later value
/// of a key replacing the earlier one; a NULL key is an error.
pub fn map_of(pairs: impl IntoIterator<Item = (Value, Value)>) -> Result<Value, String> {
    let mut out: Vec<Value> = Vec::new();
    for (k, v) in pairs {
        if k.is_null() {
            return Err("a MAP key is NULL".into());
        }
        let at = out
            .iter()
            .position(|e| matches!(e, Value::Struct(kv) if kv[0] == k));
        match at {
            Some(i) => out[i] = Value::Struct(vec![k, v]),
            None => out.push(Value::Struct(vec![k, v])),
        }
    }
    Ok(Value::List(out))
}

/// The (key, value) entries of a MAP value, in the order they were made.
pub fn map_entries(v: &Value) -> impl Iterator<Item = (&Value, &Value)> {
    let items = match v {
        Value::List(items) => items.as_slice(),
        _ => &[],
    };
    items.iter().filter_map(|e| match e {
        Value::Struct(kv) if kv.len() == 2 => Some((&kv[0], &kv[1])),
        _ => None,
    })
}

/// A row: its change kind and its values, in schema order.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub kind: RowKind,
    pub values: Vec<Value>,
}

impl Row {
    pub fn new(kind: RowKind, values: Vec<Value>) -> Self {
        Self { kind, values }
    }

    pub fn insert(values: Vec<Value>) -> Self {
        Self::new(RowKind::Insert, values)
    }

    /// The same values with another kind.
    pub fn with_kind(mut self, kind: RowKind) -> Self {
        self.kind = kind;
        self
    }

    pub fn get(&self, column: usize) -> &Value {
        self.values.get(column).unwrap_or(&Value::Null)
    }
}

/// A column's type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataType {
    Boolean,
    /// 32-bit in the schema, carried as [`Value::Int`]; values outside
    /// its range are refused where rows are decoded.
    Int,
    BigInt,
    Double,
    Decimal {
        precision: u8,
        scale: u8,
    },
    String,
    Bytes,
    /// TIMESTAMP(3): a wall-clock time without a zone, milliseconds as if
    /// it were UTC.
    Timestamp,
    /// DATE: a day, carried as [`Value::Timestamp`] at its midnight (as if
    /// UTC), so that the functions over timestamps read its fields.
    Date,
    /// TIME: a time of day to the millisecond, carried as
    /// [`Value::Timestamp`] on 1970-01-01, so that HOUR, MINUTE and
    /// DATE_FORMAT read it.
    Time,
    /// TIMESTAMP_LTZ(3): an instant, milliseconds since the Unix epoch.
    /// Carried as [`Value::Timestamp`] like TIMESTAMP; SQL shows it, and
    /// reads its fields, in the session time zone (`[pipeline]
    /// time_zone`).
    TimestampLtz,
    List(Box<DataType>),
    /// MAP<K, V>: entries in the order they were made, keys distinct;
    /// carried as a [`Value::List`] of two-field [`Value::Struct`]s.
    Map(Box<DataType>, Box<DataType>),
    Struct(Vec<Field>),
}

impl DataType {
    /// TIMESTAMP or TIMESTAMP_LTZ: milliseconds in a [`Value::Timestamp`],
    /// what an event-time column, a format's timestamp and a window's
    /// bounds need.
    pub fn is_timestamp(&self) -> bool {
        matches!(self, DataType::Timestamp | DataType::TimestampLtz)
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataType::Boolean => write!(f, "BOOLEAN"),
            DataType::Int => write!(f, "INT"),
            DataType::BigInt => write!(f, "BIGINT"),
            DataType::Double => write!(f, "DOUBLE"),
            DataType::Decimal { precision, scale } => write!(f, "DECIMAL({precision}, {scale})"),
            DataType::String => write!(f, "VARCHAR"),
            DataType::Bytes => write!(f, "BYTES"),
            DataType::Timestamp => write!(f, "TIMESTAMP(3)"),
            DataType::TimestampLtz => write!(f, "TIMESTAMP_LTZ(3)"),
            DataType::Date => write!(f, "DATE"),
            DataType::Time => write!(f, "TIME"),
            DataType::List(t) => write!(f, "ARRAY<{t}>"),
            DataType::Map(k, v) => write!(f, "MAP<{k}, {v}>"),
            DataType::Struct(fields) => {
                write!(f, "ROW<")?;
                for (i, field) in fields.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{} {}", field.name, field.data_type)?;
                }
                write!(f, ">")
            }
        }
    }
}

/// A named column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub data_type: DataType,
}

impl Field {
    pub fn new(name: impl Into<String>, data_type: DataType) -> Self {
        Self {
            name: name.into(),
            data_type,
        }
    }
}

/// The columns of every row on an edge.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Schema {
    pub fields: Vec<Field>,
}

impl Schema {
    pub fn new(fields: Vec<Field>) -> Self {
        Self { fields }
    }

    /// A schema from `(name, type)` pairs.
    pub fn of(columns: &[(&str, DataType)]) -> Self {
        Self::new(
            columns
                .iter()
                .map(|(n, t)| Field::new(*n, t.clone()))
                .collect(),
        )
    }

    pub fn len(&self) -> usize {
        self.fields.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The index of the column `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }

    /// The indexes of `names`, or the first that is not a column, with the
    /// columns there are.
    pub fn indexes_of(&self, names: &[&str]) -> Result<Vec<usize>, String> {
        names
            .iter()
            .map(|n| {
                self.index_of(n)
                    .ok_or_else(|| format!("no column {n:?} (columns: {self})"))
            })
            .collect()
    }
}

impl fmt::Display for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, field) in self.fields.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{} {}", field.name, field.data_type)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_32_bytes_with_8_byte_alignment() {
        // What `Decimal`'s packing is for: rows are ordinary allocations.
        assert_eq!(std::mem::align_of::<Value>(), 8);
        assert_eq!(std::mem::size_of::<Value>(), 32);
    }

    #[test]
    fn decimals_parse_round_and_print_exactly() {
        let d = Decimal::parse("12.345", 2).unwrap();
        assert_eq!({ d.unscaled }, 1235);
        assert_eq!(d.to_string(), "12.35");
        assert_eq!(Decimal::parse("-0.5", 0).unwrap().to_string(), "-1");
        assert_eq!(Decimal::parse("7", 3).unwrap().to_string(), "7.000");
        assert_eq!(Decimal::parse("-0.07", 2).unwrap().to_string(), "-0.07");
        assert!(Decimal::parse("1e3", 0)
            .unwrap_err()
            .contains("not a decimal"));
        assert!(Decimal::parse("", 0).is_err());
        assert!(Decimal::parse("9".repeat(40).as_str(), 0)
            .unwrap_err()
            .contains("does not fit"));
    }

    #[test]
    fn schema_names_missing_columns_with_what_there_is() {
        let s = Schema::of(&[("a", DataType::BigInt), ("b", DataType::String)]);
        assert_eq!(s.indexes_of(&["b", "a"]).unwrap(), vec![1, 0]);
        let e = s.indexes_of(&["c"]).unwrap_err();
        assert!(
            e.contains("\"c\"") && e.contains("a BIGINT, b VARCHAR"),
            "{e}"
        );
    }

    #[test]
    fn row_kinds_round_trip_through_bytes() {
        for k in [
            RowKind::Insert,
            RowKind::UpdateBefore,
            RowKind::UpdateAfter,
            RowKind::Delete,
        ] {
            assert_eq!(RowKind::from_byte(k.to_byte()), Some(k));
        }
        assert_eq!(RowKind::from_byte(9), None);
        assert!(RowKind::UpdateAfter.is_addition() && !RowKind::UpdateBefore.is_addition());
    }
}
