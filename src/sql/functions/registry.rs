//! The function registry: every scalar function weir's SQL knows, by name,
//! with its parameters, its result, a line about it and an example. A
//! call is checked against the parameters of each form of its name in
//! turn (Flink's overloads), with the implicit casts of
//! [`super::signature`], then built by the function's implementation.
//! `docs/sql.md`'s function reference is generated from this list.

use std::collections::HashMap;
use std::sync::OnceLock;

use jiff::tz::TimeZone;

use super::super::compiled::{Compiled, Ty};
use super::calendar::back_to_zoned;
use super::definition::Call;
pub use super::definition::Function;
use super::signature::{check, show, Kind};
use crate::dataflow::row::DataType;

/// A family of functions: one module, one section of the reference.
pub struct Family {
    pub title: &'static str,
    pub functions: &'static [Function],
}

/// Every family, in the reference's order.
pub fn families() -> &'static [Family] {
    use super::{collection, conditional, hash, json, numeric, refused, string, temporal};
    static FAMILIES: [Family; 8] = [
        Family {
            title: "String functions",
            functions: string::FUNCTIONS,
        },
        Family {
            title: "Numeric functions",
            functions: numeric::FUNCTIONS,
        },
        Family {
            title: "Temporal functions",
            functions: temporal::FUNCTIONS,
        },
        Family {
            title: "JSON functions",
            functions: json::FUNCTIONS,
        },
        Family {
            title: "Conditional functions",
            functions: conditional::FUNCTIONS,
        },
        Family {
            title: "Hash functions",
            functions: hash::FUNCTIONS,
        },
        Family {
            title: "Collection functions",
            functions: collection::FUNCTIONS,
        },
        Family {
            title: "Refused functions",
            functions: refused::FUNCTIONS,
        },
    ];
    &FAMILIES
}

/// Every function, each form once.
pub fn all() -> impl Iterator<Item = &'static Function> {
    families().iter().flat_map(|f| f.functions.iter())
}

/// The forms of `name` (upper case), in the order they are tried.
pub fn forms(name: &str) -> Option<&'static [&'static Function]> {
    static BY_NAME: OnceLock<HashMap<&'static str, Vec<&'static Function>>> = OnceLock::new();
    BY_NAME
        .get_or_init(|| {
            let mut m: HashMap<&'static str, Vec<&'static Function>> = HashMap::new();
            for f in all() {
                m.entry(f.name).or_default().push(f);
            }
            m
        })
        .get(name)
        .map(Vec::as_slice)
}

/// Every name the registry knows.
pub fn names() -> impl Iterator<Item = &'static str> {
    let mut seen = std::collections::BTreeSet::new();
    all().map(|f| f.name).filter(move |n| seen.insert(*n))
}

/// `name(args)`, checked and built; Err says what does not fit (without
/// where: the caller knows the call's place).
///
/// A TIMESTAMP_LTZ argument of a function over TIMESTAMPs is the wall-clock
/// time `zone` shows, and a TIMESTAMP result of such a call is the
/// TIMESTAMP_LTZ at which `zone` shows it, as Flink's functions read an
/// LTZ in the session time zone: `HOUR(ltz)` is the hour there,
/// `FLOOR(ltz TO DAY)` the instant of that day's local midnight.
pub fn call(name: &str, args: Vec<Compiled>, zone: &TimeZone) -> Result<Compiled, CallError> {
    let Some(forms) = forms(name) else {
        return Err(CallError::Unknown);
    };
    let mut problems = Vec::new();
    let zoned = args
        .iter()
        .find(|a| a.ty == Ty::Data(DataType::TimestampLtz))
        .cloned();
    for f in forms {
        match check(name, f.params, args.clone(), zone) {
            Ok(checked) => {
                let built = (f.build)(&Call { name, zone }, checked).map_err(CallError::Refused)?;
                let takes_timestamps = f.params.iter().any(|p| p.kind == Kind::Timestamp);
                return Ok(match zoned {
                    Some(from) if takes_timestamps && built.ty == Ty::Data(DataType::Timestamp) => {
                        back_to_zoned(built, &from, zone)
                    }
                    _ => built,
                });
            }
            Err(m) => problems.push(m),
        }
    }
    Err(CallError::Refused(match (forms, problems.as_slice()) {
        ([f], [m]) if m.starts_with("takes") => {
            format!("{name} {m}: {}", show(f.name, f.params))
        }
        ([_], [m]) => m.clone(),
        _ => {
            let types: Vec<String> = args.iter().map(|a| a.ty.to_string()).collect();
            let shown: Vec<String> = forms.iter().map(|f| show(f.name, f.params)).collect();
            format!(
                "no form of {name} takes ({}); its forms are {}",
                types.join(", "),
                shown.join(" and ")
            )
        }
    }))
}

/// Why a call was not built.
#[derive(Debug)]
pub enum CallError {
    /// No function has the name.
    Unknown,
    /// The function exists and refused these arguments, saying why.
    Refused(String),
}
