//! One function as the registry lists it: its name, parameters, result,
//! what it does, an example, and the implementation that builds a call.
//! Each family's module lists its functions with these; the registry
//! (`super::registry`) gathers the families.

use super::super::compiled::Compiled;
use super::signature::{show, Param};

/// Builds a call from its checked arguments.
pub type Build = fn(&Call, Vec<Compiled>) -> Result<Compiled, String>;

/// What a call's implementation knows besides its arguments.
pub struct Call<'a> {
    /// The name it was called by (a function may have several).
    pub name: &'a str,
    /// The session time zone: where a function that reads or writes a
    /// wall-clock time of an instant (FROM_UNIXTIME, TO_TIMESTAMP_LTZ's
    /// text, UNIX_TIMESTAMP) reads or writes it.
    pub zone: &'a jiff::tz::TimeZone,
}

/// One form of one function.
#[derive(Debug)]
pub struct Function {
    pub name: &'static str,
    pub params: &'static [Param],
    /// The result's type, as the docs show it.
    pub returns: &'static str,
    pub summary: &'static str,
    /// A call, and what it gives, as SQL literals.
    pub example: (&'static str, &'static str),
    pub build: Build,
    /// How a call is written, where that is not `NAME(params)` (a form the
    /// dialect parses into this call: `s IS JSON`, `JSON_OBJECT(KEY k VALUE
    /// v)`); the docs show it instead of the parameters.
    pub written: Option<&'static str>,
}

impl Function {
    pub const fn new(
        name: &'static str,
        params: &'static [Param],
        returns: &'static str,
        build: Build,
    ) -> Self {
        Self {
            name,
            params,
            returns,
            summary: "",
            example: ("", ""),
            build,
            written: None,
        }
    }

    /// How a call is written, for a form the dialect parses into this one.
    pub const fn written(self, syntax: &'static str) -> Self {
        Self {
            written: Some(syntax),
            ..self
        }
    }

    /// What the function does, and an example call with its result.
    pub const fn doc(
        self,
        summary: &'static str,
        example: &'static str,
        result: &'static str,
    ) -> Self {
        Self {
            summary,
            example: (example, result),
            ..self
        }
    }

    /// `LPAD(s VARCHAR, len INT, pad VARCHAR) → VARCHAR`.
    pub fn signature(&self) -> String {
        match self.written {
            Some(w) => format!("{w} → {}", self.returns),
            None => format!("{} → {}", show(self.name, self.params), self.returns),
        }
    }
}
