//! A function's parameters, how a call's arguments are checked against
//! them, and the implicit casts that make them fit (Flink's type
//! inference: a number widens to the number a parameter wants, an untyped
//! NULL fits any parameter).

use std::fmt;

use jiff::tz::TimeZone;

use super::super::cast::{coerce_to, numeric};
use super::super::compiled::{Compiled, Ty};
use super::calendar::to_local;
use crate::dataflow::row::{DataType, Value};

/// What a parameter takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// VARCHAR.
    Text,
    /// INT or BIGINT.
    Integer,
    /// Any number, kept as it is (the function's result follows its type).
    Number,
    /// Any number, cast to DOUBLE.
    Double,
    Boolean,
    /// TIMESTAMP(3); a TIMESTAMP_LTZ(3) as the session time zone shows it
    /// (and a TIMESTAMP result back at that zone: `registry::call`); a
    /// DATE as its midnight.
    Timestamp,
    /// TIMESTAMP_LTZ(3) as the instant it is.
    Instant,
    /// BYTES (VARBINARY).
    Bytes,
    /// An ARRAY of anything.
    Array,
    /// A MAP of anything.
    Map,
    /// Any type.
    Any,
    /// A time unit written as a keyword (`DAY`, `HOUR`), as TIMESTAMPADD's
    /// first argument: the expression compiler passes its name as text.
    Unit,
}

impl Kind {
    /// Whether an argument of type `ty` fits, perhaps after an implicit cast.
    fn accepts(self, ty: &Ty) -> bool {
        let Ty::Data(t) = ty else {
            return matches!(ty, Ty::Null) && self != Kind::Unit;
        };
        match self {
            Kind::Text | Kind::Unit => *t == DataType::String,
            Kind::Integer => matches!(t, DataType::Int | DataType::BigInt),
            Kind::Number | Kind::Double => numeric(t),
            Kind::Boolean => *t == DataType::Boolean,
            Kind::Timestamp => t.is_timestamp() || matches!(t, DataType::Date | DataType::Time),
            Kind::Instant => *t == DataType::TimestampLtz,
            Kind::Bytes => *t == DataType::Bytes,
            Kind::Array => matches!(t, DataType::List(_)),
            Kind::Map => matches!(t, DataType::Map(..)),
            Kind::Any => true,
        }
    }

    /// The argument as this parameter takes it: a number cast to DOUBLE
    /// where a DOUBLE is wanted, an untyped NULL given the parameter's type.
    fn fit(self, c: Compiled) -> Compiled {
        let target = match self {
            Kind::Double => DataType::Double,
            _ if c.ty != Ty::Null => return c,
            Kind::Text | Kind::Unit => DataType::String,
            Kind::Integer => DataType::BigInt,
            Kind::Number => DataType::Double,
            Kind::Boolean => DataType::Boolean,
            Kind::Timestamp => DataType::Timestamp,
            Kind::Instant => DataType::TimestampLtz,
            Kind::Bytes => DataType::Bytes,
            Kind::Array | Kind::Map | Kind::Any => return c,
        };
        if c.ty == Ty::Data(target.clone()) {
            return c;
        }
        if c.ty == Ty::Null {
            return Compiled::constant(Value::Null, Ty::Data(target));
        }
        coerce_to(c, &Ty::Data(target))
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Text => "VARCHAR",
            Kind::Integer => "INT",
            Kind::Number => "NUMERIC",
            Kind::Double => "DOUBLE",
            Kind::Boolean => "BOOLEAN",
            Kind::Timestamp => "TIMESTAMP(3)",
            Kind::Instant => "TIMESTAMP_LTZ(3)",
            Kind::Bytes => "BYTES",
            Kind::Array => "ARRAY",
            Kind::Map => "MAP",
            Kind::Any => "ANY",
            Kind::Unit => "time unit",
        })
    }
}

/// How many arguments a parameter takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    One,
    /// Zero or one; optional parameters come last.
    Optional,
    /// One or more; only the last parameter repeats.
    Many,
    /// Zero or more; the last parameter alone.
    Any,
}

