//! The `weir` binary: its `main` is the library's ([`weir::cli::binary`]).

fn main() -> std::process::ExitCode {
    weir::cli::binary::main()
}
