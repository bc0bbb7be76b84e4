//! The house's limits hold (the developers' guide): no source file over 800 lines, no struct over
//! 15 fields, no function over 150 lines, as `tests/house-limits.py` reads the workspace.

use std::path::Path;
use std::process::Command;

#[test]
fn files_structs_and_functions_stay_within_the_limits() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let output = Command::new("python3")
        .arg(root.join("tests/house-limits.py"))
        .arg(root)
        .output()
        .expect("python3 runs tests/house-limits.py");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
}
