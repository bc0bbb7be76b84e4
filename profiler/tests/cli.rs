//! The `fsprof` binary's command line: help, version, and usage errors. (Profiling real programs
//! is tested end to end in the workspace's `tests/` package.)

use std::process::Command;

fn fsprof(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fsprof"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn help_lists_the_commands_and_options() {
    let output = fsprof(&["--help"]);
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    for word in ["run", "attach", "report", "Examples"] {
        assert!(help.contains(word), "{word} missing from:\n{help}");
    }
    let help = String::from_utf8(fsprof(&["run", "--help"]).stdout).unwrap();
    for option in ["--output", "--rate", "--duration", "--idle"] {
        assert!(help.contains(option), "{option} missing from:\n{help}");
    }
}

#[test]
fn run_without_a_program_is_a_usage_error() {
    let output = fsprof(&["run"]);
    assert_eq!(output.status.code(), Some(2));
}
