//! Row expressions: columns, literals, comparisons, boolean logic and
//! arithmetic over a row, with SQL's semantics (what Flink SQL does):
//! NULL in, NULL out; `AND`/`OR` with three-valued logic; a filter keeps a
//! row only where its predicate is TRUE. An expression is checked against
//! its input's schema when the job is built (columns exist, types fit),
//! so evaluating it can only fail on values (an overflow, a division by
//! zero), and then names what went wrong.

use std::cmp::Ordering;

use super::row::{DataType, Decimal, Schema, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A column by name, until [`Expr::resolve`] turns it into its index.
    Named(String),
    Column(usize),
    Literal(Value),
    Compare(CmpOp, Box<Expr>, Box<Expr>),
    Arith(ArithOp, Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    IsNull(Box<Expr>),
}

/// `Expr::col("amount").gt(Expr::lit(10))` and so on.
impl Expr {
    pub fn col(name: &str) -> Self {
        Expr::Named(name.to_string())
    }

    pub fn lit(v: impl Into<Value>) -> Self {
        Expr::Literal(v.into())
    }

    fn cmp(self, op: CmpOp, other: Expr) -> Self {
        Expr::Compare(op, Box::new(self), Box::new(other))
    }

    pub fn eq(self, other: Expr) -> Self {
        self.cmp(CmpOp::Eq, other)
    }
    pub fn ne(self, other: Expr) -> Self {
        self.cmp(CmpOp::Ne, other)
    }
    pub fn lt(self, other: Expr) -> Self {
        self.cmp(CmpOp::Lt, other)
    }
    pub fn le(self, other: Expr) -> Self {
        self.cmp(CmpOp::Le, other)
    }
    pub fn gt(self, other: Expr) -> Self {
        self.cmp(CmpOp::Gt, other)
    }
    pub fn ge(self, other: Expr) -> Self {
        self.cmp(CmpOp::Ge, other)
    }

    fn arith(self, op: ArithOp, other: Expr) -> Self {
        Expr::Arith(op, Box::new(self), Box::new(other))
    }

    pub fn plus(self, other: Expr) -> Self {
        self.arith(ArithOp::Add, other)
    }
    pub fn minus(self, other: Expr) -> Self {
        self.arith(ArithOp::Sub, other)
    }
    pub fn times(self, other: Expr) -> Self {
        self.arith(ArithOp::Mul, other)
    }
    pub fn divided_by(self, other: Expr) -> Self {
        self.arith(ArithOp::Div, other)
    }

    pub fn and(self, other: Expr) -> Self {
        Expr::And(Box::new(self), Box::new(other))
    }
    pub fn or(self, other: Expr) -> Self {
        Expr::Or(Box::new(self), Box::new(other))
    }
    pub fn is_null(self) -> Self {
        Expr::IsNull(Box::new(self))
    }

    /// Column names to indexes of `schema`, and the expression's type
    /// (None for a NULL literal, which fits any); Err names the problem.
    pub fn resolve(self, schema: &Schema) -> Result<(Expr, Option<DataType>), String> {
        type Resolved = (Box<Expr>, Option<DataType>, Box<Expr>, Option<DataType>);
        let two = |a: Box<Expr>, b: Box<Expr>| -> Result<Resolved, String> {
            let (a, ta) = a.resolve(schema)?;
            let (b, tb) = b.resolve(schema)?;
            Ok((Box::new(a), ta, Box::new(b), tb))
        };
        let boolean = Some(DataType::Boolean);
        Ok(match self {
            Expr::Named(name) => {
                let i = schema
                    .index_of(&name)
                    .ok_or_else(|| format!("no column {name:?} in ({schema})"))?;
                (Expr::Column(i), Some(schema.fields[i].data_type.clone()))
            }
            Expr::Column(i) => {
                let f = schema
                    .fields
                    .get(i)
                    .ok_or_else(|| format!("no column {i} in ({schema})"))?;
                (Expr::Column(i), Some(f.data_type.clone()))
            }
            Expr::Literal(v) => {
                let t = literal_type(&v);
                (Expr::Literal(v), t)
            }
            Expr::Compare(op, a, b) => {
                let (a, ta, b, tb) = two(a, b)?;
                if !comparable(ta.as_ref(), tb.as_ref()) {
                    return Err(format!(
                        "cannot compare {} with {}",
                        show(ta.as_ref()),
                        show(tb.as_ref())
                    ));
                }
                (Expr::Compare(op, a, b), boolean)
            }
            Expr::Arith(op, a, b) => {
                let (a, ta, b, tb) = two(a, b)?;
                let t = arith_type(ta.as_ref(), tb.as_ref()).ok_or_else(|| {
                    format!(
                        "no arithmetic between {} and {}",
                        show(ta.as_ref()),
                        show(tb.as_ref())
                    )
                })?;
                (Expr::Arith(op, a, b), t)
            }
            Expr::And(a, b) => {
                let (a, ta, b, tb) = two(a, b)?;
                is_boolean(ta.as_ref())?;
                is_boolean(tb.as_ref())?;
                (Expr::And(a, b), boolean)
            }
            Expr::Or(a, b) => {
                let (a, ta, b, tb) = two(a, b)?;
                is_boolean(ta.as_ref())?;
                is_boolean(tb.as_ref())?;
                (Expr::Or(a, b), boolean)
            }
            Expr::Not(a) => {
                let (a, t) = a.resolve(schema)?;
                is_boolean(t.as_ref())?;
                (Expr::Not(Box::new(a)), boolean)
            }
            Expr::IsNull(a) => {
                let (a, _) = a.resolve(schema)?;
                (Expr::IsNull(Box::new(a)), boolean)
            }
        })
    }

    /// The value for `row` (NULL propagates); Err on an overflow or a
    /// division by zero.
    pub fn eval(&self, row: &[Value]) -> Result<Value, String> {
        Ok(match self {
            Expr::Named(name) => return Err(format!("column {name:?} was not resolved")),
            Expr::Column(i) => row.get(*i).cloned().unwrap_or(Value::Null),
            Expr::Literal(v) => v.clone(),
            Expr::Compare(op, a, b) => {
                let (a, b) = (a.eval(row)?, b.eval(row)?);
                if a.is_null() || b.is_null() {
                    return Ok(Value::Null);
                }
                let o = compare(&a, &b);
                Value::Bool(match op {
                    CmpOp::Eq => o == Ordering::Equal,
                    CmpOp::Ne => o != Ordering::Equal,
                    CmpOp::Lt => o == Ordering::Less,
                    CmpOp::Le => o != Ordering::Greater,
                    CmpOp::Gt => o == Ordering::Greater,
                    CmpOp::Ge => o != Ordering::Less,
                })
            }
            Expr::Arith(op, a, b) => arith(*op, &a.eval(row)?, &b.eval(row)?)?,
            Expr::And(a, b) => match (truth(&a.eval(row)?), truth(&b.eval(row)?)) {
                (Some(false), _) | (_, Some(false)) => Value::Bool(false),
                (Some(true), Some(true)) => Value::Bool(true),
                _ => Value::Null,
            },
            Expr::Or(a, b) => match (truth(&a.eval(row)?), truth(&b.eval(row)?)) {
                (Some(true), _) | (_, Some(true)) => Value::Bool(true),
                (Some(false), Some(false)) => Value::Bool(false),
                _ => Value::Null,
            },
            Expr::Not(a) => match truth(&a.eval(row)?) {
                Some(t) => Value::Bool(!t),
                None => Value::Null,
            },
            Expr::IsNull(a) => Value::Bool(a.eval(row)?.is_null()),
        })
    }

    /// Whether the predicate is TRUE for `row` (NULL and FALSE drop it).
    pub fn holds(&self, row: &[Value]) -> Result<bool, String> {
        Ok(truth(&self.eval(row)?) == Some(true))
    }
}

fn truth(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        _ => None,
    }
}

