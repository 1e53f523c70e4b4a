//! User-defined functions: scalar, table and aggregate functions a job
//! adds to the SQL it runs, written in Rust (registered here, by a binary
//! that runs weir with [`crate::main_with_functions`]) or, scalar and
//! table functions, as WebAssembly modules named in the configuration
//! (`[functions.NAME] wasm = "udfs.wasm"`, [`wasm`]).
//!
//! A function is called when the job is planned to check its arguments
//! (their count and types, with the implicit casts of the built-in
//! functions) and on each row with their values. NULL in is NULL out, as
//! for SQL's built-in functions: the function never sees a NULL. A row a
//! scalar or table function fails on (an error, a panic, a WebAssembly
//! trap or fuel run out) follows its source's `on_bad_record`
//! (`sql::plan::on_failure`); an aggregate's failure stops the job, as
//! an overflow of SUM does. Neither loops through restarts.
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

/// How every failure of a user-defined function begins: what tells it
/// from a built-in expression's (`sql::plan::on_failure`).
pub const FAILURE: &str = "user-defined function ";

/// Whether an expression's error is a user-defined function's failure.
pub fn is_failure(message: &str) -> bool {
    message.starts_with(FAILURE)
}

/// An aggregate function's step: the accumulator and one row's argument
/// values (none NULL) in, the new accumulator out.
pub type AccumulateBody = dyn Fn(Value, &[Value]) -> Result<Value, String> + Send + Sync;

/// An aggregate function's merge: two accumulators in, one out.
pub type MergeBody = dyn Fn(Value, &Value) -> Result<Value, String> + Send + Sync;

/// An aggregate function's result of an accumulator.
pub type ResultBody = dyn Fn(&Value) -> Result<Value, String> + Send + Sync;

/// An aggregate function written in Rust: `GROUP BY` and window
/// aggregates call it as they call SUM. Its accumulator is a weir
/// [`Value`] (a number, a ROW as [`Value::Struct`], a list, ...): weir
/// keeps it in the aggregate's RocksDB state, checkpoints it and restores
/// it after a crash, so it must hold everything the function needs.
///
/// `accumulate` adds a row; `retract` (if given) takes one back, which an
/// aggregate over an updating result needs (without it such a query is
/// refused); `merge` (if given) adds another accumulator's rows, which
/// SESSION windows need when two sessions meet. Rows whose argument is
/// NULL are skipped, and a group without any row is NULL, as for SQL's
/// aggregates.
#[derive(Clone)]
pub struct AggregateFunction {
    pub name: String,
    pub params: Vec<DataType>,
    pub returns: DataType,
    pub create: Arc<dyn Fn() -> Value + Send + Sync>,
    pub accumulate: Arc<AccumulateBody>,
    pub retract: Option<Arc<AccumulateBody>>,
    pub merge: Option<Arc<MergeBody>>,
    pub result: Arc<ResultBody>,
}

impl AggregateFunction {
    /// `name(param) → returns` with the accumulator `create` makes, the
    /// step that adds a row and the result of an accumulator.
    pub fn new(
        name: &str,
        param: DataType,
        returns: DataType,
        create: impl Fn() -> Value + Send + Sync + 'static,
        accumulate: impl Fn(Value, &[Value]) -> Result<Value, String> + Send + Sync + 'static,
        result: impl Fn(&Value) -> Result<Value, String> + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.to_ascii_uppercase(),
            params: vec![param],
            returns,
            create: Arc::new(create),
            accumulate: Arc::new(accumulate),
            retract: None,
            merge: None,
            result: Arc::new(result),
        }
    }

    /// The step that takes a row back (for updating inputs).
    pub fn with_retract(
        mut self,
        retract: impl Fn(Value, &[Value]) -> Result<Value, String> + Send + Sync + 'static,
    ) -> Self {
        self.retract = Some(Arc::new(retract));
        self
    }

    /// How two accumulators become one (for SESSION windows).
    pub fn with_merge(
        mut self,
        merge: impl Fn(Value, &Value) -> Result<Value, String> + Send + Sync + 'static,
    ) -> Self {
        self.merge = Some(Arc::new(merge));
        self
    }

    /// Adds (or takes back) one row's argument values, a panic caught.
    pub fn step(&self, acc: Value, args: &[Value], retract: bool) -> Result<Value, String> {
        let acc = if acc.is_null() { (self.create)() } else { acc };
        match (retract, &self.retract) {
            (false, _) => guarded(&self.name, || (self.accumulate)(acc, args)),
            (true, Some(r)) => guarded(&self.name, || r(acc, args)),
            (true, None) => Err(format!(
                "{FAILURE}{} cannot take a row back (it has no retract step)",
                self.name
            )),
        }
    }

    /// `a` and `b` as one accumulator, a panic caught.
    pub fn merge_accumulators(&self, a: Value, b: &Value) -> Result<Value, String> {
        match &self.merge {
            Some(m) => guarded(&self.name, || m(a, b)),
            None => Err(format!(
                "{FAILURE}{} cannot merge two accumulators (it has no merge step; SESSION \
                 windows need one)",
                self.name
            )),
        }
    }

    /// The aggregate's value for an accumulator, a panic caught.
    pub fn value(&self, acc: &Value) -> Result<Value, String> {
        guarded(&self.name, || (self.result)(acc))
    }
}

/// `f()`, with a panic turned into an error that names the function.
fn guarded<T>(name: &str, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r.map_err(|e| format!("{FAILURE}{name}: {e}")),
        Err(panic) => {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Err(format!("{FAILURE}{name} panicked: {why}"))
        }
    }
}

/// The user-defined functions a job's SQL may call, by upper-case name.
#[derive(Clone, Default)]
pub struct Functions {
    scalars: BTreeMap<String, ScalarFunction>,
    tables: BTreeMap<String, TableFunction>,
    aggregates: BTreeMap<String, AggregateFunction>,
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

    /// Adds an aggregate function (replacing one of the same name).
    pub fn aggregate(mut self, f: AggregateFunction) -> Self {
        self.aggregates.insert(f.name.clone(), f);
        self
    }

    pub fn get_aggregate(&self, name: &str) -> Option<&AggregateFunction> {
        self.aggregates.get(&name.to_ascii_uppercase())
    }

    /// The aggregate functions' names (upper case).
    pub fn aggregate_names(&self) -> impl Iterator<Item = &str> {
        self.aggregates.keys().map(String::as_str)
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
            .chain(self.aggregates.keys())
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
        for (name, f) in other.aggregates {
            if self.names().any(|n| n == name) {
                return Err(format!("the function {name} is defined twice"));
            }
            self.aggregates.insert(name, f);
        }
        Ok(self)
    }

    pub fn is_empty(&self) -> bool {
        self.scalars.is_empty() && self.tables.is_empty() && self.aggregates.is_empty()
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

/// The names (upper case) of the registered aggregate functions, read in
/// place: the planner asks for each call it compiles.
pub fn registered_aggregate_names() -> impl Iterator<Item = &'static str> {
    REGISTERED
        .get()
        .into_iter()
        .flat_map(Functions::aggregate_names)
}

/// The registered functions (none unless [`register`] was called).
pub fn registered() -> Functions {
    REGISTERED.get().cloned().unwrap_or_default()
}
