//! User-defined functions as WebAssembly modules, run by `wasmtime` in a
//! sandbox: a module sees only its own memory, imports nothing, and each
//! call has a fuel budget (instructions, roughly), so a function that
//! loops forever traps instead of stopping its task. Fuel, unlike a wall
//! clock deadline, does not fail a call because the machine was busy.
//!
//! # The calling convention
//!
//! The module exports its `memory`, `weir_alloc(size: i32) -> i32` (the
//! address of at least `size` bytes weir may write the arguments' text
//! into, weir's until the next `weir_alloc`), and the function. Its
//! parameters follow the declared SQL types, in order:
//!
//! | SQL | wasm |
//! |---|---|
//! | VARCHAR, BYTES | two `i32`: address and length of the UTF-8 bytes |
//! | INT, BIGINT | `i64` |
//! | DOUBLE | `f64` |
//! | BOOLEAN | `i32`, 0 or 1 |
//!
//! A scalar function returns `i64` for INT and BIGINT, `f64` for DOUBLE,
//! `i32` for BOOLEAN, and for VARCHAR an `i64`: the address in the high
//! 32 bits and the length in the low ones, or -1 for NULL. A table
//! function returns such an `i64` for its rows, one after another, each
//! column a NULL byte (1: NULL, 0: a value follows) and its value: INT and
//! BIGINT 8 bytes, DOUBLE 8 bytes (both little-endian), BOOLEAN 1 byte,
//! VARCHAR a 4-byte little-endian length and the bytes.
//!
//! Each task thread has its own instance of each module: a call never
//! waits on another thread. An instance that trapped is dropped and the
//! next call makes a new one, as its memory may be half-written.

use std::cell::RefCell;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use wasmtime::{Engine, Func, Instance, Memory, Module, Store, TypedFunc, Val, ValRaw, ValType};

use super::{ScalarFunction, TableFunction};
use crate::dataflow::row::{DataType, Value};

/// The fuel a call gets unless the configuration says otherwise: about
/// ten million instructions, some milliseconds.
pub const DEFAULT_FUEL: u64 = 10_000_000;

/// One engine per process: it holds the compiler and its settings.
fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut config = wasmtime::Config::new();
        config.consume_fuel(true);
        config.wasm_backtrace_max_frames(None);
        Engine::new(&config).expect("a wasmtime engine with fuel")
    })
}

/// What a WebAssembly function is, as the configuration declares it.
#[derive(Debug, Clone)]
pub struct WasmSpec {
    /// The SQL name.
    pub name: String,
    /// The module's file (`.wasm`, or `.wat` text).
    pub file: std::path::PathBuf,
    /// The export to call.
    pub export: String,
    pub params: Vec<DataType>,
    /// A scalar function's result type, or a table function's columns.
    pub returns: Returns,
    pub fuel: u64,
}

#[derive(Debug, Clone)]
pub enum Returns {
    Scalar(DataType),
    Table(Vec<(String, DataType)>),
}

/// A compiled module and the function in it.
struct Loaded {
    /// Tells the instances of this function's module apart in a thread's
    /// cache.
    id: u64,
    module: Module,
    spec: WasmSpec,
    /// The wasm type of the export's one result (checked at load).
    result: ValType,
}

/// The wasm value types a SQL type's argument takes.
fn wasm_params(t: &DataType) -> Result<&'static [ValType], String> {
    Ok(match t {
        DataType::String | DataType::Bytes => &[ValType::I32, ValType::I32],
        DataType::Int | DataType::BigInt => &[ValType::I64],
        DataType::Double => &[ValType::F64],
        DataType::Boolean => &[ValType::I32],
        other => return Err(format!("a WebAssembly function cannot take {other}")),
    })
}

fn wasm_result(r: &Returns) -> Result<ValType, String> {
    Ok(match r {
        Returns::Table(_) => ValType::I64,
        Returns::Scalar(DataType::String | DataType::Bytes) => ValType::I64,
        Returns::Scalar(DataType::Int | DataType::BigInt) => ValType::I64,
        Returns::Scalar(DataType::Double) => ValType::F64,
        Returns::Scalar(DataType::Boolean) => ValType::I32,
        Returns::Scalar(other) => {
            return Err(format!("a WebAssembly function cannot return {other}"))
        }
    })
}

