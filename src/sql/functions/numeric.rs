//! Numeric functions. Those of real analysis (SQRT, LN, ASIN, ...) take
//! and give DOUBLE and follow Java's `Math`, as Flink's do: the logarithm
//! of 0 is -Infinity, of a negative number NaN, never an error.

use sqlparser::ast::Expr as E;

use super::super::cast::rescale_round;
use super::super::compiled::{Compiled, Ty};
use super::arithmetic::arithmetic;
use super::compose::{double, int, strict, text, type_of};
use super::definition::{Call, Function};
use super::signature::{optional, p, Kind::*};
use crate::dataflow::row::{DataType as T, Decimal, Value};

pub const FUNCTIONS: &[Function] = &[
    Function::new(
        "MOD",
        &[p("a", Number), p("b", Number)],
        "the wider type",
        modulo,
    )
    .doc(
        "the remainder of `a` divided by `b`, with the sign of `a`",
        "MOD(-7, 3)",
        "-1",
    ),
    Function::new("ABS", &[p("x", Number)], "type of x", abs).doc(
        "the absolute value of `x`",
        "ABS(-2.5)",
        "2.5",
    ),
    Function::new("FLOOR", &[p("x", Number)], "type of x", floor_ceil).doc(
        "the largest whole number not above `x`; also `FLOOR(t TO unit)`",
        "FLOOR(-2.5)",
        "-3",
    ),
    Function::new("CEIL", &[p("x", Number)], "type of x", floor_ceil).doc(
        "the smallest whole number not below `x`; also `CEIL(t TO unit)`",
        "CEIL(2.1)",
        "3",
    ),
    Function::new("CEILING", &[p("x", Number)], "type of x", floor_ceil).doc(
        "CEIL",
        "CEILING(2.1)",
        "3",
    ),
    Function::new(
        "ROUND",
        &[p("x", Number), optional(p("places", Integer))],
        "type of x",
        round_truncate,
    )
    .doc(
        "`x` rounded half away from zero to `places` decimals (0 if left out; a constant from \
         0 to 38)",
        "ROUND(2.345, 2)",
        "2.35",
    ),
    Function::new(
        "TRUNCATE",
        &[p("x", Number), optional(p("places", Integer))],
        "type of x",
        round_truncate,
    )
    .doc(
        "`x` cut toward zero to `places` decimals (0 if left out; a constant from 0 to 38)",
        "TRUNCATE(42.324, 2)",
        "42.32",
    ),
    Function::new("SIGN", &[p("x", Number)], "type of x", sign).doc(
        "-1, 0 or 1 as `x` is negative, zero or positive",
        "SIGN(-8)",
        "-1",
    ),
    Function::new("POWER", &[p("x", Double), p("y", Double)], "DOUBLE", real2).doc(
        "`x` to the power `y`",
        "POWER(2, 10)",
        "1024.0",
    ),
    Function::new("POW", &[p("x", Double), p("y", Double)], "DOUBLE", real2).doc(
        "POWER",
        "POW(9, 0.5)",
        "3.0",
    ),
    Function::new("SQRT", &[p("x", Double)], "DOUBLE", real).doc(
        "the square root of `x`; NaN when `x` is negative",
        "SQRT(16)",
        "4.0",
    ),
    Function::new("EXP", &[p("x", Double)], "DOUBLE", real).doc(
        "e to the power `x`",
        "EXP(0)",
        "1.0",
    ),
    Function::new("LN", &[p("x", Double)], "DOUBLE", real).doc(
        "the natural logarithm of `x`",
        "LN(1)",
        "0.0",
    ),
    Function::new("LOG", &[p("x", Double)], "DOUBLE", real).doc(
        "the natural logarithm of `x`; with two arguments, `LOG(base, x)`",
        "LOG(1)",
        "0.0",
    ),
    Function::new("LOG", &[p("base", Double), p("x", Double)], "DOUBLE", real2).doc(
        "the logarithm of `x` to `base`",
        "LOG(2, 8)",
        "3.0",
    ),
    Function::new("LOG10", &[p("x", Double)], "DOUBLE", real).doc(
        "the logarithm of `x` to base 10",
        "LOG10(1000)",
        "3.0",
    ),
    Function::new("LOG2", &[p("x", Double)], "DOUBLE", real).doc(
        "the logarithm of `x` to base 2",
        "LOG2(8)",
        "3.0",
    ),
    Function::new("PI", &[], "DOUBLE", real0).doc("π", "PI()", "3.141592653589793"),
    Function::new("E", &[], "DOUBLE", real0).doc("e", "E()", "2.718281828459045"),
    Function::new("DEGREES", &[p("radians", Double)], "DOUBLE", real).doc(
        "`radians` in degrees",
        "DEGREES(PI())",
        "180.0",
    ),
    Function::new("RADIANS", &[p("degrees", Double)], "DOUBLE", real).doc(
        "`degrees` in radians",
        "RADIANS(180)",
        "3.141592653589793",
    ),
    Function::new("SIN", &[p("x", Double)], "DOUBLE", real).doc(
        "the sine of `x` (radians)",
        "SIN(0)",
        "0.0",
    ),
    Function::new("COS", &[p("x", Double)], "DOUBLE", real).doc(
        "the cosine of `x`",
        "COS(0)",
        "1.0",
    ),
    Function::new("TAN", &[p("x", Double)], "DOUBLE", real).doc(
        "the tangent of `x`",
        "TAN(0)",
        "0.0",
    ),
    Function::new("COT", &[p("x", Double)], "DOUBLE", real).doc(
        "the cotangent of `x`",
        "COT(PI() / 4)",
        "1.0000000000000002",
    ),
    Function::new("ASIN", &[p("x", Double)], "DOUBLE", real).doc(
        "the arc sine of `x`; NaN outside -1 to 1",
        "ASIN(1)",
        "1.5707963267948966",
    ),
    Function::new("ACOS", &[p("x", Double)], "DOUBLE", real).doc(
        "the arc cosine of `x`; NaN outside -1 to 1",
        "ACOS(1)",
        "0.0",
    ),
    Function::new("ATAN", &[p("x", Double)], "DOUBLE", real).doc(
        "the arc tangent of `x`",
        "ATAN(0)",
        "0.0",
    ),
    Function::new("ATAN2", &[p("y", Double), p("x", Double)], "DOUBLE", real2).doc(
        "the angle of the point (`x`, `y`) from the x axis",
        "ATAN2(1, 1)",
        "0.7853981633974483",
    ),
    Function::new("SINH", &[p("x", Double)], "DOUBLE", real).doc(
        "the hyperbolic sine of `x`",
        "SINH(0)",
        "0.0",
    ),
    Function::new("COSH", &[p("x", Double)], "DOUBLE", real).doc(
        "the hyperbolic cosine of `x`",
        "COSH(0)",
        "1.0",
    ),
    Function::new("TANH", &[p("x", Double)], "DOUBLE", real).doc(
        "the hyperbolic tangent of `x`",
        "TANH(0)",
        "0.0",
    ),
    Function::new("BIN", &[p("x", Integer)], "VARCHAR", bin).doc(
        "`x` in binary; a negative `x` as its 64-bit two's complement",
        "BIN(12)",
        "'1100'",
    ),
    Function::new("HEX", &[p("x", Integer)], "VARCHAR", hex).doc(
        "`x` in upper-case hexadecimal; a negative `x` as its 64-bit two's complement",
        "HEX(255)",
        "'FF'",
    ),
    Function::new("HEX", &[p("s", Text)], "VARCHAR", hex).doc(
        "the UTF-8 bytes of `s` in upper-case hexadecimal",
        "HEX('hi')",
        "'6869'",
    ),
];

