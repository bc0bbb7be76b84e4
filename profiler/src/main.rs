//! The `fsprof` command: parses arguments, dispatches to the library, and turns errors into a
//! one-line message and an exit code. Nothing else lives here.

use fsprof::cli::{Cli, Command};
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    // Before anything else: a copy of fsprof holding privilege its user lacks becomes that user,
    // keeping only what the perf backend needs, and that only if it may be used.
    if let Err(error) = fsprof::record::privilege::settle() {
        eprintln!("fsprof: error: {error}");
        return ExitCode::FAILURE;
    }
    let command = Cli::parse_command();
    let perf_wanted = match &command {
        Command::Run { options, .. } | Command::Attach { options, .. } => options.may_use_perf(),
        _ => false,
    };
    if !perf_wanted {
        fsprof::record::privilege::drop_all();
    }
    let result = match command {
        Command::Run { program, options } => {
            fsprof::record::session::run(&program, &options).map(|code| code as u8)
        }
        Command::Attach { pid, options } => {
            fsprof::record::session::attach(pid, &options).map(|()| 0)
        }
        Command::Report { path, options } => {
            fsprof::report(&path, &options).and_then(|text| print(&text))
        }
        Command::Agent => fsprof::record::agent::library()
            .and_then(|path| print(&format!("{}\n", path.display()))),
        Command::Print(text) => print(&text),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            // Errors can quote a file's or a process's contents: print them safely.
            let chain: Vec<String> = error
                .chain()
                .map(|e| fsprof::target::names::clean(&e.to_string()))
                .collect();
            eprintln!("fsprof: error: {}", chain.join(": "));
            ExitCode::FAILURE
        }
    }
}

/// Writes `text` to stdout; a closed pipe (`| head`) is not an error.
fn print(text: &str) -> anyhow::Result<u8> {
    match std::io::stdout().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        other => other.map(|()| 0).map_err(Into::into),
    }
}