fn show(types: impl Iterator<Item = ValType>) -> String {
    let names: Vec<String> = types.map(|t| t.to_string()).collect();
    format!("({})", names.join(", "))
}

/// Compiles `spec`'s module and checks that it exports what the
/// declaration says, with the calling convention's types.
fn load(spec: WasmSpec) -> Result<Arc<Loaded>, String> {
    static IDS: AtomicU64 = AtomicU64::new(1);
    let module = Module::from_file(engine(), &spec.file)
        .map_err(|e| format!("{}: {e:#}", spec.file.display()))?;
    let mut want_params = Vec::new();
    for t in &spec.params {
        want_params.extend_from_slice(wasm_params(t)?);
    }
    let want_result = wasm_result(&spec.returns)?;
    let export = |name: &str| {
        module
            .get_export(name)
            .and_then(|e| e.func().cloned())
            .ok_or_else(|| {
                format!(
                    "{} exports no function {name} (the calling convention is in \
                     docs/sql.md, user-defined functions)",
                    spec.file.display()
                )
            })
    };
    let f = export(&spec.export)?;
    let have_params: Vec<ValType> = f.params().collect();
    let have_results: Vec<ValType> = f.results().collect();
    let same = |a: &[ValType], b: &[ValType]| {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| ValType::eq(x, y))
    };
    if !same(&have_params, &want_params) || !same(&have_results, std::slice::from_ref(&want_result))
    {
        return Err(format!(
            "{}'s {} is {} -> {}, but the declared types need {} -> ({want_result})",
            spec.file.display(),
            spec.export,
            show(have_params.into_iter()),
            show(have_results.into_iter()),
            show(want_params.into_iter()),
        ));
    }
    let alloc = export("weir_alloc")?;
    if !same(&alloc.params().collect::<Vec<_>>(), &[ValType::I32])
        || !same(&alloc.results().collect::<Vec<_>>(), &[ValType::I32])
    {
        return Err(format!(
            "{}'s weir_alloc must be (i32) -> (i32)",
            spec.file.display()
        ));
    }
    if module
        .get_export("memory")
        .and_then(|e| e.memory().cloned())
        .is_none()
    {
        return Err(format!("{} exports no memory", spec.file.display()));
    }
    Ok(Arc::new(Loaded {
        id: IDS.fetch_add(1, Ordering::Relaxed),
        module,
        spec,
        result: want_result,
    }))
}

/// A thread's instance of one function's module.
struct Live {
    store: Store<()>,
    func: Func,
    memory: Memory,
    alloc: TypedFunc<i32, i32>,
    /// Where the arguments' text goes, and how much room it has.
    buffer: i32,
    room: usize,
    /// The call's arguments, then its result, as wasmtime's raw values.
    raw: Vec<ValRaw>,
}

impl Live {
    fn new(f: &Loaded) -> Result<Self, String> {
        let mut store = Store::new(engine(), ());
        store
            .set_fuel(f.spec.fuel)
            .map_err(|e| format!("fuel: {e}"))?;
        let instance = Instance::new(&mut store, &f.module, &[])
            .map_err(|e| format!("{}: {e:#}", f.spec.file.display()))?;
        let func = instance
            .get_func(&mut store, &f.spec.export)
            .ok_or("the export is gone")?;
        let memory = instance
            .get_memory(&mut store, "memory")
            .ok_or("the memory is gone")?;
        let alloc = instance
            .get_typed_func::<i32, i32>(&mut store, "weir_alloc")
            .map_err(|e| e.to_string())?;
        Ok(Self {
            store,
            func,
            memory,
            alloc,
            buffer: 0,
            room: 0,
            raw: Vec::new(),
        })
    }

