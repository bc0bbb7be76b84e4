//! Exports the custom-labels ABI's symbols from the program (a dynamic list for the linker).

fn main() {
    custom_labels::build::emit_build_instructions();
}
