//! Keyed aggregates: a running group aggregate (an updating result), and
//! the accumulators it shares with the window aggregate (`super::window`).
//!
//! The group aggregate consumes updating input too: an insert or
//! update-after adds its row, an update-before or delete takes it away, so a
//! later stage over an updating result retracts the old value before it
//! adds the new one. It emits insert for a new key, update-before and
//! update-after when a key's result changes, and delete when its last row
//! is retracted.

use super::state_ttl::StateTtl;
use crate::dataflow::codec::{decode_value, encode_value, get_varint, put_varint, StateCodec};
use crate::dataflow::operator::{Collector, Context, Operator, Queried, Record, RecordKey};
use crate::dataflow::row::{DataType, Decimal, Field, Row, RowKind, Schema, Value};
use crate::dataflow::tables::{Table, TableSpec};
use crate::error::Result;

/// One aggregate function and its input column (none: `COUNT(*)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggFunction {
    Count,
    Sum,
    Min,
    Max,
    Avg,
    /// The variance and standard deviation of the values, as DOUBLE: the
    /// part keeps their sum and sum of squares, so a retraction subtracts.
    VarPop,
    VarSamp,
    StddevPop,
    StddevSamp,
    /// Over BOOLEAN values: the part keeps how many are TRUE.
    BoolAnd,
    BoolOr,
    /// The first or last value in arrival order (not over retractions).
    FirstValue,
    LastValue,
    /// The values in arrival order, NULLs included; a retraction takes
    /// out the first equal value (Flink's `ArrayAggFunction`). LISTAGG is
    /// ARRAY_AGG joined by its separator.
    ArrayAgg,
    /// A user-defined aggregate function ([`Agg::user`]): the part keeps
    /// its accumulator.
    User,
}

