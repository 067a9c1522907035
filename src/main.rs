//! Parse, run, turn the outcome into an exit code; nothing else (`cli::main`).

fn main() -> std::process::ExitCode {
    ingest::cli::main()
}
