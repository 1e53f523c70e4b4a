//! What an aggregate keeps per key (or per key and window): the rows
//! counted and one part per aggregate, its state encoding, and the
//! arithmetic of adding, retracting and merging rows.

use super::function::{Agg, AggFunction};
use crate::dataflow::codec::{decode_value, encode_value, get_varint, put_varint, StateCodec};
use crate::dataflow::row::{Decimal, Row, Value};

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

#[cfg(test)]
mod round_trip_tests {
    use super::*;

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
