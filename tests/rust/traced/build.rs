//! Exports the thread-local `otel_thread_ctx_v1` from the program, as the specification asks
//! (the crate defines it global; an executable exports only what the linker is told to).

fn main() {
    println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=otel_thread_ctx_v1");
}
