fn main() -> std::process::ExitCode {
    wasmlet::cli::main()
}
