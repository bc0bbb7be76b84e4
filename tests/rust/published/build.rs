//! Exports the fleet's symbols from the program (a dynamic list for the linker).

fn main() {
    fsprof_shim::build::export_fleet_symbols();
}