    /// Calls the function on `args`; Err says why there is no result.
    fn call(&mut self, f: &Loaded, args: &[Value]) -> Result<Val, String> {
        let text: usize = args
            .iter()
            .map(|a| match a {
                Value::String(s) => s.len(),
                Value::Bytes(b) => b.len(),
                _ => 0,
            })
            .sum();
        if text > self.room {
            self.store
                .set_fuel(f.spec.fuel)
                .map_err(|e| e.to_string())?;
            let size = i32::try_from(text).map_err(|_| "arguments over 2 GiB")?;
            self.buffer = self
                .alloc
                .call(&mut self.store, size)
                .map_err(|e| trap_message(&e, f))?;
            self.room = text;
        }
        self.raw.clear();
        let mut at = self.buffer as usize;
        for (a, t) in args.iter().zip(&f.spec.params) {
            match (t, a) {
                (DataType::String, Value::String(_)) | (DataType::Bytes, Value::Bytes(_)) => {
                    let bytes = match a {
                        Value::String(s) => s.as_bytes(),
                        Value::Bytes(b) => b.as_slice(),
                        _ => unreachable!("text only"),
                    };
                    self.memory
                        .data_mut(&mut self.store)
                        .get_mut(at..at + bytes.len())
                        .ok_or("weir_alloc's buffer is outside the memory")?
                        .copy_from_slice(bytes);
                    self.raw.push(ValRaw::i32(at as i32));
                    self.raw.push(ValRaw::i32(bytes.len() as i32));
                    at += bytes.len();
                }
                (DataType::Int | DataType::BigInt, Value::Int(i)) => self.raw.push(ValRaw::i64(*i)),
                (DataType::Double, Value::Double(d)) => self.raw.push(ValRaw::f64(d.to_bits())),
                (DataType::Boolean, Value::Bool(b)) => self.raw.push(ValRaw::i32(i32::from(*b))),
                (t, other) => return Err(format!("no WebAssembly argument {t} for {other:?}")),
            }
        }
        if args.len() != f.spec.params.len() {
            return Err(format!(
                "{} arguments for {} parameters",
                args.len(),
                f.spec.params.len()
            ));
        }
        if self.raw.is_empty() {
            // Room for the result.
            self.raw.push(ValRaw::i64(0));
        }
        self.store
            .set_fuel(f.spec.fuel)
            .map_err(|e| e.to_string())?;
        // SAFETY: `load` checked that the export takes exactly the wasm
        // types the declared parameters map to and returns one value of
        // the declared result's; the loop above wrote one raw value of
        // that type per parameter (a value of another type is refused),
        // and `raw` has room for the result. No reference types are
        // involved. The typed path (`Func::call`) checks the same per
        // call and cost about 300 ns more per call (weir-bench udf).
        unsafe {
            self.func
                .call_unchecked(&mut self.store, self.raw.as_mut_slice() as *mut [ValRaw])
        }
        .map_err(|e| trap_message(&e, f))?;
        let result = self.raw[0];
        Ok(match f.result {
            ValType::I32 => Val::I32(result.get_i32()),
            ValType::F64 => Val::F64(result.get_f64()),
            _ => Val::I64(result.get_i64()),
        })
    }

    /// The `len` bytes at `at` in the instance's memory.
    fn bytes(&self, packed: i64) -> Result<Option<&[u8]>, String> {
        if packed == -1 {
            return Ok(None);
        }
        let (at, len) = (
            (packed as u64 >> 32) as usize,
            (packed as u64 & 0xFFFF_FFFF) as usize,
        );
        self.memory
            .data(&self.store)
            .get(at..at + len)
            .map(Some)
            .ok_or_else(|| {
                format!(
                    "the result's bytes {at}..{} are outside the memory",
                    at + len
                )
            })
    }
}

fn trap_message(e: &wasmtime::Error, f: &Loaded) -> String {
    match e.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::OutOfFuel) => format!(
            "ran out of fuel ({} per call): it may loop forever; raise \
             [functions.{}] fuel if it needs more",
            f.spec.fuel,
            f.spec.name.to_ascii_lowercase()
        ),
        Some(trap) => format!("trapped: {trap}"),
        None => format!("failed: {e:#}"),
    }
}

thread_local! {
    /// This thread's instances, by function id (ids are small and dense).
    static LIVE: RefCell<Vec<Option<Live>>> = const { RefCell::new(Vec::new()) };
}

/// Runs `with` on this thread's instance of `f` (made on first use, and
/// again after a trap).
fn on_instance<T>(
    f: &Loaded,
    args: &[Value],
    with: impl FnOnce(&Live, Val) -> Result<T, String>,
) -> Result<T, String> {
    LIVE.with(|live| {
        let mut live = live.borrow_mut();
        let slot = f.id as usize;
        if live.len() <= slot {
            live.resize_with(slot + 1, || None);
        }
        if live[slot].is_none() {
            live[slot] = Some(Live::new(f)?);
        }
        let instance = live[slot].as_mut().expect("made above");
        match instance.call(f, args) {
            Ok(v) => with(instance, v),
            Err(e) => {
                live[slot] = None;
                Err(e)
            }
        }
    })
}