fn modulo(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let mut a = args.into_iter();
    let (x, y) = (a.next().expect("2"), a.next().expect("2"));
    // Only the message is kept: the caller places it.
    let here = E::Identifier(sqlparser::ast::Ident::new("MOD"));
    arithmetic("%", x, y, &here).map_err(|e| e.message)
}

fn abs(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let t = type_of(&args[0]);
    Ok(strict(t, args, |v| {
        Ok(match &v[0] {
            Value::Int(i) => Value::Int(i.checked_abs().ok_or("BIGINT overflow in ABS")?),
            Value::Double(d) => Value::Double(d.abs()),
            Value::Decimal(d) => Value::Decimal(Decimal {
                unscaled: { d.unscaled }.abs(),
                scale: d.scale,
            }),
            other => other.clone(),
        })
    }))
}

fn div_ceil(a: i128, b: i128) -> i128 {
    -((-a).div_euclid(b))
}

fn floor_ceil(call: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let name = call.name;
    let up = name != "FLOOR";
    let t = match type_of(&args[0]) {
        T::Decimal { precision, .. } => T::Decimal {
            precision,
            scale: 0,
        },
        t => t,
    };
    Ok(strict(t, args, move |v| {
        Ok(match &v[0] {
            Value::Double(d) => Value::Double(if up { d.ceil() } else { d.floor() }),
            Value::Decimal(d) => {
                let p = 10i128.pow(u32::from(d.scale));
                let u = d.unscaled;
                let q = if up { div_ceil(u, p) } else { u.div_euclid(p) };
                Value::Decimal(Decimal {
                    unscaled: q,
                    scale: 0,
                })
            }
            other => other.clone(),
        })
    }))
}