/// One parameter of a function.
#[derive(Debug, Clone, Copy)]
pub struct Param {
    pub name: &'static str,
    pub kind: Kind,
    pub count: Count,
    /// The argument must be a constant (a pattern compiled when the job
    /// is planned).
    pub constant: bool,
}

/// A parameter that takes one argument.
pub const fn p(name: &'static str, kind: Kind) -> Param {
    Param {
        name,
        kind,
        count: Count::One,
        constant: false,
    }
}

/// A parameter whose argument must be a constant.
pub const fn constant(name: &'static str, kind: Kind) -> Param {
    Param {
        constant: true,
        ..p(name, kind)
    }
}

/// A parameter that may be left out.
pub const fn optional(param: Param) -> Param {
    Param {
        count: Count::Optional,
        ..param
    }
}

/// A parameter that takes any number of arguments, none included.
pub const fn any_number(param: Param) -> Param {
    Param {
        count: Count::Any,
        ..param
    }
}

/// A parameter that repeats (one or more arguments).
pub const fn many(param: Param) -> Param {
    Param {
        count: Count::Many,
        ..param
    }
}

impl fmt::Display for Param {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let constant = if self.constant { " constant" } else { "" };
        match self.count {
            Count::One => write!(f, "{} {}{constant}", self.name, self.kind),
            Count::Optional => write!(f, "[{} {}{constant}]", self.name, self.kind),
            Count::Many => write!(f, "{} {}{constant}, ...", self.name, self.kind),
            Count::Any => write!(f, "[{} {}{constant}, ...]", self.name, self.kind),
        }
    }
}

/// `name(p1 KIND, [p2 KIND])`.
pub fn show(name: &str, params: &[Param]) -> String {
    let list: Vec<String> = params.iter().map(ToString::to_string).collect();
    format!("{name}({})", list.join(", "))
}

/// Which parameter each argument goes to; Err when the count is wrong.
pub fn assign(params: &[Param], args: usize) -> Result<Vec<&Param>, String> {
    let required = params
        .iter()
        .filter(|p| matches!(p.count, Count::One | Count::Many))
        .count();
    let repeats = params
        .last()
        .is_some_and(|p| matches!(p.count, Count::Many | Count::Any));
    let most = if repeats { usize::MAX } else { params.len() };
    if args < required || args > most {
        let want = match (required, most) {
            (r, usize::MAX) => format!("at least {r}"),
            (r, m) if r == m => r.to_string(),
            (r, m) => format!("{r} to {m}"),
        };
        let noun = if want == "1" { "argument" } else { "arguments" };
        return Err(format!("takes {want} {noun}, not {args}"));
    }
    Ok((0..args)
        .map(|i| &params[i.min(params.len() - 1)])
        .collect())
}

/// Checks `args` against `params` and applies the implicit casts (a
/// TIMESTAMP_LTZ where a TIMESTAMP is wanted: the wall-clock time `zone`
/// shows); Err names the argument that does not fit.
pub fn check(
    name: &str,
    params: &[Param],
    args: Vec<Compiled>,
    zone: &TimeZone,
) -> Result<Vec<Compiled>, String> {
    let assigned = assign(params, args.len())?;
    let mut out = Vec::with_capacity(args.len());
    for (i, (param, arg)) in assigned.into_iter().zip(args).enumerate() {
        if !param.kind.accepts(&arg.ty) {
            return Err(format!(
                "argument {} of {name} ({}) must be {}, not {}",
                i + 1,
                param.name,
                param.kind,
                arg.ty
            ));
        }
        if param.constant && arg.constant.is_none() {
            return Err(format!(
                "argument {} of {name} ({}) must be a constant",
                i + 1,
                param.name
            ));
        }
        if param.kind == Kind::Timestamp && arg.ty == Ty::Data(DataType::TimestampLtz) {
            out.push(to_local(arg, zone));
            continue;
        }
        out.push(param.kind.fit(arg));
    }
    Ok(out)
}