fn scalar_value(live: &Live, v: Val, t: &DataType) -> Result<Value, String> {
    Ok(match (t, v) {
        (DataType::Int | DataType::BigInt, Val::I64(i)) => Value::Int(i),
        (DataType::Double, Val::F64(bits)) => Value::Double(f64::from_bits(bits)),
        (DataType::Boolean, Val::I32(b)) => Value::Bool(b != 0),
        (DataType::String, Val::I64(p)) => match live.bytes(p)? {
            None => Value::Null,
            Some(b) => Value::String(
                std::str::from_utf8(b)
                    .map_err(|_| "its VARCHAR result is not UTF-8")?
                    .to_string(),
            ),
        },
        (DataType::Bytes, Val::I64(p)) => match live.bytes(p)? {
            None => Value::Null,
            Some(b) => Value::Bytes(b.to_vec()),
        },
        (t, v) => return Err(format!("returned {v:?} for {t}")),
    })
}

/// Reads a table function's rows from the calling convention's bytes.
fn table_rows(bytes: &[u8], columns: &[(String, DataType)]) -> Result<Vec<Vec<Value>>, String> {
    let bad = || "its rows end in the middle of a value".to_string();
    let mut rows = Vec::new();
    let mut rest = bytes;
    let take = |n: usize, rest: &mut &[u8]| -> Result<Vec<u8>, String> {
        let (a, b) = rest.split_at_checked(n).ok_or_else(bad)?;
        *rest = b;
        Ok(a.to_vec())
    };
    while !rest.is_empty() {
        let mut row = Vec::with_capacity(columns.len());
        for (name, t) in columns {
            if take(1, &mut rest)?[0] == 1 {
                row.push(Value::Null);
                continue;
            }
            let eight = |b: Vec<u8>| <[u8; 8]>::try_from(b).expect("8 bytes");
            row.push(match t {
                DataType::Int | DataType::BigInt => {
                    Value::Int(i64::from_le_bytes(eight(take(8, &mut rest)?)))
                }
                DataType::Double => Value::Double(f64::from_le_bytes(eight(take(8, &mut rest)?))),
                DataType::Boolean => Value::Bool(take(1, &mut rest)?[0] != 0),
                DataType::String => {
                    let n = u32::from_le_bytes(take(4, &mut rest)?.try_into().expect("4 bytes"));
                    let b = take(n as usize, &mut rest)?;
                    Value::String(
                        String::from_utf8(b)
                            .map_err(|_| format!("its column {name} is not UTF-8"))?,
                    )
                }
                other => return Err(format!("a table function cannot return {other}")),
            });
        }
        rows.push(row);
    }
    Ok(rows)
}

/// The function `spec` declares, as a scalar or a table function.
pub enum Declared {
    Scalar(ScalarFunction),
    Table(TableFunction),
}

/// Compiles `spec`'s module (relative paths from `base`) and makes its
/// function; Err says what is wrong with the module or the declaration.
pub fn function(mut spec: WasmSpec, base: &Path) -> Result<Declared, String> {
    if spec.file.is_relative() {
        spec.file = base.join(&spec.file);
    }
    let loaded = load(spec)?;
    let params = loaded.spec.params.clone();
    let name = loaded.spec.name.clone();
    Ok(match loaded.spec.returns.clone() {
        Returns::Scalar(t) => {
            let l = loaded.clone();
            let returns = t.clone();
            Declared::Scalar(ScalarFunction::new(&name, &params, t, move |args| {
                on_instance(&l, args, |live, v| scalar_value(live, v, &returns))
            }))
        }
        Returns::Table(columns) => {
            let l = loaded.clone();
            let cols = columns.clone();
            let named: Vec<(&str, DataType)> = columns
                .iter()
                .map(|(n, t)| (n.as_str(), t.clone()))
                .collect();
            Declared::Table(TableFunction::new(&name, &params, &named, move |args| {
                on_instance(&l, args, |live, v| match v {
                    Val::I64(p) => table_rows(live.bytes(p)?.unwrap_or(&[]), &cols),
                    other => Err(format!("returned {other:?} for its rows")),
                })
            }))
        }
    })
}