impl AggFunction {
    /// COUNT, SUM, MIN, MAX or AVG by its SQL name (any case).
    pub fn from_sql_name(name: &str) -> Option<Self> {
        Some(match name.to_ascii_uppercase().as_str() {
            "COUNT" => AggFunction::Count,
            "SUM" => AggFunction::Sum,
            "MIN" => AggFunction::Min,
            "MAX" => AggFunction::Max,
            "AVG" => AggFunction::Avg,
            "VAR_POP" => AggFunction::VarPop,
            "VAR_SAMP" | "VARIANCE" => AggFunction::VarSamp,
            "STDDEV_POP" => AggFunction::StddevPop,
            "STDDEV_SAMP" | "STDDEV" => AggFunction::StddevSamp,
            "BOOL_AND" | "EVERY" => AggFunction::BoolAnd,
            "BOOL_OR" => AggFunction::BoolOr,
            "FIRST_VALUE" => AggFunction::FirstValue,
            "LAST_VALUE" => AggFunction::LastValue,
            "ARRAY_AGG" => AggFunction::ArrayAgg,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            AggFunction::Count => "count",
            AggFunction::Sum => "sum",
            AggFunction::Min => "min",
            AggFunction::Max => "max",
            AggFunction::Avg => "avg",
            AggFunction::VarPop => "var_pop",
            AggFunction::VarSamp => "var_samp",
            AggFunction::StddevPop => "stddev_pop",
            AggFunction::StddevSamp => "stddev_samp",
            AggFunction::BoolAnd => "bool_and",
            AggFunction::BoolOr => "bool_or",
            AggFunction::FirstValue => "first_value",
            AggFunction::LastValue => "last_value",
            AggFunction::ArrayAgg => "array_agg",
            AggFunction::User => "user-defined",
        }
    }

    /// A variance or a standard deviation.
    fn spread(self) -> bool {
        matches!(
            self,
            AggFunction::VarPop
                | AggFunction::VarSamp
                | AggFunction::StddevPop
                | AggFunction::StddevSamp
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agg {
    pub function: AggFunction,
    pub column: Option<usize>,
    /// The output column's name.
    pub name: String,
    /// Over distinct values only (`COUNT(DISTINCT x)`, `SUM(DISTINCT x)`,
    /// ...); each value's multiplicity is kept so that a retraction takes
    /// it away exactly. MIN and MAX over an input that takes rows back
    /// are planned so (Flink's `MinWithRetract`): MIN(DISTINCT x) is
    /// MIN(x), and a retracted minimum leaves the next one in the set.
    pub distinct: bool,
    /// The function of [`AggFunction::User`].
    pub user: Option<UserAggregate>,
}

/// A user-defined aggregate function in an [`Agg`], the same as another
/// of the same name.
#[derive(Clone)]
pub struct UserAggregate(pub std::sync::Arc<crate::udf::AggregateFunction>);

impl std::fmt::Debug for UserAggregate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UserAggregate({})", self.0.name)
    }
}

impl PartialEq for UserAggregate {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for UserAggregate {}

impl Agg {
    /// `COUNT(*)` named `name`.
    pub fn count(name: &str) -> Self {
        Self {
            function: AggFunction::Count,
            column: None,
            name: name.into(),
            distinct: false,
            user: None,
        }
    }

    /// `function(column)` named `name` (`column` None: `COUNT(*)`).
    pub fn of(function: AggFunction, column: Option<usize>, name: &str) -> Self {
        Self {
            function,
            column,
            name: name.into(),
            distinct: false,
            user: None,
        }
    }

    /// The user-defined aggregate `f` of `column`, named `name`.
    pub fn user_defined(
        f: crate::udf::AggregateFunction,
        column: Option<usize>,
        name: &str,
    ) -> Self {
        Self {
            user: Some(UserAggregate(std::sync::Arc::new(f))),
            ..Self::of(AggFunction::User, column, name)
        }
    }

    /// The function of a user-defined aggregate ([`AggFunction::User`]).
    fn user_function(&self) -> std::result::Result<&crate::udf::AggregateFunction, String> {
        self.user.as_ref().map(|u| u.0.as_ref()).ok_or_else(|| {
            format!(
                "{}: a user-defined aggregate without its function",
                self.name
            )
        })
    }

    /// The output column's type given the input schema.
    pub fn data_type(&self, input: &Schema) -> DataType {
        if let Some(u) = &self.user {
            return u.0.returns.clone();
        }
        match (self.function, self.column) {
            (AggFunction::Count, _) => DataType::BigInt,
            (AggFunction::Avg, _) => DataType::Double,
            (f, _) if f.spread() => DataType::Double,
            (AggFunction::BoolAnd | AggFunction::BoolOr, _) => DataType::Boolean,
            (AggFunction::ArrayAgg, Some(c)) => DataType::List(Box::new(
                input
                    .fields
                    .get(c)
                    .map_or(DataType::String, |f| f.data_type.clone()),
            )),
            (_, Some(c)) => match input.fields.get(c).map(|f| &f.data_type) {
                Some(DataType::Int) | None => DataType::BigInt,
                Some(t) => t.clone(),
            },
            (_, None) => DataType::BigInt,
        }
    }
}

/// The output schema of an aggregate: key columns, then (for windows)
/// `window_start, window_end`, then one column per aggregate.
pub fn output_schema(input: &Schema, key: &[usize], window: bool, aggs: &[Agg]) -> Schema {
    let mut fields: Vec<Field> = key.iter().map(|c| input.fields[*c].clone()).collect();
    if window {
        fields.push(Field::new("window_start", DataType::Timestamp));
        fields.push(Field::new("window_end", DataType::Timestamp));
    }
    fields.extend(
        aggs.iter()
            .map(|a| Field::new(a.name.clone(), a.data_type(input))),
    );
    Schema::new(fields)
}

/// What one aggregate keeps: the non-null values counted, and their sum,
/// minimum or maximum.
#[derive(Debug, Clone, PartialEq)]
struct Part {
    n: i64,
    value: Value,
    /// A distinct aggregate's values (their `codec` encoding) and how many
    /// rows hold each; `n` is how many there are. Stored as `value` (BYTES)
    /// and decoded on first use.
    set: Option<Box<DistinctSet>>,
}

/// A distinct aggregate's values in SQL order, each with how many rows
/// hold it: MIN and MAX are its first and last (Flink's `MinWithRetract`
/// keeps a sorted map for the same reason), not a pass over every value.
type DistinctSet = std::collections::BTreeMap<SetValue, i64>;

/// A value ordered as SQL orders its column's values (one type per
/// column; values of different types order by type, so that the order is
/// total whatever comes).
#[derive(Debug, Clone)]
struct SetValue(Value);

impl SetValue {
    fn order(a: &Value, b: &Value) -> std::cmp::Ordering {
        let rank = |v: &Value| match v {
            Value::Null => 0,
            Value::Bool(_) => 1,
            Value::Int(_) | Value::Double(_) | Value::Decimal(_) => 2,
            Value::Timestamp(_) => 3,
            Value::String(_) => 4,
            Value::Bytes(_) => 5,
            Value::List(_) => 6,
            Value::Struct(_) => 7,
        };
        match (a, b) {
            (Value::List(x), Value::List(y)) | (Value::Struct(x), Value::Struct(y)) => x
                .iter()
                .zip(y)
                .map(|(x, y)| Self::order(x, y))
                .find(|o| o.is_ne())
                .unwrap_or_else(|| x.len().cmp(&y.len())),
            (Value::Null, Value::Null) => std::cmp::Ordering::Equal,
            _ if rank(a) == rank(b) && rank(a) > 0 => crate::dataflow::compare::compare(a, b),
            _ => rank(a).cmp(&rank(b)),
        }
    }
}

impl PartialEq for SetValue {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for SetValue {}

impl PartialOrd for SetValue {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SetValue {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        Self::order(&self.0, &other.0)
    }
}

/// A distinct set as bytes: `(len, value bytes, zigzag count)` per value,
/// each value as `codec::encode_value`.
fn encode_set(set: &DistinctSet) -> Vec<u8> {
    let mut out = Vec::new();
    let mut v = Vec::new();
    for (value, n) in set {
        v.clear();
        encode_value(&value.0, &mut v);
        put_varint(v.len() as u64, &mut out);
        out.extend_from_slice(&v);
        put_varint(zigzag(*n), &mut out);
    }
    out
}

fn decode_set(mut bytes: &[u8]) -> std::result::Result<DistinctSet, String> {
    let mut set = DistinctSet::new();
    while !bytes.is_empty() {
        let len = get_varint(&mut bytes)? as usize;
        if len > bytes.len() {
            return Err(format!(
                "a distinct value of {len} bytes in {}",
                bytes.len()
            ));
        }
        let (mut v, rest) = bytes.split_at(len);
        bytes = rest;
        let n = unzigzag(get_varint(&mut bytes)?);
        *set.entry(SetValue(decode_value(&mut v)?)).or_insert(0) += n;
    }
    Ok(set)
}

impl Part {
    /// The distinct set, decoded from `value` the first time.
    fn set(&mut self) -> std::result::Result<&mut DistinctSet, String> {
        if self.set.is_none() {
            let set = match std::mem::replace(&mut self.value, Value::Null) {
                Value::Bytes(b) => decode_set(&b)?,
                _ => DistinctSet::new(),
            };
            self.set = Some(Box::new(set));
        }
        Ok(self.set.as_mut().expect("set"))
    }
}

/// Everything kept per key (or per key and window): the rows counted, and
/// one part per aggregate. Stored as a list of values.
///
/// One part is held inline (a count's, a sum's): a hot key's accumulators
/// then sit in the hot map's slot, and its update reads no second
/// allocation (a cache miss per record at 100,000 keys, by `perf`).
#[derive(Debug, Clone, PartialEq)]
pub struct Accumulators {
    rows: i64,
    parts: Parts,
}

type Parts = smallvec::SmallVec<[Part; 1]>;

/// Zigzag: small negative counts (retractions) stay short as varints.
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

impl StateCodec for Accumulators {
    const NAME: &'static str = "accumulators";

    /// `parts | rows | (n, value) per part`: counts as zigzag varints, each
    /// value as `codec::encode_value` (a count's is one byte, NULL). A hot
    /// key's update encodes a few bytes and allocates nothing.
    fn encode(&self, out: &mut Vec<u8>) {
        out.reserve(2 + 10 * (1 + 2 * self.parts.len()));
        put_varint(self.parts.len() as u64, out);
        put_varint(zigzag(self.rows), out);
        for p in &self.parts {
            put_varint(zigzag(p.n), out);
            match &p.set {
                Some(set) => encode_value(&Value::Bytes(encode_set(set)), out),
                None => encode_value(&p.value, out),
            }
        }
    }

    fn decode(bytes: &[u8]) -> std::result::Result<Self, String> {
        let mut acc = Self {
            rows: 0,
            parts: Parts::new(),
        };
        acc.decode_into(bytes)?;
        Ok(acc)
    }

    /// Reuses the parts already there.
    fn decode_into(&mut self, bytes: &[u8]) -> std::result::Result<(), String> {
        let mut input = bytes;
        let parts = get_varint(&mut input)? as usize;
        if parts > input.len() {
            return Err(format!("{parts} parts in {} bytes", bytes.len()));
        }
        self.rows = unzigzag(get_varint(&mut input)?);
        self.parts.truncate(parts);
        for i in 0..parts {
            let n = unzigzag(get_varint(&mut input)?);
            // A count's part holds no value: one NULL byte.
            let value = match input.split_first() {
                Some((0, rest)) => {
                    input = rest;
                    Value::Null
                }
                _ => decode_value(&mut input)?,
            };
            match self.parts.get_mut(i) {
                Some(p) => {
                    p.n = n;
                    p.value = value;
                    p.set = None;
                }
                None => self.parts.push(Part {
                    n,
                    value,
                    set: None,
                }),
            }
        }
        if !input.is_empty() {
            return Err(format!("{} bytes left after the value", input.len()));
        }
        Ok(())
    }
}

fn add_values(a: &Value, b: &Value, negate: bool) -> std::result::Result<Value, String> {
    use Value::*;
    Ok(match (a, b) {
        (Null, x) if !negate => x.clone(),
        (Null, Int(i)) => Int(i.checked_neg().ok_or("integer overflow in SUM")?),
        (Null, Double(d)) => Double(-d),
        (Null, Decimal(d)) => Decimal(crate::dataflow::row::Decimal {
            unscaled: -d.unscaled,
            scale: d.scale,
        }),
        (Int(x), Int(y)) => Int(if negate {
            x.checked_sub(*y)
        } else {
            x.checked_add(*y)
        }
        .ok_or("integer overflow in SUM")?),
        (Decimal(x), Decimal(y)) if x.scale == y.scale => Decimal(crate::dataflow::row::Decimal {
            unscaled: if negate {
                x.unscaled.checked_sub(y.unscaled)
            } else {
                x.unscaled.checked_add(y.unscaled)
            }
            .ok_or("decimal overflow in SUM")?,
            scale: x.scale,
        }),
        (x, y) => {
            let (x, y) = (
                x.as_f64().ok_or("SUM of a value that is not a number")?,
                y.as_f64().ok_or("SUM of a value that is not a number")?,
            );
            Double(if negate { x - y } else { x + y })
        }
    })
}

fn compare(a: &Value, b: &Value) -> std::cmp::Ordering {
    use Value::*;
    match (a, b) {
        (Int(x), Int(y)) => x.cmp(y),
        (String(x), String(y)) => x.cmp(y),
        (Timestamp(x), Timestamp(y)) => x.cmp(y),
        (Bool(x), Bool(y)) => x.cmp(y),
        _ => a
            .as_f64()
            .unwrap_or(f64::NAN)
            .total_cmp(&b.as_f64().unwrap_or(f64::NAN)),
    }
}

impl Accumulators {
    /// Input rows counted (insertions less retractions).
    pub fn rows(&self) -> i64 {
        self.rows
    }

    /// Per aggregate: the non-null values counted, and their sum, minimum
    /// or maximum so far.
    pub fn parts(&self) -> impl Iterator<Item = (i64, &Value)> {
        self.parts.iter().map(|p| (p.n, &p.value))
    }

    pub(crate) fn new(aggs: &[Agg]) -> Self {
        let mut acc = Self {
            rows: 0,
            parts: Parts::with_capacity(aggs.len()),
        };
        acc.reset(aggs);
        acc
    }

    /// Back to nothing counted, keeping the buffer.
    pub(crate) fn reset(&mut self, aggs: &[Agg]) {
        self.rows = 0;
        self.parts.clear();
        self.parts.extend(aggs.iter().map(|_| Part {
            n: 0,
            value: Value::Null,
            set: None,
        }));
    }

    /// Adds (or with `retract`, takes away) one input row.
    pub(crate) fn apply(
        &mut self,
        aggs: &[Agg],
        row: &Row,
        retract: bool,
    ) -> std::result::Result<(), String> {
        self.apply_values(aggs, &row.values, retract)
    }

    /// [`Accumulators::apply`] for a row's values, held elsewhere than in
    /// a [`Row`] (OVER frames hold their rows as values).
    pub(crate) fn apply_values(
        &mut self,
        aggs: &[Agg],
        row: &[Value],
        retract: bool,
    ) -> std::result::Result<(), String> {
        self.rows += if retract { -1 } else { 1 };
        for (a, p) in aggs.iter().zip(self.parts.iter_mut()) {
            let v = match a.column {
                None => &Value::Null,
                Some(c) => row.get(c).unwrap_or(&Value::Null),
            };
            if a.column.is_some() && v.is_null() && a.function != AggFunction::ArrayAgg {
                continue; // SQL aggregates skip NULLs (ARRAY_AGG keeps them)
            }
            if a.distinct {
                // `n` is the number of distinct values; `results` reads
                // the rest from the set.
                let set = p.set()?;
                let key = SetValue(v.clone());
                let m = set.entry(key).or_insert(0);
                let before = *m;
                *m += if retract { -1 } else { 1 };
                let after = *m;
                if after == 0 {
                    set.remove(&SetValue(v.clone()));
                }
                p.n += i64::from(after > 0) - i64::from(before > 0);
                continue;
            }
            p.n += if retract { -1 } else { 1 };
            match a.function {
                AggFunction::Count => {}
                AggFunction::Sum | AggFunction::Avg => p.value = add_values(&p.value, v, retract)?,
                AggFunction::Min | AggFunction::Max if retract => {
                    return Err(format!(
                        "{}({}) over an updating input (a row was retracted) is not supported yet",
                        a.function.name().to_uppercase(),
                        a.name
                    ))
                }
                AggFunction::Min | AggFunction::Max => {
                    let keep_new = p.value.is_null()
                        || match a.function {
                            AggFunction::Min => compare(v, &p.value).is_lt(),
                            _ => compare(v, &p.value).is_gt(),
                        };
                    if keep_new {
                        p.value = v.clone();
                    }
                }
                f if f.spread() => p.value = spread_add(&p.value, v, retract)?,
                AggFunction::BoolAnd | AggFunction::BoolOr => {
                    let trues = p.value.as_int().unwrap_or(0);
                    let step = i64::from(*v == Value::Bool(true));
                    p.value = Value::Int(if retract { trues - step } else { trues + step });
                }
                AggFunction::FirstValue | AggFunction::LastValue if retract => {
                    return Err(format!(
                        "{}({}) over an updating input (a row was retracted) is not supported yet",
                        a.function.name().to_uppercase(),
                        a.name
                    ))
                }
                AggFunction::FirstValue => {
                    if p.n == 1 {
                        p.value = v.clone();
                    }
                }
                AggFunction::LastValue => p.value = v.clone(),
                AggFunction::User => {
                    let f = a.user_function()?;
                    let acc = std::mem::replace(&mut p.value, Value::Null);
                    p.value = f.step(acc, std::slice::from_ref(v), retract)?;
                }
                AggFunction::ArrayAgg => {
                    let mut items = match std::mem::replace(&mut p.value, Value::Null) {
                        Value::List(items) => items,
                        _ => Vec::new(),
                    };
                    if retract {
                        if let Some(i) = items.iter().position(|x| same_value(x, v)) {
                            items.remove(i);
                        }
                    } else {
                        items.push(v.clone());
                    }
                    p.value = Value::List(items);
                }
                _ => unreachable!("every aggregate function is matched"),
            }
        }
        Ok(())
    }

    /// Adds everything `other` counted (session windows that merge).
    pub(crate) fn merge(
        &mut self,
        aggs: &[Agg],
        other: &Accumulators,
    ) -> std::result::Result<(), String> {
        self.rows += other.rows;
        for ((a, p), o) in aggs.iter().zip(self.parts.iter_mut()).zip(&other.parts) {
            if a.distinct {
                let mut o = o.clone();
                let theirs = std::mem::take(o.set()?);
                let set = p.set()?;
                for (v, m) in theirs {
                    *set.entry(v).or_insert(0) += m;
                }
                set.retain(|_, m| *m != 0);
                p.n = set.len() as i64;
                continue;
            }
            if o.n == 0 {
                continue;
            }
            p.value = if p.n == 0 {
                o.value.clone()
            } else {
                match a.function {
                    AggFunction::Count => Value::Null,
                    AggFunction::Sum | AggFunction::Avg => add_values(&p.value, &o.value, false)?,
                    AggFunction::Min if compare(&o.value, &p.value).is_lt() => o.value.clone(),
                    AggFunction::Max if compare(&o.value, &p.value).is_gt() => o.value.clone(),
                    AggFunction::Min | AggFunction::Max => p.value.clone(),
                    f if f.spread() => spread_merge(&p.value, &o.value)?,
                    AggFunction::BoolAnd | AggFunction::BoolOr => {
                        Value::Int(p.value.as_int().unwrap_or(0) + o.value.as_int().unwrap_or(0))
                    }
                    AggFunction::FirstValue => p.value.clone(),
                    AggFunction::LastValue => o.value.clone(),
                    AggFunction::ArrayAgg => match (&p.value, &o.value) {
                        (Value::List(a), Value::List(b)) => {
                            Value::List(a.iter().chain(b).cloned().collect())
                        }
                        _ => o.value.clone(),
                    },
                    AggFunction::User => a
                        .user_function()?
                        .merge_accumulators(p.value.clone(), &o.value)?,
                    _ => unreachable!("every aggregate function is matched"),
                }
            };
            p.n += o.n;
        }
        Ok(())
    }

    pub(crate) fn results(&self, aggs: &[Agg], out: &mut Vec<Value>) {
        for (a, p) in aggs.iter().zip(&self.parts) {
            out.push(match a.function {
                AggFunction::Count if a.column.is_none() => Value::Int(self.rows),
                AggFunction::Count => Value::Int(p.n),
                _ if p.n == 0 => Value::Null,
                _ if a.distinct => distinct_result(a.function, p),
                AggFunction::Avg => {
                    Value::Double(p.value.as_f64().unwrap_or(f64::NAN) / p.n as f64)
                }
                f if f.spread() => spread_result(f, &p.value, p.n),
                AggFunction::BoolAnd => Value::Bool(p.value.as_int() == Some(p.n)),
                AggFunction::BoolOr => Value::Bool(p.value.as_int().unwrap_or(0) > 0),
                AggFunction::User => match a.user.as_ref().map(|u| u.0.value(&p.value)) {
                    Some(Ok(v)) => v,
                    // A result that fails is a bad value, as a failed
                    // expression's: NULL, counted and logged.
                    Some(Err(e)) => {
                        crate::sql::note_eval_error(&a.name, &e);
                        Value::Null
                    }
                    None => Value::Null,
                },
                _ => p.value.clone(),
            });
        }
    }
}

/// A variance's part: the sum and the sum of squares of its values. For
/// integers and decimals both are exact (DECIMAL, 128 bits), so that the
/// variance of values close together does not vanish in rounding (the
/// sum of squares minus the squared sum over n cancels most digits); for
/// DOUBLE values they are doubles.
fn spread_add(sums: &Value, v: &Value, retract: bool) -> std::result::Result<Value, String> {
    let overflow = || "overflow in a variance's sum of squares".to_string();
    let (x, square) = match v {
        Value::Int(i) => {
            let u = i128::from(*i);
            (
                Decimal {
                    unscaled: u,
                    scale: 0,
                },
                Value::Decimal(Decimal {
                    unscaled: u.checked_mul(u).ok_or_else(overflow)?,
                    scale: 0,
                }),
            )
        }
        Value::Decimal(d) => {
            let u = d.unscaled;
            (
                *d,
                Value::Decimal(Decimal {
                    unscaled: u.checked_mul(u).ok_or_else(overflow)?,
                    scale: d.scale.checked_mul(2).ok_or_else(overflow)?,
                }),
            )
        }
        other => {
            let x = other
                .as_f64()
                .ok_or("a variance of a value that is not a number")?;
            let (sum, squares) = match sums {
                Value::List(s) if s.len() == 2 => (s[0].clone(), s[1].clone()),
                _ => (Value::Null, Value::Null),
            };
            return Ok(Value::List(vec![
                add_values(&sum, &Value::Double(x), retract)?,
                add_values(&squares, &Value::Double(x * x), retract)?,
            ]));
        }
    };
    let (sum, squares) = match sums {
        Value::List(s) if s.len() == 2 => (s[0].clone(), s[1].clone()),
        _ => (Value::Null, Value::Null),
    };
    Ok(Value::List(vec![
        add_values(&sum, &Value::Decimal(x), retract)?,
        add_values(&squares, &square, retract)?,
    ]))
}

/// Two variance parts added (session windows that merge).
fn spread_merge(a: &Value, b: &Value) -> std::result::Result<Value, String> {
    match (a, b) {
        (Value::List(x), Value::List(y)) if x.len() == 2 && y.len() == 2 => Ok(Value::List(vec![
            add_values(&x[0], &y[0], false)?,
            add_values(&x[1], &y[1], false)?,
        ])),
        (Value::List(_), _) => Ok(a.clone()),
        _ => Ok(b.clone()),
    }
}

/// A variance or standard deviation of `n` values from their sums; NULL
/// for a sample of fewer than two.
fn spread_result(f: AggFunction, sums: &Value, n: i64) -> Value {
    let sample = matches!(f, AggFunction::VarSamp | AggFunction::StddevSamp);
    if (sample && n < 2) || n < 1 {
        return Value::Null;
    }
    let divisor = if sample { n - 1 } else { n };
    let variance = match sums {
        // Exactly: (n·Σx² − (Σx)²) / (n · divisor), in units of 10^-2s.
        Value::List(s) => match (&s[0], &s[1]) {
            (Value::Decimal(sum), Value::Decimal(squares)) => {
                let exact = i128::from(n).checked_mul(squares.unscaled).and_then(|a| {
                    sum.unscaled
                        .checked_mul(sum.unscaled)
                        .and_then(|b| a.checked_sub(b))
                });
                match exact {
                    Some(num) => {
                        let scale = 10f64.powi(i32::from(squares.scale));
                        num.max(0) as f64 / (n as f64 * divisor as f64) / scale
                    }
                    None => return Value::Null,
                }
            }
            (sum, squares) => {
                let (sum, squares) = (sum.as_f64().unwrap_or(0.0), squares.as_f64().unwrap_or(0.0));
                // Rounding can leave a tiny negative for equal values.
                (squares - sum * sum / n as f64).max(0.0) / divisor as f64
            }
        },
        _ => return Value::Null,
    };
    Value::Double(match f {
        AggFunction::StddevPop | AggFunction::StddevSamp => variance.sqrt(),
        _ => variance,
    })
}

/// Whether two values are the same value (NULL is NULL, as a list holds it).
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Null, _) | (_, Value::Null) => false,
        _ => compare(a, b).is_eq(),
    }
}

/// SUM, AVG, MIN or MAX over the distinct values of a part's set (its
/// decoded set, or the bytes it was stored as); NULL if the set does not
/// decode (it was written by this process, so it does).
fn distinct_result(function: AggFunction, p: &Part) -> Value {
    let stored;
    let set = match (&p.set, &p.value) {
        (Some(set), _) => &**set,
        (None, Value::Bytes(b)) => match decode_set(b) {
            Ok(set) => {
                stored = set;
                &stored
            }
            Err(_) => return Value::Null,
        },
        (None, _) => return Value::Null,
    };
    let mut values = set.keys().map(|k| k.0.clone());
    match function {
        AggFunction::Min => set.keys().next().map(|k| k.0.clone()),
        AggFunction::Max => set.keys().next_back().map(|k| k.0.clone()),
        AggFunction::Sum | AggFunction::Avg => {
            let sum = values.try_fold(Value::Null, |acc, v| add_values(&acc, &v, false));
            match (function, sum) {
                (AggFunction::Avg, Ok(sum)) => {
                    sum.as_f64().map(|s| Value::Double(s / set.len() as f64))
                }
                (_, sum) => sum.ok(),
            }
        }
        AggFunction::Count => Some(Value::Int(set.len() as i64)),
        AggFunction::ArrayAgg => Some(Value::List(values.collect())),
        f if f.spread() => {
            let mut sums = Value::Null;
            for v in values {
                match spread_add(&sums, &v, false) {
                    Ok(s) => sums = s,
                    Err(_) => return Value::Null,
                }
            }
            Some(spread_result(function, &sums, set.len() as i64))
        }
        AggFunction::BoolAnd => Some(Value::Bool(set.keys().all(|k| k.0 == Value::Bool(true)))),
        AggFunction::BoolOr => Some(Value::Bool(set.keys().any(|k| k.0 == Value::Bool(true)))),
        // FIRST_VALUE(DISTINCT x) is FIRST_VALUE(x); the binder plans it so.
        _ => None,
    }
    .unwrap_or(Value::Null)
}

/// When a group aggregate emits a key's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AggregateEmit {
    /// After every input row that changes the key's result (Flink SQL's
    /// group aggregate).
    #[default]
    OnChange,
    /// After every input row, changed or not: one output per input, as
    /// weir's TOML pipelines have always written (`emit = "every-update"`).
    EveryRow,
    /// Once per checkpoint for each key changed since the last one, and
    /// early, in the same epoch, once `max_changed` keys have changed, so
    /// that what is held stays bounded (`emit = "on-checkpoint"`; Kafka
    /// Streams' record cache does the same per commit).
    OnCheckpoint { max_changed: usize },
}

