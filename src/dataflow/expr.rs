//! Row expressions built in Rust: columns, literals, comparisons, boolean
//! logic and arithmetic over a row. They are not evaluated here:
//! [`Expr::compile`] hands them to weir's one expression compiler, SQL's,
//! so they have SQL's semantics (what Flink SQL does): NULL in, NULL out;
//! `AND`/`OR` with three-valued logic; a filter keeps a row only where its
//! predicate is TRUE. An expression is checked against its input's schema
//! when the job is built (columns exist, types fit), so evaluating it can
//! only fail on values (an overflow, a division by zero), and then names
//! what went wrong.

use super::row::{DataType, Schema, Value};

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

    /// The expression compiled by weir's one expression compiler, SQL's
    /// ([`crate::sql::expression`]), over `schema`'s columns: closures made
    /// once, no walk of this tree per row, and the same types, NULL logic,
    /// decimals and errors as a SQL job's. Also its type (None for an
    /// untyped NULL); Err names the problem (a column `schema` lacks, types
    /// that do not fit).
    pub fn compile(
        &self,
        schema: &Schema,
    ) -> Result<
        (
            std::sync::Arc<crate::sql::compiled::EvalFn>,
            Option<DataType>,
        ),
        String,
    > {
        let text = self.to_sql(schema)?;
        let columns: Vec<(&str, DataType)> = schema
            .fields
            .iter()
            .map(|f| (f.name.as_str(), f.data_type.clone()))
            .collect();
        let c = crate::sql::expression(&text, &columns).map_err(|e| e.message)?;
        Ok((c.eval, c.ty.data().cloned()))
    }

    /// The expression as SQL text for [`Expr::compile`]: columns quoted by
    /// name, literals typed as they are.
    fn to_sql(&self, schema: &Schema) -> Result<String, String> {
        let column = |name: &str| format!("\"{}\"", name.replace('"', "\"\""));
        Ok(match self {
            Expr::Named(name) => {
                let i = schema
                    .index_of(name)
                    .ok_or_else(|| format!("no column {name:?} in ({schema})"))?;
                column(&schema.fields[i].name)
            }
            Expr::Column(i) => column(
                &schema
                    .fields
                    .get(*i)
                    .ok_or_else(|| format!("no column {i} in ({schema})"))?
                    .name,
            ),
            Expr::Literal(v) => literal_sql(v)?,
            Expr::Compare(op, a, b) => {
                let op = match op {
                    CmpOp::Eq => "=",
                    CmpOp::Ne => "<>",
                    CmpOp::Lt => "<",
                    CmpOp::Le => "<=",
                    CmpOp::Gt => ">",
                    CmpOp::Ge => ">=",
                };
                format!("({} {op} {})", a.to_sql(schema)?, b.to_sql(schema)?)
            }
            Expr::Arith(op, a, b) => {
                let op = match op {
                    ArithOp::Add => "+",
                    ArithOp::Sub => "-",
                    ArithOp::Mul => "*",
                    ArithOp::Div => "/",
                };
                format!("({} {op} {})", a.to_sql(schema)?, b.to_sql(schema)?)
            }
            Expr::And(a, b) => format!("({} AND {})", a.to_sql(schema)?, b.to_sql(schema)?),
            Expr::Or(a, b) => format!("({} OR {})", a.to_sql(schema)?, b.to_sql(schema)?),
            Expr::Not(a) => format!("(NOT {})", a.to_sql(schema)?),
            Expr::IsNull(a) => format!("({} IS NULL)", a.to_sql(schema)?),
        })
    }
}

/// A literal as SQL text of its own type.
fn literal_sql(v: &Value) -> Result<String, String> {
    Ok(match v {
        Value::Null => "NULL".into(),
        Value::Bool(b) => if *b { "TRUE" } else { "FALSE" }.into(),
        Value::Int(i) => format!("CAST({i} AS BIGINT)"),
        Value::Double(d) if d.is_finite() => format!("CAST({d:?} AS DOUBLE)"),
        Value::Double(d) => format!("CAST('{d}' AS DOUBLE)"),
        Value::Decimal(d) => {
            let digits = d.to_string();
            let precision = digits.chars().filter(char::is_ascii_digit).count().max(1);
            format!(
                "CAST({digits} AS DECIMAL({}, {}))",
                precision.max(usize::from(d.scale)),
                d.scale
            )
        }
        Value::String(s) => format!("'{}'", s.replace('\'', "''")),
        Value::Timestamp(ms) => {
            let t = super::json::format_timestamp(*ms);
            format!(
                "TIMESTAMP '{}'",
                t.trim_end_matches('Z').replacen('T', " ", 1)
            )
        }
        Value::Bytes(_) | Value::List(_) | Value::Struct(_) => {
            return Err(format!("a literal {v:?} is not supported in an expression"))
        }
    })
}

/// `!expr`: SQL's `NOT` (NOT NULL is NULL).
impl std::ops::Not for Expr {
    type Output = Expr;

    fn not(self) -> Expr {
        Expr::Not(Box::new(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::row::{Decimal, Field};

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
        let (e, t) = e.compile(&schema()).unwrap();
        assert_eq!(t, Some(DataType::Boolean));
        e(row).unwrap() == Value::Bool(true)
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
            let (e, _) = e.compile(&schema()).unwrap();
            e(&row)
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
            .compile(&schema())
            .map(|_| ())
            .unwrap_err();
        assert!(e.contains("no column \"nope\""), "{e}");
        let e = Expr::col("user")
            .gt(Expr::lit(1))
            .compile(&schema())
            .map(|_| ())
            .unwrap_err();
        assert!(e.contains("cannot compare VARCHAR with BIGINT"), "{e}");
        let e = Expr::col("user")
            .plus(Expr::lit(1))
            .compile(&schema())
            .map(|_| ())
            .unwrap_err();
        assert!(e.contains("no arithmetic"), "{e}");
        let e = Expr::col("amount")
            .and(Expr::lit(true))
            .compile(&schema())
            .map(|_| ())
            .unwrap_err();
        assert!(e.contains("expected BOOLEAN, found BIGINT"), "{e}");
    }
}
