//! The `fsprof` command: parses arguments, dispatches to the library, and turns errors into a
//! one-line message and an exit code. Nothing else lives here.

use fsprof::cli::{Cli, Command};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    fsprof::native::tracer::block_sigchld_from_start();
    // Before anything else: a copy of fsprof holding privilege its user lacks becomes that user,
    // keeping only what the perf backend needs, and that only if it may be used.
    if let Err(error) = fsprof::os::privilege::settle() {
        let _ = writeln!(std::io::stderr(), "fsprof: error: {error}");
        return ExitCode::FAILURE;
    }
    let command = Cli::parse_command();
    let perf_wanted = match &command {
        Command::Run { options, .. } | Command::Attach { options, .. } => options.may_use_perf(),
        _ => false,
    };
    if !perf_wanted {
        fsprof::os::privilege::drop_all();
    }
    if matches!(command, Command::Run { .. } | Command::Attach { .. }) {
        // While fsprof has a single thread: see `presize_table`.
        fsprof::os::descriptors::presize_table();
    }
    let result = match command {
        Command::Run { program, options } => {
            fsprof::commands::session::run(&program, &options).map(|code| code as u8)
        }
        Command::Attach { pid, options } => {
            fsprof::commands::session::attach(pid, &options).map(|()| 0)
        }
        Command::Report { path, options } => {
            if options.format == fsprof::commands::report::Format::Pprof
                && options.output.is_none()
                && std::io::stdout().is_terminal()
            {
                Err(anyhow::anyhow!(
                    "a pprof profile is binary: redirect stdout to a file (`> app.pb.gz`) or pass `-o app.pb.gz`"
                ))
            } else {
                fsprof::commands::report::report(&path, &options).and_then(|bytes| write(&bytes))
            }
        }
        Command::Diff { paths, options } => {
            fsprof::commands::report::diff(&paths, &options).and_then(|bytes| write(&bytes))
        }
        Command::WhatIf { program, options } => {
            fsprof::commands::what_if::what_if(&program, &options).map(|()| 0)
        }
        Command::Agent => fsprof::record::agent::library()
            .and_then(|path| write(format!("{}\n", path.display()).as_bytes())),
        Command::Print(text) => write(text.as_bytes()),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            // Errors can quote a file's or a process's contents: print them safely.
            let chain: Vec<String> = error
                .chain()
                .map(|e| fsprof::profile::clean(&e.to_string()))
                .collect();
            let _ = writeln!(std::io::stderr(), "fsprof: error: {}", chain.join(": "));
            ExitCode::FAILURE
        }
    }
}

/// Writes `bytes` to stdout; a closed pipe (`| head`) is not an error.
fn write(bytes: &[u8]) -> anyhow::Result<u8> {
    match std::io::stdout().write_all(bytes) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        other => other.map(|()| 0).map_err(Into::into),
    }
}