/// A running aggregate per key: an updating result.
pub struct GroupAggregate {
    pub aggs: Vec<Agg>,
    /// The key columns of its input (its output starts with them).
    pub key: Vec<usize>,
    pub emit: AggregateEmit,
    /// The current key's accumulators, decoded in place, and its results
    /// before and after a row: buffers reused from record to record.
    acc: Accumulators,
    was: Vec<Value>,
    now: Vec<Value>,
    /// On checkpoint: the keys changed since the last emission (key group,
    /// big endian, then the key's encoding), each with the result it had
    /// before its first change (None: the key is new).
    changed: rustc_hash::FxHashMap<Vec<u8>, Option<Vec<Value>>>,
    scratch: Vec<u8>,
    /// The accumulators of the keys updated lately, held decoded, so that
    /// a hot key's update decodes and encodes nothing (the state store
    /// holds values as bytes of their codec). By the key's encoding, looked
    /// up as a slice (a hit builds no key); the key group, which follows
    /// from the key, is kept beside the accumulators. None: deleted. What
    /// is `dirty` is written into the store before every snapshot
    /// (`before_snapshot`, which every snapshot follows in both modes) and
    /// before the map is cleared at the store's cache size
    /// (`state.cache_entries`: a smaller map thrashes on a working set the
    /// cache holds, and costs more than it saves); a live query reads the
    /// map first. A restore starts with a new operator, so the map never
    /// outlives its store's state.
    hot: HotMap,
    /// Keys whose last write is older than this go ([`StateTtl`]).
    ttl: Option<StateTtl>,
}