fn show(t: Option<&DataType>) -> String {
    t.map_or("NULL".to_string(), |t| t.to_string())
}

fn is_boolean(t: Option<&DataType>) -> Result<(), String> {
    match t {
        None | Some(DataType::Boolean) => Ok(()),
        Some(t) => Err(format!("{t} is not BOOLEAN")),
    }
}

/// A literal's type; None for NULL.
fn literal_type(v: &Value) -> Option<DataType> {
    Some(match v {
        Value::Null | Value::List(_) | Value::Struct(_) => return None,
        Value::Bool(_) => DataType::Boolean,
        Value::Int(_) => DataType::BigInt,
        Value::Double(_) => DataType::Double,
        Value::Decimal(d) => DataType::Decimal {
            precision: 38,
            scale: d.scale,
        },
        Value::String(_) => DataType::String,
        Value::Bytes(_) => DataType::Bytes,
        Value::Timestamp(_) => DataType::Timestamp,
    })
}

fn numeric(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int | DataType::BigInt | DataType::Double | DataType::Decimal { .. }
    )
}

fn comparable(a: Option<&DataType>, b: Option<&DataType>) -> bool {
    match (a, b) {
        (None, _) | (_, None) => true,
        (Some(a), Some(b)) => a == b || (numeric(a) && numeric(b)),
    }
}

