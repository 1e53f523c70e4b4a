//! `weir-bench udf`: what one call of a user-defined scalar function
//! costs, Nexmark q14's `count_char(extra, 'c')` on q14's strings, by
//! weir's path from SQL values to the result: native Rust (the floor),
//! a Rust UDF (`weir::udf::ScalarFunction::call`, with its panic guard),
//! and the WebAssembly UDF of tests/udf/udfs.wat (text copied into the
//! module's memory, fuel set, the call, the result read). Rounds are
//! interleaved; the figures are the medians over rounds, with the range.

use std::path::Path;
use std::time::Instant;

use weir::dataflow::row::{DataType, Value};
use weir::udf::wasm::{self, Declared, Returns, WasmSpec};
use weir::udf::ScalarFunction;
use weir_testkit::Rng;

fn count_char(args: &[Value]) -> Result<Value, String> {
    let (Some(s), Some(c)) = (args[0].as_str(), args[1].as_str()) else {
        return Err("two strings".into());
    };
    let want = c.chars().next();
    Ok(Value::Int(
        s.chars().filter(|x| Some(*x) == want).count() as i64
    ))
}

/// Nanoseconds per call of `f` over `rows`, `calls` calls.
fn per_call(
    calls: usize,
    rows: &[[Value; 2]],
    f: &dyn Fn(&[Value]) -> Result<Value, String>,
) -> f64 {
    let start = Instant::now();
    let mut total = 0i64;
    for i in 0..calls {
        if let Ok(Value::Int(n)) = f(&rows[i % rows.len()]) {
            total += n;
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / calls as f64;
    std::hint::black_box(total);
    ns
}

fn median_range(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

pub fn run(calls: usize, rounds: usize) {
    // q14's `extra`: 2 to 5 letters in Nexmark's generator here; Flink's
    // Nexmark pads it further, so longer strings too.
    let mut rng = Rng::new(42);
    let rows: Vec<[Value; 2]> = (0..1024)
        .map(|i| {
            let len = if i % 2 == 0 {
                2 + rng.below(4)
            } else {
                20 + rng.below(20)
            };
            let s: String = (0..len)
                .map(|_| (b'a' + rng.below(26) as u8) as char)
                .collect();
            [Value::String(s), Value::from("c")]
        })
        .collect();
    let rust = ScalarFunction::new(
        "count_char",
        &[DataType::String, DataType::String],
        DataType::BigInt,
        count_char,
    );
    let wat = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/udf/udfs.wat");
    let Declared::Scalar(wasm) = wasm::function(
        WasmSpec {
            name: "count_char".into(),
            file: wat,
            export: "count_char".into(),
            params: vec![DataType::String, DataType::String],
            returns: Returns::Scalar(DataType::BigInt),
            fuel: wasm::DEFAULT_FUEL,
        },
        Path::new("."),
    )
    .expect("tests/udf/udfs.wat compiles") else {
        panic!("count_char is a scalar function");
    };
    // Both agree before they are timed.
    for r in &rows {
        assert_eq!(wasm.call(r), count_char(r), "{r:?}");
    }
    let mut native = Vec::new();
    let mut guarded = Vec::new();
    let mut webassembly = Vec::new();
    for _ in 0..rounds {
        native.push(per_call(calls, &rows, &count_char));
        guarded.push(per_call(calls, &rows, &|a| rust.call(a)));
        webassembly.push(per_call(calls, &rows, &|a| wasm.call(a)));
    }
    println!(
        "count_char(extra, 'c'): {calls} calls per round, {rounds} interleaved rounds, ns per call"
    );
    println!("| path | median | range |");
    println!("|---|---|---|");
    for (name, v) in [
        ("native Rust", native),
        ("Rust UDF (weir::udf)", guarded),
        ("WebAssembly UDF (wasmtime, fuel per call)", webassembly),
    ] {
        let (m, lo, hi) = median_range(v);
        println!("| {name} | {m:.1} | {lo:.1}–{hi:.1} |");
    }
}