/// The hot map: by the key's encoding (inline up to 24 bytes, a word's).
/// hashbrown's, for its raw entries (a lookup by a borrowed key).
type HotMap = hashbrown::HashMap<RecordKey, Hot, rustc_hash::FxBuildHasher>;

#[derive(Debug)]
struct Hot {
    key_group: u32,
    acc: Option<Accumulators>,
    /// Changed since it was last written into the store.
    dirty: bool,
}

impl GroupAggregate {
    pub const ACC: Table = Table(0);

    pub fn new(aggs: Vec<Agg>, key: Vec<usize>) -> Self {
        Self::with_emit(aggs, key, AggregateEmit::default())
    }

    pub fn with_emit(aggs: Vec<Agg>, key: Vec<usize>, emit: AggregateEmit) -> Self {
        Self {
            acc: Accumulators::new(&aggs),
            aggs,
            key,
            emit,
            was: Vec::new(),
            now: Vec::new(),
            changed: rustc_hash::FxHashMap::default(),
            scratch: Vec::new(),
            hot: HotMap::default(),
            ttl: None,
        }
    }

    /// Keys whose state was last written more than `ttl` before the
    /// watermark go (its table is [`StateTtl::table`], after `acc`).
    pub fn with_state_ttl(mut self, ttl: Option<StateTtl>) -> Self {
        self.ttl = ttl;
        self
    }