fn arith_type(a: Option<&DataType>, b: Option<&DataType>) -> Option<Option<DataType>> {
    use DataType as T;
    Some(Some(match (a, b) {
        (None, None) => return Some(None),
        (None, Some(t)) | (Some(t), None) if numeric(t) => t.clone(),
        (Some(a), Some(b)) if !(numeric(a) && numeric(b)) => return None,
        (Some(T::Double), _) | (_, Some(T::Double)) => T::Double,
        (
            Some(T::Decimal {
                precision: p,
                scale: s,
            }),
            Some(T::Decimal {
                precision: q,
                scale: r,
            }),
        ) => T::Decimal {
            precision: (*p).max(*q),
            scale: (*s).max(*r),
        },
        (Some(d @ T::Decimal { .. }), _) | (_, Some(d @ T::Decimal { .. })) => d.clone(),
        (Some(_), Some(_)) => T::BigInt,
        _ => return None,
    }))
}

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

/// `!expr`: SQL's `NOT` (NOT NULL is NULL).
impl std::ops::Not for Expr {
    type Output = Expr;

    fn not(self) -> Expr {
        Expr::Not(Box::new(self))
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

fn arith(op: ArithOp, a: &Value, b: &Value) -> Result<Value, String> {
    use Value::*;
    if a.is_null() || b.is_null() {
        return Ok(Null);
    }
    let name = match op {
        ArithOp::Add => "+",
        ArithOp::Sub => "-",
        ArithOp::Mul => "*",
        ArithOp::Div => "/",
    };
    let overflow = || format!("overflow in {a:?} {name} {b:?}");
    Ok(match (a, b) {
        (Int(x), Int(y)) => Int(match op {
            ArithOp::Add => x.checked_add(*y),
            ArithOp::Sub => x.checked_sub(*y),
            ArithOp::Mul => x.checked_mul(*y),
            ArithOp::Div if *y == 0 => return Err(format!("division by zero: {x} / 0")),
            ArithOp::Div => x.checked_div(*y),
        }
        .ok_or_else(overflow)?),
        (Double(_), _) | (_, Double(_)) => {
            let (x, y) = (float(a), float(b));
            Double(match op {
                ArithOp::Add => x + y,
                ArithOp::Sub => x - y,
                ArithOp::Mul => x * y,
                ArithOp::Div => x / y,
            })
        }
        _ => {
            let (Some(x), Some(y)) = (as_decimal(a), as_decimal(b)) else {
                return Err(format!("no arithmetic between {a:?} and {b:?}"));
            };
            match op {
                ArithOp::Add | ArithOp::Sub => {
                    let s = x.scale.max(y.scale);
                    let (p, q) = (
                        rescale(&x, s).ok_or_else(overflow)?,
                        rescale(&y, s).ok_or_else(overflow)?,
                    );
                    let unscaled = if op == ArithOp::Add {
                        p.checked_add(q)
                    } else {
                        p.checked_sub(q)
                    }
                    .ok_or_else(overflow)?;
                    Decimal(super::row::Decimal { unscaled, scale: s })
                }
                ArithOp::Mul => Decimal(super::row::Decimal {
                    unscaled: x.unscaled.checked_mul(y.unscaled).ok_or_else(overflow)?,
                    scale: x.scale.checked_add(y.scale).ok_or_else(overflow)?,
                }),
                ArithOp::Div => return Err("division of decimals is not supported yet".to_string()),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::row::Field;

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("user", DataType::String),
            Field::new("amount", DataType::BigInt),
            Field::new(
                "price",
                DataType::Decimal {
                    precision: 10,
                    scale: 2,
                },
            ),
        ])
    }

    fn dec(unscaled: i128, scale: u8) -> Value {
        Value::Decimal(Decimal { unscaled, scale })
    }

    fn holds(e: Expr, row: &[Value]) -> bool {
        let (e, t) = e.resolve(&schema()).unwrap();
        assert_eq!(t, Some(DataType::Boolean));
        e.holds(row).unwrap()
    }

    #[test]
    fn comparisons_and_three_valued_logic() {
        let row = [Value::from("u1"), Value::Int(7), dec(1050, 2)];
        assert!(holds(Expr::col("amount").gt(Expr::lit(5)), &row));
        assert!(!holds(Expr::col("amount").gt(Expr::lit(7)), &row));
        // 10.50 > 10 and = 10.5 (decimal against integer and decimal).
        assert!(holds(Expr::col("price").gt(Expr::lit(10)), &row));
        assert!(holds(
            Expr::col("price").eq(Expr::Literal(dec(105, 1))),
            &row
        ));
        assert!(holds(
            Expr::col("user")
                .eq(Expr::lit("u1"))
                .and(Expr::col("amount").le(Expr::lit(7))),
            &row
        ));
        let nulls = [Value::Null, Value::Null, Value::Null];
        // NULL = 'u1' is NULL: dropped, and so is its negation.
        assert!(!holds(Expr::col("user").eq(Expr::lit("u1")), &nulls));
        assert!(!holds(!Expr::col("user").eq(Expr::lit("u1")), &nulls));
        // NULL OR TRUE is TRUE; NULL AND FALSE is FALSE.
        assert!(holds(
            Expr::col("user").eq(Expr::lit("x")).or(Expr::lit(true)),
            &nulls
        ));
        assert!(!holds(
            Expr::col("user").eq(Expr::lit("x")).and(Expr::lit(false)),
            &nulls
        ));
        assert!(holds(Expr::col("user").is_null(), &nulls));
    }

    #[test]
    fn arithmetic_and_its_errors() {
        let row = [Value::from("u1"), Value::Int(7), dec(1050, 2)];
        let eval = |e: Expr| {
            let (e, _) = e.resolve(&schema()).unwrap();
            e.eval(&row)
        };
        assert_eq!(
            eval(Expr::col("amount").times(Expr::lit(3))),
            Ok(Value::Int(21))
        );
        assert_eq!(
            eval(Expr::col("amount").divided_by(Expr::lit(2))),
            Ok(Value::Int(3))
        );
        assert_eq!(
            eval(Expr::col("price").plus(Expr::lit(1))),
            Ok(dec(1150, 2))
        );
        assert_eq!(
            eval(Expr::col("amount").plus(Expr::lit(0.5))),
            Ok(Value::Double(7.5))
        );
        let e = eval(Expr::col("amount").divided_by(Expr::lit(0))).unwrap_err();
        assert!(e.contains("division by zero"), "{e}");
        let e = eval(Expr::lit(i64::MAX).plus(Expr::col("amount"))).unwrap_err();
        assert!(e.contains("overflow"), "{e}");
        assert_eq!(
            eval(Expr::Literal(Value::Null).plus(Expr::lit(1))),
            Ok(Value::Null)
        );
    }

    #[test]
    fn problems_are_named_when_the_job_is_built() {
        let e = Expr::col("nope")
            .gt(Expr::lit(1))
            .resolve(&schema())
            .unwrap_err();
        assert!(e.contains("no column \"nope\""), "{e}");
        let e = Expr::col("user")
            .gt(Expr::lit(1))
            .resolve(&schema())
            .unwrap_err();
        assert!(e.contains("cannot compare VARCHAR with BIGINT"), "{e}");
        let e = Expr::col("user")
            .plus(Expr::lit(1))
            .resolve(&schema())
            .unwrap_err();
        assert!(e.contains("no arithmetic"), "{e}");
        let e = Expr::col("amount")
            .and(Expr::lit(true))
            .resolve(&schema())
            .unwrap_err();
        assert!(e.contains("is not BOOLEAN"), "{e}");
    }
}
