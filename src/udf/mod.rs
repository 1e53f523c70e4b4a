//! User-defined functions: scalar and table functions a job adds to the
//! SQL it runs, written in Rust (registered here, by a binary that runs
//! weir with [`crate::main_with_functions`]) or as WebAssembly modules
//! named in the configuration (`[functions.NAME] wasm = "udfs.wasm"`,
//! [`wasm`]).
//!
//! A function is called when the job is planned to check its arguments
//! (their count and types, with the implicit casts of the built-in
//! functions) and on each row with their values. NULL in is NULL out, as
//! for SQL's built-in functions: the function never sees a NULL. A
//! function that fails, panics or (WebAssembly) traps or runs out of fuel
//! makes the expression's value NULL for that row, counted and logged as
//! every failed expression is (`weir_expression_errors_total`): one bad
//! value never stops the job, and a restart would not fail again and
//! again on the same record.
//!
//! A user-defined function must be deterministic: the same arguments give
//! the same result. weir replays records after a crash and its
//! exactly-once output relies on computing the same values again.

pub mod wasm;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::dataflow::row::{DataType, Value};

/// A scalar function's body: the arguments' values (none NULL) in, the
/// result or why there is none out.
pub type ScalarBody = dyn Fn(&[Value]) -> Result<Value, String> + Send + Sync;

/// A table function's body: the arguments' values in, the rows (each with
/// the function's columns) out.
pub type TableBody = dyn Fn(&[Value]) -> Result<Vec<Vec<Value>>, String> + Send + Sync;

/// A scalar function: one value per call.
#[derive(Clone)]
pub struct ScalarFunction {
    pub name: String,
    pub params: Vec<DataType>,
    pub returns: DataType,
    pub body: Arc<ScalarBody>,
}

impl ScalarFunction {
    /// `name(params) → returns`, computed by `body`.
    pub fn new(
        name: &str,
        params: &[DataType],
        returns: DataType,
        body: impl Fn(&[Value]) -> Result<Value, String> + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.to_ascii_uppercase(),
            params: params.to_vec(),
            returns,
            body: Arc::new(body),
        }
    }

    /// One call, a panic caught as an error.
    pub fn call(&self, args: &[Value]) -> Result<Value, String> {
        guarded(&self.name, || (self.body)(args))
    }
}

/// A table function: rows per call, `LATERAL TABLE(f(x))` in SQL.
#[derive(Clone)]
pub struct TableFunction {
    pub name: String,
    pub params: Vec<DataType>,
    /// The columns of its rows.
    pub columns: Vec<(String, DataType)>,
    pub body: Arc<TableBody>,
}

impl TableFunction {
    pub fn new(
        name: &str,
        params: &[DataType],
        columns: &[(&str, DataType)],
        body: impl Fn(&[Value]) -> Result<Vec<Vec<Value>>, String> + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.to_ascii_uppercase(),
            params: params.to_vec(),
            columns: columns
                .iter()
                .map(|(n, t)| (n.to_string(), t.clone()))
                .collect(),
            body: Arc::new(body),
        }
    }

    /// One call, a panic caught as an error.
    pub fn call(&self, args: &[Value]) -> Result<Vec<Vec<Value>>, String> {
        guarded(&self.name, || (self.body)(args))
    }
}

/// `f()`, with a panic turned into an error that names the function.
fn guarded<T>(name: &str, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r.map_err(|e| format!("{name}: {e}")),
        Err(panic) => {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Err(format!("{name} panicked: {why}"))
        }
    }
}

/// The user-defined functions a job's SQL may call, by upper-case name.
#[derive(Clone, Default)]
pub struct Functions {
    scalars: BTreeMap<String, ScalarFunction>,
    tables: BTreeMap<String, TableFunction>,
}

impl Functions {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a scalar function (replacing one of the same name).
    pub fn scalar(mut self, f: ScalarFunction) -> Self {
        self.scalars.insert(f.name.clone(), f);
        self
    }

    /// Adds a table function (replacing one of the same name).
    pub fn table(mut self, f: TableFunction) -> Self {
        self.tables.insert(f.name.clone(), f);
        self
    }

    pub fn get_scalar(&self, name: &str) -> Option<&ScalarFunction> {
        self.scalars.get(&name.to_ascii_uppercase())
    }

    pub fn get_table(&self, name: &str) -> Option<&TableFunction> {
        self.tables.get(&name.to_ascii_uppercase())
    }

    /// Every name, for the hint an unknown function gets.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.scalars
            .keys()
            .chain(self.tables.keys())
            .map(String::as_str)
    }

    /// `other`'s functions added to these; Err names one defined twice.
    pub fn merge(mut self, other: Functions) -> Result<Self, String> {
        for (name, f) in other.scalars {
            if self.scalars.contains_key(&name) || self.tables.contains_key(&name) {
                return Err(format!("the function {name} is defined twice"));
            }
            self.scalars.insert(name, f);
        }
        for (name, f) in other.tables {
            if self.scalars.contains_key(&name) || self.tables.contains_key(&name) {
                return Err(format!("the function {name} is defined twice"));
            }
            self.tables.insert(name, f);
        }
        Ok(self)
    }

    pub fn is_empty(&self) -> bool {
        self.scalars.is_empty() && self.tables.is_empty()
    }
}

impl std::fmt::Debug for Functions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

/// The functions the binary registered, for every job it plans.
static REGISTERED: std::sync::OnceLock<Functions> = std::sync::OnceLock::new();

/// Registers `functions` for every SQL job this process plans: a binary
/// that embeds weir calls it (through [`crate::main_with_functions`])
/// before it plans a job. Err if functions were registered already.
pub fn register(functions: Functions) -> Result<(), String> {
    REGISTERED
        .set(functions)
        .map_err(|_| "user-defined functions are registered once, at start".to_string())
}

/// The registered functions (none unless [`register`] was called).
pub fn registered() -> Functions {
    REGISTERED.get().cloned().unwrap_or_default()
}