    /// Each key's last write time, with a TTL.
    pub const TTL: Table = Table(1);

    /// Writes every dirty accumulator of the hot map into the store (and
    /// with `clear`, empties the map). The context's current key is set
    /// to each in turn: the caller sets its own again if it needs it.
    fn flush_hot(&mut self, ctx: &mut Context, clear: bool) -> Result<()> {
        for (k, h) in self.hot.iter_mut().filter(|(_, h)| h.dirty) {
            ctx.set_key(h.key_group, k);
            match &h.acc {
                Some(acc) => ctx.put(Self::ACC, acc)?,
                None => ctx.delete(Self::ACC)?,
            }
            h.dirty = false;
        }
        if clear {
            self.hot.clear();
        }
        Ok(())
    }

    /// On checkpoint: notes that the current key changed, with its result
    /// before this row if this is its first change since the last emission.
    fn note_changed(
        &mut self,
        ctx: &mut Context,
        existed: bool,
        out: &mut Collector,
    ) -> Result<()> {
        let AggregateEmit::OnCheckpoint { max_changed } = self.emit else {
            return Ok(());
        };
        self.scratch.clear();
        self.scratch
            .extend_from_slice(&(ctx.key_group() as u16).to_be_bytes());
        self.scratch.extend_from_slice(ctx.key());
        if !self.changed.contains_key(self.scratch.as_slice()) {
            let was = existed.then(|| self.was.clone());
            self.changed.insert(self.scratch.clone(), was);
            if self.changed.len() >= max_changed.max(1) {
                // Emitted now, in this epoch: what the barrier would have
                // emitted, only earlier.
                self.emit_changed(ctx, out)?;
            }
        }
        Ok(())
    }

    /// Emits the current result of every key changed since the last
    /// emission, in key order, against the result it had before.
    fn emit_changed(&mut self, ctx: &mut Context, out: &mut Collector) -> Result<()> {
        // The current results are read from the store.
        self.flush_hot(ctx, false)?;
        let mut changed: Vec<(Vec<u8>, Option<Vec<Value>>)> = self.changed.drain().collect();
        changed.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let ts = crate::time::NO_TIMESTAMP;
        for (k, was) in changed {
            let kg = u32::from(u16::from_be_bytes([k[0], k[1]]));
            ctx.set_key(kg, &k[2..]);
            let key = ctx.key_values()?;
            let row = |results: &[Value], kind| {
                let mut values = key.clone();
                values.extend_from_slice(results);
                Row::new(kind, values)
            };
            let exists = ctx.get_into(Self::ACC, &mut self.acc)?;
            self.now.clear();
            if exists {
                self.acc.results(&self.aggs, &mut self.now);
            }
            match (was, exists) {
                (None, true) => out.emit(row(&self.now, RowKind::Insert), ts),
                (Some(was), true) => {
                    if ctx.update_before_needed() {
                        out.emit(row(&was, RowKind::UpdateBefore), ts);
                    }
                    out.emit(row(&self.now, RowKind::UpdateAfter), ts);
                }
                (Some(was), false) => out.emit(row(&was, RowKind::Delete), ts),
                (None, false) => {}
            }
        }
        Ok(())
    }

    pub fn tables() -> Vec<TableSpec> {
        vec![TableSpec::value::<Accumulators>("acc")]
    }

    /// The key columns of `input` followed by `results`.
    fn row(&self, input: &Row, results: &[Value], kind: RowKind) -> Row {
        let mut values = Vec::with_capacity(self.key.len() + results.len());
        values.extend(self.key.iter().map(|c| input.get(*c).clone()));
        values.extend_from_slice(results);
        Row::new(kind, values)
    }

    /// As [`Self::row`] with the current results, moving the key columns
    /// out of `input` (whose buffer it reuses when the key leads the row).
    fn row_from(&self, input: Row, kind: RowKind) -> Row {
        let mut values = key_columns(&self.key, input, self.now.len());
        values.extend_from_slice(&self.now);
        Row::new(kind, values)
    }
}

/// The key columns of `input`, moved out of it: its own buffer, truncated,
/// when the key leads the row (a word count's), else a new one with room
/// for `results` more values.
fn key_columns(key: &[usize], input: Row, results: usize) -> Vec<Value> {
    let mut values = input.values;
    if key.iter().enumerate().all(|(i, c)| i == *c) {
        values.truncate(key.len());
        values
    } else {
        let mut taken = Vec::with_capacity(key.len() + results);
        taken.extend(
            key.iter()
                .map(|c| std::mem::replace(&mut values[*c], Value::Null)),
        );
        taken
    }
}

/// The output row of `input`'s key with `acc`'s results, written into it
/// directly (no copy of the results through a buffer).
fn output_row(key: &[usize], input: Row, acc: &Accumulators, aggs: &[Agg], kind: RowKind) -> Row {
    let mut values = key_columns(key, input, aggs.len());
    acc.results(aggs, &mut values);
    Row::new(kind, values)
}

impl Operator for GroupAggregate {
    fn on_record(
        &mut self,
        _: usize,
        r: Record,
        ctx: &mut Context,
        out: &mut Collector,
    ) -> Result<()> {
        if self.hot.len() >= ctx.cache_limit() {
            let (kg, key) = (ctx.key_group(), ctx.key().to_vec());
            self.flush_hot(ctx, true)?;
            ctx.set_key(kg, &key);
        }
        if let Some(ttl) = self.ttl {
            ttl.touch(ctx, Self::TTL, r.timestamp)?;
        }
        let retract = !r.row.kind.is_addition();
        // The results before this row are needed to retract them, to see
        // whether they changed, to remember them for the checkpoint, or
        // for a delete (only a retraction can delete); not for a row that
        // is emitted whatever it changed into a sink without retractions.
        let need_was =
            retract || self.emit != AggregateEmit::EveryRow || ctx.update_before_needed();
        let Self {
            aggs,
            was,
            now,
            hot,
            ..
        } = self;
        // A raw entry borrows the key only to find it: a miss reads the
        // store through `ctx` and builds the map's key; a hit builds none.
        let hot = match hot.raw_entry_mut().from_key(ctx.key()) {
            hashbrown::hash_map::RawEntryMut::Occupied(o) => o.into_mut(),
            hashbrown::hash_map::RawEntryMut::Vacant(v) => {
                let mut acc = Accumulators::new(aggs);
                let existed = ctx.get_into(Self::ACC, &mut acc)?;
                let hot = Hot {
                    key_group: ctx.key_group(),
                    acc: existed.then_some(acc),
                    dirty: false,
                };
                v.insert(RecordKey::from_slice(ctx.key()), hot).1
            }
        };
        was.clear();
        let existed = match &hot.acc {
            Some(acc) => {
                if need_was {
                    acc.results(aggs, was);
                }
                true
            }
            // Flink does the same: a retraction of what is not there
            // (state expired, or never added) changes nothing.
            None if retract => return Ok(()),
            None => false,
        };
        let acc = hot.acc.get_or_insert_with(|| Accumulators::new(aggs));
        acc.apply(aggs, &r.row, retract)
            .map_err(|e| ctx.failure(e))?;
        hot.dirty = true;
        let ts = r.timestamp;
        if acc.rows <= 0 {
            hot.acc = None;
            if let Some(ttl) = self.ttl {
                ttl.forget(ctx, Self::TTL)?;
            }
            if let AggregateEmit::OnCheckpoint { .. } = self.emit {
                return self.note_changed(ctx, existed, out);
            }
            if existed {
                out.emit(self.row(&r.row, &self.was, RowKind::Delete), ts);
            }
            return Ok(());
        }
        match self.emit {
            AggregateEmit::OnCheckpoint { .. } => self.note_changed(ctx, existed, out),
            // The common path: the results go straight into the output row
            // (the input's buffer), with nothing to compare them against.
            AggregateEmit::EveryRow if !need_was => {
                let kind = if existed {
                    RowKind::UpdateAfter
                } else {
                    RowKind::Insert
                };
                out.emit(output_row(&self.key, r.row, acc, aggs, kind), ts);
                Ok(())
            }
            _ => {
                now.clear();
                acc.results(aggs, now);
                if !existed {
                    out.emit(self.row_from(r.row, RowKind::Insert), ts);
                    return Ok(());
                }
                if self.emit == AggregateEmit::OnChange && self.was == self.now {
                    return Ok(());
                }
                // Consumers that replace a key's row (upsert sinks) have no
                // use for the old one.
                if ctx.update_before_needed() {
                    out.emit(self.row(&r.row, &self.was, RowKind::UpdateBefore), ts);
                }
                out.emit(self.row_from(r.row, RowKind::UpdateAfter), ts);
                Ok(())
            }
        }
    }

