//! Functions weir knows and refuses, each with its reason: their values
//! depend on when or how often a row is processed, so a replay after a
//! crash would compute other values than the first run wrote, and
//! exactly-once output needs the same ones.

use super::super::compiled::Compiled;
use super::definition::{Call, Function};
use super::signature::{any_number, p, Kind::*};

/// Any arguments: the refusal does not depend on them.
const ANY: &[super::signature::Param] = &[any_number(p("x", Any))];

pub const FUNCTIONS: &[Function] = &[
    Function::new("NOW", ANY, "refused", wall_clock).doc(
        "the wall clock: refused, as a replay would read another time",
        "",
        "",
    ),
    Function::new("CURRENT_TIMESTAMP", ANY, "refused", wall_clock).doc(
        "the wall clock: refused in a streaming job (every row is evaluated at another time \
         and a replay at a later one); for the time a row happened use its event-time column, \
         for progress CURRENT_WATERMARK",
        "",
        "",
    ),
    Function::new("LOCALTIMESTAMP", ANY, "refused", wall_clock).doc(
        "the wall clock: refused, as CURRENT_TIMESTAMP",
        "",
        "",
    ),
    Function::new("CURRENT_DATE", ANY, "refused", wall_clock).doc(
        "the wall clock's date: refused, as CURRENT_TIMESTAMP",
        "",
        "",
    ),
    Function::new("CURRENT_TIME", ANY, "refused", wall_clock).doc(
        "the wall clock's time: refused, as CURRENT_TIMESTAMP",
        "",
        "",
    ),
    Function::new("LOCALTIME", ANY, "refused", wall_clock).doc(
        "the wall clock's time: refused, as CURRENT_TIMESTAMP",
        "",
        "",
    ),
    Function::new("UNIX_TIMESTAMP", &[], "refused", wall_clock).doc(
        "without an argument, the wall clock: refused, as NOW; give it a timestamp",
        "",
        "",
    ),
    Function::new("PROCTIME", ANY, "refused", wall_clock).doc(
        "processing time: refused; weir's windows and joins run on event time",
        "",
        "",
    ),
    Function::new("RAND", ANY, "refused", random).doc(
        "a random number: refused, as a replay would draw others (with a seed too: the \
         generator's position is not checkpointed)",
        "",
        "",
    ),
    Function::new("RAND_INTEGER", ANY, "refused", random).doc(
        "a random integer: refused, as RAND",
        "",
        "",
    ),
    Function::new("UUID", ANY, "refused", random).doc(
        "a random UUID: refused, as RAND; a key made of the row's own columns (MD5 of them) \
         is the same on replay",
        "",
        "",
    ),
];

fn wall_clock(call: &Call, _: Vec<Compiled>) -> Result<Compiled, String> {
    let name = call.name;
    Err(format!(
        "{name} is not deterministic: it reads the wall clock, so a replay after a crash \
         would compute other values, and exactly-once output needs the same ones; use the \
         row's event-time column or CURRENT_WATERMARK"
    ))
}

fn random(call: &Call, _: Vec<Compiled>) -> Result<Compiled, String> {
    let name = call.name;
    Err(format!(
        "{name} is not deterministic: a replay after a crash would draw other values, and \
         exactly-once output needs the same ones"
    ))
}