fn round_truncate(call: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let name = call.name;
    let round = name == "ROUND";
    let places = match args.get(1) {
        None => 0,
        Some(c) => match c.constant {
            Some(Value::Int(p)) if (0..=38).contains(&p) => p as u8,
            _ => return Err(format!("{name}'s places must be a constant from 0 to 38")),
        },
    };
    let t = match type_of(&args[0]) {
        T::Decimal { precision, scale } => T::Decimal {
            precision,
            scale: scale.min(places),
        },
        t => t,
    };
    let first = args.into_iter().take(1).collect();
    Ok(strict(t, first, move |v| {
        Ok(match &v[0] {
            Value::Double(d) => Value::Double(round_double(*d, places, round)),
            Value::Decimal(d) if d.scale > places => Value::Decimal(if round {
                rescale_round(*d, places).ok_or("DECIMAL overflow")?
            } else {
                Decimal {
                    unscaled: d.unscaled / 10i128.pow(u32::from(d.scale - places)),
                    scale: places,
                }
            }),
            other => other.clone(),
        })
    }))
}

/// A DOUBLE rounded (half away from zero) or cut at `places` decimals as
/// Flink does: by the shortest decimal that reads back as it
/// (`BigDecimal.valueOf`), so 489.465 rounds to 489.47 although the
/// double nearest to it is a little below.
fn round_double(d: f64, places: u8, round: bool) -> f64 {
    if !d.is_finite() {
        return d;
    }
    let shortest = d.to_string();
    let exact = if round {
        Decimal::parse(&shortest, places)
    } else {
        // Cut: the digits past `places` dropped.
        let cut = match shortest.split_once('.') {
            Some((int, frac)) if frac.len() > places as usize => {
                format!("{int}.{}", &frac[..places as usize])
            }
            _ => shortest.clone(),
        };
        Decimal::parse(&cut, places)
    };
    // A number too large for an exact decimal has no digits to cut.
    exact.map_or(d, |e| e.to_f64())
}

fn sign(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let t = type_of(&args[0]);
    Ok(strict(t, args, |v| {
        Ok(match &v[0] {
            Value::Int(i) => Value::Int(i.signum()),
            Value::Double(d) if d.is_nan() || *d == 0.0 => Value::Double(*d),
            Value::Double(d) => Value::Double(d.signum()),
            Value::Decimal(d) => Value::Decimal(Decimal {
                unscaled: { d.unscaled }.signum() * 10i128.pow(u32::from(d.scale)),
                scale: d.scale,
            }),
            other => other.clone(),
        })
    }))
}

/// A function of one real number.
fn real(call: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let name = call.name;
    let f: fn(f64) -> f64 = match name {
        "SQRT" => f64::sqrt,
        "EXP" => f64::exp,
        "LN" | "LOG" => f64::ln,
        "LOG10" => f64::log10,
        "LOG2" => f64::log2,
        "DEGREES" => f64::to_degrees,
        "RADIANS" => f64::to_radians,
        "SIN" => f64::sin,
        "COS" => f64::cos,
        "TAN" => f64::tan,
        "COT" => |x| 1.0 / x.tan(),
        "ASIN" => f64::asin,
        "ACOS" => f64::acos,
        "ATAN" => f64::atan,
        "SINH" => f64::sinh,
        "COSH" => f64::cosh,
        "TANH" => f64::tanh,
        _ => return Err(format!("{name} is not a function of one number")),
    };
    Ok(strict(T::Double, args, move |v| {
        Ok(Value::Double(f(double(&v[0]))))
    }))
}

/// A function of two real numbers.
fn real2(call: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let name = call.name;
    let f: fn(f64, f64) -> f64 = match name {
        "POWER" | "POW" => f64::powf,
        "LOG" => |base, x| x.ln() / base.ln(),
        "ATAN2" => f64::atan2,
        _ => return Err(format!("{name} is not a function of two numbers")),
    };
    Ok(strict(T::Double, args, move |v| {
        Ok(Value::Double(f(double(&v[0]), double(&v[1]))))
    }))
}

fn real0(call: &Call, _: Vec<Compiled>) -> Result<Compiled, String> {
    let name = call.name;
    let x = if name == "PI" {
        std::f64::consts::PI
    } else {
        std::f64::consts::E
    };
    Ok(Compiled::constant(Value::Double(x), Ty::Data(T::Double)))
}

fn bin(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    Ok(strict(T::String, args, |v| {
        Ok(Value::String(format!("{:b}", int(&v[0]))))
    }))
}

fn hex(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    Ok(strict(T::String, args, |v| {
        Ok(Value::String(match &v[0] {
            Value::Int(i) => format!("{i:X}"),
            s => text(s).bytes().map(|b| format!("{b:02X}")).collect(),
        }))
    }))
}
