//! A compiled expression and its type: what the expression compiler
//! (`super::expr`), the functions (`super::functions`) and the casts
//! (`super::cast`) share.

use std::sync::Arc;

use sqlparser::ast::{Expr as E, Spanned};

use super::SqlError;
use crate::dataflow::row::{DataType, Value};

/// A compiled expression's type: a data type, the type of an untyped
/// `NULL`, or an interval (which moves a timestamp, a date or a time, and
/// scales by a whole number): a day-time interval in milliseconds, or a
/// year-month interval in months.
#[derive(Debug, Clone, PartialEq)]
pub enum Ty {
    Null,
    Interval,
    MonthInterval,
    Data(DataType),
}

impl Ty {
    pub fn data(&self) -> Option<&DataType> {
        match self {
            Ty::Data(t) => Some(t),
            _ => None,
        }
    }

    /// The column type a result of this type gets (an untyped NULL: VARCHAR).
    pub fn column_type(&self) -> DataType {
        match self {
            Ty::Data(t) => t.clone(),
            Ty::Interval | Ty::MonthInterval => DataType::BigInt,
            Ty::Null => DataType::String,
        }
    }
}

impl std::fmt::Display for Ty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ty::Null => f.write_str("NULL"),
            Ty::Interval => f.write_str("INTERVAL DAY TO SECOND"),
            Ty::MonthInterval => f.write_str("INTERVAL YEAR TO MONTH"),
            Ty::Data(t) => write!(f, "{t}"),
        }
    }
}

pub type EvalFn = dyn Fn(&[Value]) -> Result<Value, String> + Send + Sync;

/// One compiled expression: its function, its type, and its value when
/// it is a constant.
#[derive(Clone)]
pub struct Compiled {
    pub eval: Arc<EvalFn>,
    pub ty: Ty,
    pub constant: Option<Value>,
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Compiled({})", self.ty)
    }
}

impl Compiled {
    pub fn constant(v: Value, ty: Ty) -> Self {
        let c = v.clone();
        Self {
            eval: Arc::new(move |_| Ok(c.clone())),
            ty,
            constant: Some(v),
        }
    }

    pub fn column(i: usize, t: DataType) -> Self {
        Self {
            eval: Arc::new(move |row| Ok(row.get(i).cloned().unwrap_or(Value::Null))),
            ty: Ty::Data(t),
            constant: None,
        }
    }

    pub(crate) fn new(
        ty: Ty,
        f: impl Fn(&[Value]) -> Result<Value, String> + Send + Sync + 'static,
    ) -> Self {
        Self {
            eval: Arc::new(f),
            ty,
            constant: None,
        }
    }

    pub fn data_type(&self) -> Option<&DataType> {
        self.ty.data()
    }
}

pub fn err(e: &E, message: impl Into<String>) -> SqlError {
    SqlError::at(e.span(), message)
}