    /// A key that went quiet for the TTL: its accumulators go, in the hot
    /// map and in the store. On checkpoint, what waits to be emitted is
    /// emitted first (early, in this epoch), so that the key's last change
    /// is not lost with it.
    fn on_timer(
        &mut self,
        time: i64,
        tag: &[u8],
        ctx: &mut Context,
        out: &mut Collector,
    ) -> Result<()> {
        if !StateTtl::fired(self.ttl, ctx, Self::TTL, tag, time)? {
            return Ok(());
        }
        if !self.changed.is_empty() {
            let (kg, key) = (ctx.key_group(), ctx.key().to_vec());
            self.emit_changed(ctx, out)?;
            ctx.set_key(kg, &key);
        }
        self.hot.remove(ctx.key());
        ctx.delete(Self::ACC)
    }

    fn before_snapshot(&mut self, ctx: &mut Context, out: &mut Collector) -> Result<()> {
        if self.changed.is_empty() {
            // Every snapshot follows this: it sees what the map holds.
            return self.flush_hot(ctx, false);
        }
        self.emit_changed(ctx, out)
    }

    /// The key's current results by aggregate name (`{"count": 3}`).
    fn query(&mut self, ctx: &mut Context) -> Result<Queried> {
        self.now.clear();
        match self.hot.get(ctx.key()) {
            Some(Hot { acc: None, .. }) => return Ok(Queried::Value(None)),
            Some(Hot { acc: Some(acc), .. }) => acc.results(&self.aggs, &mut self.now),
            None => {
                if !ctx.get_into(Self::ACC, &mut self.acc)? {
                    return Ok(Queried::Value(None));
                }
                self.acc.results(&self.aggs, &mut self.now);
            }
        }
        Ok(Queried::Value(Some(serde_json::Value::Object(
            self.aggs
                .iter()
                .zip(&self.now)
                .map(|(a, v)| (a.name.clone(), crate::dataflow::json::value_json(v)))
                .collect(),
        ))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::operator::testing::Harness;

    fn row(kind: RowKind, k: &str, v: i64) -> Row {
        Row::new(kind, vec![Value::from(k), Value::Int(v)])
    }

    #[test]
    fn a_key_quiet_for_the_ttl_goes_and_its_next_row_counts_from_nothing() {
        let ttl = StateTtl {
            ttl: 1_000,
            sweep_every: 100,
        };
        let mut tables = GroupAggregate::tables();
        tables.push(StateTtl::table());
        let op = GroupAggregate::new(vec![Agg::count("n")], vec![0]).with_state_ttl(Some(ttl));
        let mut h = Harness::keyed(op, tables, vec![0]);
        h.record(0, row(RowKind::Insert, "a", 1), 0).unwrap();
        h.record(0, row(RowKind::Insert, "b", 1), 500).unwrap();
        h.record(0, row(RowKind::Insert, "a", 1), 900).unwrap();
        // c's only row is taken back: its state went by itself.
        h.record(0, row(RowKind::Insert, "c", 1), 100).unwrap();
        h.record(0, row(RowKind::Delete, "c", 1), 200).unwrap();
        // a was last written at 900: due at 2000; b at 500: due at 1600.
        assert!(h.watermark(1_700).unwrap().is_empty(), "nothing is emitted");
        assert_eq!(h.ctx.take_expired(), 1, "b went (c is not counted)");
        let out = h.record(0, row(RowKind::Insert, "b", 1), 1_800).unwrap();
        assert_eq!(
            out,
            vec![(Row::insert(vec![Value::from("b"), Value::Int(1)]), 1_800)]
        );
        let out = h.record(0, row(RowKind::Insert, "a", 1), 1_800).unwrap();
        assert_eq!(
            out.last().unwrap().0,
            Row::new(RowKind::UpdateAfter, vec![Value::from("a"), Value::Int(3)]),
            "a is still held"
        );
        h.watermark(2_900).unwrap();
        assert_eq!(
            h.ctx.take_expired(),
            2,
            "a and b went; the hot map with them"
        );
        let out = h.record(0, row(RowKind::Insert, "a", 1), 3_000).unwrap();
        assert_eq!(
            out,
            vec![(Row::insert(vec![Value::from("a"), Value::Int(1)]), 3_000)]
        );
    }

    #[test]
    fn accumulators_round_trip_reuse_their_parts_and_refuse_garbage() {
        let acc = Accumulators {
            rows: -3,
            parts: smallvec::smallvec![
                Part {
                    n: 2,
                    value: Value::Null,
                    set: None,
                },
                Part {
                    n: -1,
                    value: Value::Double(2.5),
                    set: None,
                },
                Part {
                    n: 7,
                    value: Value::from("x"),
                    set: None,
                },
            ],
        };
        let mut buf = Vec::new();
        acc.encode(&mut buf);
        assert_eq!(Accumulators::decode(&buf), Ok(acc.clone()));
        let mut into = Accumulators::new(&[Agg::count("n")]);
        into.decode_into(&buf).unwrap();
        assert_eq!(into, acc);
        for n in 0..buf.len() {
            assert!(
                Accumulators::decode(&buf[..n]).is_err(),
                "{n} bytes decoded"
            );
        }
        buf.push(0);
        assert!(Accumulators::decode(&buf).is_err(), "a trailing byte");
    }

    #[test]
    fn group_aggregate_emits_updates_and_retracts() {
        let aggs = vec![
            Agg::count("n"),
            Agg {
                function: AggFunction::Sum,
                column: Some(1),
                name: "s".into(),
                distinct: false,
                user: None,
            },
        ];
        let mut h = Harness::keyed(
            GroupAggregate::new(aggs, vec![0]),
            GroupAggregate::tables(),
            vec![0],
        );
        let got = h.record(0, row(RowKind::Insert, "a", 5), 1).unwrap();
        assert_eq!(
            got,
            vec![(Row::insert(vec!["a".into(), 1.into(), 5.into()]), 1)]
        );
        let got = h.record(0, row(RowKind::Insert, "a", 2), 2).unwrap();
        assert_eq!(
            got.into_iter().map(|(r, _)| r).collect::<Vec<_>>(),
            vec![
                Row::new(RowKind::UpdateBefore, vec!["a".into(), 1.into(), 5.into()]),
                Row::new(RowKind::UpdateAfter, vec!["a".into(), 2.into(), 7.into()]),
            ]
        );
        // Retract both: an update, then the delete of the key's last row.
        h.record(0, row(RowKind::UpdateBefore, "a", 5), 3).unwrap();
        let got = h.record(0, row(RowKind::Delete, "a", 2), 4).unwrap();
        assert_eq!(
            got,
            vec![(
                Row::new(RowKind::Delete, vec!["a".into(), 1.into(), 2.into()]),
                4
            )]
        );
        // A retraction of a key that is not there changes nothing.
        assert!(h
            .record(0, row(RowKind::Delete, "b", 1), 5)
            .unwrap()
            .is_empty());
    }

    /// The store's value of `key` (a one-string-column key).
    fn stored(h: &mut Harness<GroupAggregate>, key: &str) -> Option<i64> {
        let mut k = Vec::new();
        crate::dataflow::codec::encode_key(&Row::insert(vec![key.into()]), &[0], &mut k);
        h.ctx
            .set_key(crate::state::key_groups::key_group(&k, 128), &k);
        h.ctx
            .get::<Accumulators>(GroupAggregate::ACC)
            .unwrap()
            .map(|a| a.rows())
    }

    #[test]
    fn hot_accumulators_reach_the_store_before_each_snapshot_and_past_the_limit() {
        let mut h = Harness::keyed(
            GroupAggregate::new(vec![Agg::count("n")], vec![0]),
            GroupAggregate::tables(),
            vec![0],
        );
        for _ in 0..3 {
            h.record(0, row(RowKind::Insert, "a", 1), 1).unwrap();
        }
        h.record(0, row(RowKind::Insert, "b", 1), 1).unwrap();
        // Held decoded: the store has not seen an update yet, a live
        // query has.
        assert_eq!(stored(&mut h, "a"), None);
        h.record(0, row(RowKind::Insert, "a", 1), 1).unwrap();
        assert_eq!(
            h.op.query(&mut h.ctx).unwrap(),
            Queried::Value(Some(serde_json::json!({"n": 4})))
        );
        assert!(h.before_snapshot().unwrap().is_empty());
        assert_eq!(stored(&mut h, "a"), Some(4));
        assert_eq!(stored(&mut h, "b"), Some(1));
        // A key retracted to nothing is deleted from the store too.
        h.record(0, row(RowKind::Delete, "b", 1), 2).unwrap();
        h.before_snapshot().unwrap();
        assert_eq!(stored(&mut h, "b"), None);
        // Past the store's cache size, the map goes to the store and starts
        // over; the counts go on from the store.
        for i in 0..h.ctx.cache_limit() + 10 {
            h.record(0, row(RowKind::Insert, &format!("k{i}"), 1), 3)
                .unwrap();
        }
        assert_eq!(stored(&mut h, "k0"), Some(1));
        assert_eq!(stored(&mut h, "a"), Some(4));
        let got = h.record(0, row(RowKind::Insert, "k0", 1), 4).unwrap();
        assert_eq!(
            got.last().map(|(r, _)| r.values.clone()),
            Some(vec!["k0".into(), 2.into()])
        );
        // A new operator over the same store (a restore) sees what was
        // written before the snapshot.
        h.before_snapshot().unwrap();
        h.op = GroupAggregate::new(vec![Agg::count("n")], vec![0]);
        let got = h.record(0, row(RowKind::Insert, "a", 1), 5).unwrap();
        assert_eq!(
            got.last().map(|(r, _)| r.values.clone()),
            Some(vec!["a".into(), 5.into()])
        );
    }

    #[test]
    fn on_checkpoint_emits_each_changed_key_once_against_its_last_emitted_result() {
        let mut h = Harness::keyed(
            GroupAggregate::with_emit(
                vec![Agg::count("n")],
                vec![0],
                AggregateEmit::OnCheckpoint { max_changed: 3 },
            ),
            GroupAggregate::tables(),
            vec![0],
        );
        let rows = |got: Vec<(Row, i64)>| got.into_iter().map(|(r, _)| r).collect::<Vec<_>>();
        for k in ["a", "b", "a"] {
            assert!(h
                .record(0, row(RowKind::Insert, k, 1), 1)
                .unwrap()
                .is_empty());
        }
        let mut got = rows(h.before_snapshot().unwrap());
        got.sort_by(|x, y| x.values[0].as_str().cmp(&y.values[0].as_str()));
        assert_eq!(
            got,
            vec![
                Row::insert(vec!["a".into(), 2.into()]),
                Row::insert(vec!["b".into(), 1.into()]),
            ]
        );
        assert!(
            h.before_snapshot().unwrap().is_empty(),
            "nothing changed since"
        );
        // Next epoch: `a` changes, `b` is retracted away.
        h.record(0, row(RowKind::Insert, "a", 1), 2).unwrap();
        h.record(0, row(RowKind::Delete, "b", 1), 2).unwrap();
        let mut got = rows(h.before_snapshot().unwrap());
        got.sort_by(|x, y| x.values[0].as_str().cmp(&y.values[0].as_str()));
        assert_eq!(
            got,
            vec![
                Row::new(RowKind::UpdateBefore, vec!["a".into(), 2.into()]),
                Row::new(RowKind::UpdateAfter, vec!["a".into(), 3.into()]),
                Row::new(RowKind::Delete, vec!["b".into(), 1.into()]),
            ]
        );
        // The third changed key emits everything held, in the same epoch.
        for k in ["x", "y"] {
            assert!(h
                .record(0, row(RowKind::Insert, k, 1), 3)
                .unwrap()
                .is_empty());
        }
        assert_eq!(
            rows(h.record(0, row(RowKind::Insert, "z", 1), 3).unwrap()).len(),
            3
        );
        assert!(h.before_snapshot().unwrap().is_empty());
    }

    #[test]
    fn every_row_emits_unchanged_results_too() {
        let aggs = vec![Agg {
            function: AggFunction::Max,
            column: Some(1),
            name: "m".into(),
            distinct: false,
            user: None,
        }];
        let mut on_change = Harness::keyed(
            GroupAggregate::new(aggs.clone(), vec![0]),
            GroupAggregate::tables(),
            vec![0],
        );
        let mut every = Harness::keyed(
            GroupAggregate::with_emit(aggs, vec![0], AggregateEmit::EveryRow),
            GroupAggregate::tables(),
            vec![0],
        );
        for v in [5, 3] {
            on_change
                .record(0, row(RowKind::Insert, "a", v), 1)
                .unwrap();
            every.record(0, row(RowKind::Insert, "a", v), 1).unwrap();
        }
        assert!(on_change
            .record(0, row(RowKind::Insert, "a", 1), 1)
            .unwrap()
            .is_empty());
        let got = every.record(0, row(RowKind::Insert, "a", 1), 1).unwrap();
        assert_eq!(
            got.last().unwrap().0.values,
            vec![Value::from("a"), 5.into()]
        );
    }

    #[test]
    fn without_a_consumer_of_update_befores_only_the_new_row_goes_out() {
        let mut h = Harness::keyed(
            GroupAggregate::new(vec![Agg::count("n")], vec![0]),
            GroupAggregate::tables(),
            vec![0],
        );
        h.ctx.set_update_before(false);
        h.record(0, row(RowKind::Insert, "a", 1), 1).unwrap();
        let got = h.record(0, row(RowKind::Insert, "a", 1), 2).unwrap();
        assert_eq!(
            got,
            vec![(
                Row::new(RowKind::UpdateAfter, vec!["a".into(), 2.into()]),
                2
            )]
        );
    }

    #[test]
    fn min_over_retractions_is_refused_by_name() {
        let aggs = vec![Agg {
            function: AggFunction::Min,
            column: Some(1),
            name: "lo".into(),
            distinct: false,
            user: None,
        }];
        let mut h = Harness::keyed(
            GroupAggregate::new(aggs, vec![0]),
            GroupAggregate::tables(),
            vec![0],
        );
        h.record(0, row(RowKind::Insert, "a", 5), 1).unwrap();
        let e = h
            .record(0, row(RowKind::Delete, "a", 5), 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("MIN(lo)") && e.contains("updating input"), "{e}");
    }
}

#[cfg(test)]
mod distinct_tests {
    use super::*;

    fn agg() -> Vec<Agg> {
        vec![Agg {
            function: AggFunction::Count,
            column: Some(0),
            name: "users".into(),
            distinct: true,
            user: None,
        }]
    }

    fn row(v: &str) -> Row {
        Row::insert(vec![Value::from(v)])
    }

    fn count(acc: &Accumulators, aggs: &[Agg]) -> Value {
        let mut out = Vec::new();
        acc.results(aggs, &mut out);
        out.remove(0)
    }

    #[test]
    fn count_distinct_counts_values_and_takes_back_retractions_exactly() {
        let aggs = agg();
        let mut acc = Accumulators::new(&aggs);
        for v in ["a", "a", "b"] {
            acc.apply(&aggs, &row(v), false).unwrap();
        }
        assert_eq!(count(&acc, &aggs), Value::Int(2));
        // One of the two a's goes: a is still there.
        acc.apply(&aggs, &row("a"), true).unwrap();
        assert_eq!(count(&acc, &aggs), Value::Int(2));
        // Through the codec (a checkpoint, or the cache's write-back).
        let mut bytes = Vec::new();
        acc.encode(&mut bytes);
        let mut back = Accumulators::decode(&bytes).unwrap();
        assert_eq!(count(&back, &aggs), Value::Int(2));
        back.apply(&aggs, &row("a"), true).unwrap();
        assert_eq!(count(&back, &aggs), Value::Int(1));
        // Sessions that merge: the union of the values.
        let mut other = Accumulators::new(&aggs);
        other.apply(&aggs, &row("c"), false).unwrap();
        other.apply(&aggs, &row("b"), false).unwrap();
        back.merge(&aggs, &other).unwrap();
        assert_eq!(count(&back, &aggs), Value::Int(2));
        // NULLs are not values.
        back.apply(&aggs, &Row::insert(vec![Value::Null]), false)
            .unwrap();
        assert_eq!(count(&back, &aggs), Value::Int(2));
    }
}

#[cfg(test)]
mod retracting_extreme_tests {
    use super::*;

    fn aggs() -> Vec<Agg> {
        [
            AggFunction::Min,
            AggFunction::Max,
            AggFunction::Sum,
            AggFunction::Avg,
        ]
        .into_iter()
        .map(|function| Agg {
            function,
            column: Some(0),
            name: function.name().into(),
            distinct: true,
            user: None,
        })
        .collect()
    }

    fn results(acc: &Accumulators, aggs: &[Agg]) -> Vec<Value> {
        let mut out = Vec::new();
        acc.results(aggs, &mut out);
        out
    }

    fn apply(acc: &mut Accumulators, aggs: &[Agg], v: i64, retract: bool) {
        acc.apply(aggs, &Row::insert(vec![Value::Int(v)]), retract)
            .unwrap();
    }

    /// MIN and MAX over a changelog keep every value with its count: when
    /// the extreme is taken back, the next one is the result; through the
    /// codec too (a checkpoint, the cache's write-back).
    #[test]
    fn a_retracted_extreme_leaves_the_next_one() {
        let aggs = aggs();
        let mut acc = Accumulators::new(&aggs);
        for v in [5, 3, 9, 3] {
            apply(&mut acc, &aggs, v, false);
        }
        let all = |min, max, sum, avg: f64| {
            vec![
                Value::Int(min),
                Value::Int(max),
                Value::Int(sum),
                Value::Double(avg),
            ]
        };
        assert_eq!(results(&acc, &aggs), all(3, 9, 17, 17.0 / 3.0));
        // One of the two 3s goes: 3 is still the minimum.
        apply(&mut acc, &aggs, 3, true);
        assert_eq!(results(&acc, &aggs), all(3, 9, 17, 17.0 / 3.0));
        let mut bytes = Vec::new();
        acc.encode(&mut bytes);
        let mut back = Accumulators::decode(&bytes).unwrap();
        assert_eq!(results(&back, &aggs), all(3, 9, 17, 17.0 / 3.0));
        apply(&mut back, &aggs, 3, true);
        apply(&mut back, &aggs, 9, true);
        assert_eq!(results(&back, &aggs), all(5, 5, 5, 5.0));
        apply(&mut back, &aggs, 5, true);
        assert_eq!(
            results(&back, &aggs),
            vec![Value::Null, Value::Null, Value::Null, Value::Null]
        );
    }

    fn agg_over(function: AggFunction) -> Vec<Agg> {
        vec![Agg {
            function,
            column: Some(0),
            name: "a".into(),
            distinct: false,
            user: None,
        }]
    }

    /// `values` added, `taken_back` retracted, then the result.
    fn result_of(function: AggFunction, values: &[Value], taken_back: &[Value]) -> Value {
        let aggs = agg_over(function);
        let mut acc = Accumulators::new(&aggs);
        for v in values {
            acc.apply_values(&aggs, std::slice::from_ref(v), false)
                .unwrap();
        }
        for v in taken_back {
            acc.apply_values(&aggs, std::slice::from_ref(v), true)
                .unwrap();
        }
        // Through the state codec, as a checkpoint keeps it.
        let mut bytes = Vec::new();
        acc.encode(&mut bytes);
        let acc = Accumulators::decode(&bytes).unwrap();
        let mut out = Vec::new();
        acc.results(&aggs, &mut out);
        out.remove(0)
    }

    #[test]
    fn variances_are_exact_for_close_integers_and_take_back_retractions() {
        let ints = |v: &[i64]| v.iter().map(|i| Value::Int(*i)).collect::<Vec<_>>();
        // 5000 and 5001: the sums of squares cancel all but the last digits.
        assert_eq!(
            result_of(AggFunction::VarPop, &ints(&[5000, 5001]), &[]),
            Value::Double(0.25)
        );
        assert_eq!(
            result_of(AggFunction::VarSamp, &ints(&[5000, 5001]), &[]),
            Value::Double(0.5)
        );
        assert_eq!(
            result_of(
                AggFunction::StddevPop,
                &ints(&[2, 4, 4, 4, 5, 5, 7, 9]),
                &[]
            ),
            Value::Double(2.0)
        );
        // A sample of one has no variance; a retraction leaves one.
        assert_eq!(
            result_of(AggFunction::StddevSamp, &ints(&[3, 9]), &ints(&[9])),
            Value::Null
        );
        let dec = |u: i128| {
            Value::Decimal(Decimal {
                unscaled: u,
                scale: 2,
            })
        };
        assert_eq!(
            result_of(AggFunction::VarPop, &[dec(150), dec(250)], &[]),
            Value::Double(0.25)
        );
        assert_eq!(
            result_of(
                AggFunction::VarPop,
                &[Value::Double(1.5), Value::Double(2.5)],
                &[]
            ),
            Value::Double(0.25)
        );
    }

    #[test]
    fn bool_and_or_count_the_trues_and_take_back_retractions() {
        let (t, f) = (Value::Bool(true), Value::Bool(false));
        assert_eq!(
            result_of(AggFunction::BoolAnd, &[t.clone(), t.clone()], &[]),
            Value::Bool(true)
        );
        assert_eq!(
            result_of(AggFunction::BoolAnd, &[t.clone(), f.clone()], &[]),
            Value::Bool(false)
        );
        assert_eq!(
            result_of(
                AggFunction::BoolAnd,
                &[t.clone(), f.clone()],
                std::slice::from_ref(&f)
            ),
            Value::Bool(true)
        );
        assert_eq!(
            result_of(AggFunction::BoolOr, &[f.clone(), f.clone()], &[]),
            Value::Bool(false)
        );
        assert_eq!(
            result_of(AggFunction::BoolOr, &[f.clone(), t.clone()], &[]),
            Value::Bool(true)
        );
        assert_eq!(result_of(AggFunction::BoolOr, &[], &[]), Value::Null);
    }

    #[test]
    fn first_last_and_array_agg_keep_arrival_order() {
        let s = |x: &str| Value::from(x);
        let abc = [s("b"), s("a"), Value::Null, s("c"), s("a")];
        assert_eq!(result_of(AggFunction::FirstValue, &abc, &[]), s("b"));
        assert_eq!(result_of(AggFunction::LastValue, &abc, &[]), s("a"));
        // ARRAY_AGG keeps NULLs; a retraction takes out the first equal value.
        assert_eq!(
            result_of(AggFunction::ArrayAgg, &abc, &[s("a")]),
            Value::List(vec![s("b"), Value::Null, s("c"), s("a")])
        );
        let aggs = agg_over(AggFunction::FirstValue);
        let mut acc = Accumulators::new(&aggs);
        acc.apply_values(&aggs, &[s("x")], false).unwrap();
        let refused = acc.apply_values(&aggs, &[s("x")], true).unwrap_err();
        assert!(refused.contains("FIRST_VALUE"), "{refused}");
    }
}
