//! Each thread's innermost mark published for the fleet's profilers (cargo feature `fleet`,
//! x86-64 Linux): parca-agent reads the custom-labels ABI v1, the OpenTelemetry eBPF profiler
//! the OpenTelemetry thread context (OTEP 4947) and its process context (OTEP 4719). With the
//! feature, the module that links the shim exports `custom_labels_abi_version`,
//! `custom_labels_current_set` and `otel_thread_ctx_v1`, and each thread, from its first mark,
//! shows two labels while it is inside a mark: `fsprof.feature` (the feature's name) and
//! `fsprof.instance` (the instance as fsprof's report names it), cut to parca-agent's limits
//! ([`MAX_KEY`], [`MAX_VALUE`] bytes).
//!
//! What is published is the innermost mark that counts: antimarked features are passed over,
//! as fsprof's attribution does, and so are call-site marks (the agent's built-in features,
//! `fsprof_mark(f, NULL)` in C: their instance is a return address, which only the profiler can
//! name, and the built-ins' pops are a few instructions of assembly that publish nothing).
//!
//! Without the feature (the default), or on other targets, every hook here is empty: the mark
//! path is the same code as without this module. With it, a push or pop that changes the
//! innermost mark points at its labels (see `fleet/thread.rs`); a mark popped by the C ABI's
//! `fsprof_unmark` has its text forgotten, for the caller may reuse its payload's buffer.
//!
//! Not here: the marks themselves (`stack.rs`), the region (`region.rs`).

#[cfg(all(feature = "fleet", target_arch = "x86_64", target_os = "linux"))]
mod process_context;
#[cfg(all(feature = "fleet", target_arch = "x86_64", target_os = "linux"))]
mod text;
#[cfg(all(feature = "fleet", target_arch = "x86_64", target_os = "linux"))]
mod thread;

/// Longest key published, in bytes (parca-agent keeps 25).
pub const MAX_KEY: usize = 25;
/// Longest value published, in bytes (parca-agent keeps 53).
pub const MAX_VALUE: usize = 53;
/// The key of the feature's name.
pub const FEATURE_KEY: &str = "fsprof.feature";
/// The key of the instance.
pub const INSTANCE_KEY: &str = "fsprof.instance";

const _: () = assert!(FEATURE_KEY.len() <= MAX_KEY && INSTANCE_KEY.len() <= MAX_KEY);

#[cfg(all(feature = "fleet", target_arch = "x86_64", target_os = "linux"))]
pub(crate) use on::*;

#[cfg(all(feature = "fleet", target_arch = "x86_64", target_os = "linux"))]
mod on {
    use super::{process_context, thread};
    use crate::abi::{self, Slot};
    use crate::thread_state::ThreadState;
    use core::sync::atomic::{AtomicBool, Ordering::Relaxed};
    pub(crate) use thread::Published;

    /// Whether threads that claim a slot from now on publish (the agent's switch).
    static ENABLED: AtomicBool = AtomicBool::new(true);

    /// Turns publishing on or off for threads whose first mark comes later, and for the process
    /// context of a region created later: set it before the first mark.
    pub(crate) fn set_enabled(on: bool) {
        ENABLED.store(on, Relaxed);
    }

    /// The process's region was just created: publish the process context.
    pub(crate) fn region_created() {
        if ENABLED.load(Relaxed) {
            process_context::publish();
        }
    }

    /// The calling thread claimed its slot (slow path, outside signal handlers): point its
    /// exported thread-locals at its published labels, once.
    pub(crate) fn claimed(state: &ThreadState) {
        if ENABLED.load(Relaxed) && state.fleet.get().is_null() {
            state.fleet.set(thread::attach());
        }
    }

    /// A push of `kind` completed on this thread; `words` are its record's feature, payload,
    /// length and position words, and its extra words.
    #[inline(always)]
    pub(crate) fn pushed(
        state: &ThreadState,
        slot: &Slot,
        kind: u32,
        words: (u64, u64, u64, u64),
        extra: Option<[u64; 2]>,
    ) {
        let published = state.fleet.get();
        if published.is_null() || kind == abi::KIND_CALL_SITE {
            return;
        }
        if slot.depth.load(Relaxed) as usize > slot.records.len() {
            return; // not recorded: the innermost recorded mark stays shown, as fsprof reads it
        }
        if kind == abi::KIND_ANTIMARK {
            thread::show_innermost(published, slot);
        } else {
            let (feature, payload, len, position) = words;
            let extra = extra.unwrap_or([0, 0]);
            let mark = thread::Shown::new(feature, kind, payload, len, position, extra);
            thread::show(published, mark);
        }
    }

    /// A pop lowered this thread's depth.
    #[inline(always)]
    pub(crate) fn popped(state: &ThreadState, slot: &Slot) {
        let published = state.fleet.get();
        if !published.is_null() {
            thread::show_innermost(published, slot);
        }
    }

    /// A pop of the C ABI (`fsprof_unmark`) lowered this thread's depth below `record`: its
    /// text is forgotten (its strings may be a buffer the caller reuses), then as [`popped`].
    pub(crate) fn popped_reusable(state: &ThreadState, slot: &Slot, record: &abi::Record) {
        let published = state.fleet.get();
        if !published.is_null() {
            thread::show_innermost(published, slot);
            thread::forget(published, record);
        }
    }

    /// The thread released its slot (it is exiting), or this is a child of `fork`: nothing is
    /// marked any more. Async-signal-safe: stores only.
    pub(crate) fn cleared(state: &ThreadState) {
        let published = state.fleet.get();
        if !published.is_null() {
            thread::clear(published);
        }
    }
}

#[cfg(not(all(feature = "fleet", target_arch = "x86_64", target_os = "linux")))]
pub(crate) use off::*;

/// Without the feature: nothing, inlined away.
#[cfg(not(all(feature = "fleet", target_arch = "x86_64", target_os = "linux")))]
mod off {
    use crate::abi::Slot;
    use crate::thread_state::ThreadState;

    pub(crate) fn set_enabled(_: bool) {}
    #[inline(always)]
    pub(crate) fn region_created() {}
    #[inline(always)]
    pub(crate) fn claimed(_: &ThreadState) {}
    #[inline(always)]
    pub(crate) fn pushed(
        _: &ThreadState,
        _: &Slot,
        _: u32,
        _: (u64, u64, u64, u64),
        _: Option<[u64; 2]>,
    ) {
    }
    #[inline(always)]
    pub(crate) fn popped(_: &ThreadState, _: &Slot) {}
    #[inline(always)]
    pub(crate) fn popped_reusable(_: &ThreadState, _: &Slot, _: &crate::abi::Record) {}
    #[inline(always)]
    pub(crate) fn cleared(_: &ThreadState) {}
}
