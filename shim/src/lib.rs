//! Feature marks for [fsprof], the feature-specific profiler.
//!
//! A library marks the code that implements one of its features; fsprof, running as a separate
//! process, samples every thread's marks and reports how much time each feature, and each instance
//! of it, costs.
//!
//! ```
//! use fsprof_shim::Feature;
//!
//! static OUTPUT: Feature = Feature::new("output");
//!
//! fn emit(line: &str) {
//!     let _m = OUTPUT.mark();                  // instance: this source location
//!     println!("{line}");
//! }
//!
//! fn emit_with(callback: impl FnOnce()) {
//!     let _m = OUTPUT.mark_with("emit_with");  // instance: a static name
//!     let _a = OUTPUT.antimark();              // user code: not output's cost
//!     callback();
//! }
//!
//! // Names computed at run time: intern once, mark many times without allocating.
//! let task = fsprof_shim::intern(&format!("task-{}", 7));
//! static TASKS: Feature = Feature::new("tasks");
//! let total = TASKS.scope_with(task, || 2 + 2);
//! # emit("x"); emit_with(|| ()); assert_eq!(total, 4);
//! ```
//!
//! # Guarantees
//! * Marking never allocates, locks or makes a syscall once a thread has marked once (but one
//!   `sigaltstack` query when a mark finds a push of its thread left halfway by a jump, below),
//!   and never panics. A push and its pop cost a few nanoseconds (see `BENCHMARKS.md`). No mark, a
//!   thread's first included, takes a lock the program could hold or wait for (the dynamic
//!   loader's, glibc's fork-handler lock): the fork handlers and the thread-exit key (a `pthread`
//!   key, not a thread-local destructor) are set up when the module that links the shim is
//!   loaded.
//! * Guards ([`Mark`]) are RAII and not `Send`. Dropping a guard pops its mark *and every mark
//!   above it*; guards dropped later whose marks are already gone do nothing. A leaked guard's mark
//!   stays on the stack until an enclosing guard is dropped or the thread exits. No order of drops
//!   or leaks can corrupt a stack.
//! * Each thread's stack holds [`abi::MARK_CAPACITY`] marks; deeper marks are counted, not
//!   recorded, and the profiler reports the stack as truncated.
//! * Any thread can mark, however it was created. A thread's slot is released when it exits and
//!   reused by later threads. If every slot is taken, that thread's marks are not recorded (the
//!   region counts such threads).
//! * After `fork()` the child does not inherit the region; it creates its own on its first mark.
//!   Guards alive across the fork do nothing in the child. This holds whatever runs in the child
//!   before the shim's fork handler (other libraries' handlers, which may mark): the forking
//!   thread's slot is hidden from the prepare handler on. In the parent, marks made by other
//!   fork handlers are not recorded.
//! * Marks may be made from signal handlers, on one condition: the thread must have marked once
//!   outside a handler before (its first mark claims a slot and registers a thread-exit
//!   destructor, which may allocate). A handler's mark that interrupted a push on the same thread
//!   is skipped; one that interrupted a pop nests normally.
//! * A handler that jumps out (`siglongjmp`) of a push it interrupted leaves the slot "being
//!   written" (its `seq` odd) until the push is closed: by [`raw::jumping_to`], which the agent's
//!   interposed `longjmp` and `siglongjmp` call before the jump, or else by the thread's next push
//!   at or above the one left (on x86-64, outside an alternate signal stack: a handler runs below
//!   the frame it interrupted). Until then the thread's marks are not recorded. A slot is always
//!   left clean when released, and taken clean when claimed.
//! * Two semver-incompatible copies of this crate in one program each have their own thread
//!   state (its symbol is versioned) and their own region.
//!
//! The shared-memory layout the profiler reads is defined, and documented, in [`abi`].
//!
//! # The fleet's profilers
//! With the cargo feature `fleet` (x86-64 Linux), each thread also publishes its innermost mark
//! as the labels `fsprof.feature` and `fsprof.instance`, in the two thread-local formats the
//! fleet's eBPF profilers read (the custom-labels ABI v1: parca-agent; the OpenTelemetry thread
//! context: the OpenTelemetry eBPF profiler): see [`fleet`]. An executable must export the
//! symbols: call [`build::export_fleet_symbols`] from its build script.
//!
//! [fsprof]: https://crates.io/crates/fsprof

#![deny(missing_docs)]

/// The name its parts make, with this crate's version appended (`NAME_v0_1_0`): the assembly
/// symbols of two semver-incompatible copies of the shim in one program stay apart
/// (`thread_state.rs`).
macro_rules! versioned {
    ($($part:expr),+) => {
        concat!(
            $($part,)+
            "_v",
            env!("CARGO_PKG_VERSION_MAJOR"),
            "_",
            env!("CARGO_PKG_VERSION_MINOR"),
            "_",
            env!("CARGO_PKG_VERSION_PATCH"),
        )
    };
}

pub mod abi;
mod announce;
pub mod build;
pub mod fleet;
mod progress;
mod region;
mod stack;
mod sys;
mod task;
mod thread_state;
pub mod whatif;

pub use task::{Instrumented, MAX_TASK_DEPTH};

use core::marker::PhantomData;
use core::panic::Location;
use stack::Pushed;

/// A feature: a static descriptor whose address identifies it in the profile.
///
/// Create one per feature, as a `static`. Its name is what the report calls the feature; features
/// with the same name are reported together.
#[repr(C)]
pub struct Feature {
    // Layout read by the profiler: see `abi::FEATURE_DESCRIPTOR_SIZE` and `abi::parse_feature`.
    magic: u64,
    name_ptr: *const u8,
    name_len: usize,
}

// SAFETY: a Feature is immutable; its pointer is to a `&'static str`.
unsafe impl Sync for Feature {}
// SAFETY: as above.
unsafe impl Send for Feature {}

impl Feature {
    /// A feature named `name`.
    pub const fn new(name: &'static str) -> Feature {
        Feature {
            magic: abi::FEATURE_MAGIC,
            name_ptr: name.as_ptr(),
            name_len: name.len(),
        }
    }

    /// The feature's name.
    pub const fn name(&self) -> &'static str {
        // SAFETY: built from a `&'static str` in `new`.
        unsafe {
            core::str::from_utf8_unchecked(core::slice::from_raw_parts(
                self.name_ptr,
                self.name_len,
            ))
        }
    }

    /// Marks the current thread as running this feature until the guard is dropped. The instance is
    /// the caller's source location (`file:line:column`).
    #[track_caller]
    #[inline(always)]
    pub fn mark(&'static self) -> Mark {
        let location = Location::caller();
        let file = location.file();
        let position = (location.line() as u64) << 32 | location.column() as u64;
        self.push(
            abi::KIND_LOCATION,
            file.as_ptr() as u64,
            file.len(),
            position,
        )
    }

    /// Marks the current thread as running this feature until the guard is dropped. The instance is
    /// `instance`: a string literal, or a name computed at run time and made `'static` once by
    /// [`intern`].
    #[inline(always)]
    pub fn mark_with(&'static self, instance: &'static str) -> Mark {
        self.push(abi::KIND_NAME, instance.as_ptr() as u64, instance.len(), 0)
    }

    /// Stops attributing time to this feature until the guard is dropped: wrap user code (a
    /// callback, a closure argument) that runs inside the feature's own code with an antimark.
    /// Other features are not affected.
    #[inline(always)]
    pub fn antimark(&'static self) -> Mark {
        self.push(abi::KIND_ANTIMARK, 0, 0, 0)
    }

    /// Marks an alternative a parser tries, until the guard is dropped: the choice point
    /// `choice` (say, the grammar rule), which of its branches (0 for the first one tried), and
    /// the input offset it starts at. A parser with ordered choice tries a later branch at the
    /// same offset only after the earlier ones failed there, so the profiler's backtracking view
    /// counts the time of every branch it sees followed by a later one at the same offset as
    /// wasted. The instance is `choice` and `branch`.
    #[inline(always)]
    pub fn mark_alternative(&'static self, choice: &'static str, branch: u32, offset: u64) -> Mark {
        let extra = Some([branch as u64, 0]);
        let (payload, len) = (choice.as_ptr() as u64, choice.len());
        self.push_extra(abi::KIND_ALTERNATIVE, payload, len, offset, extra)
    }

    /// Marks a check at a boundary between two components, until the guard is dropped: `value`
    /// names what is checked (a contract, a validated argument), `from` and `to` the components
    /// on each side (the caller and the library, say). The profiler's boundary view gives each
    /// edge (`from` to `to`) the cost of its checks, and each value its share of the edge. The
    /// instance is `value`.
    #[inline(always)]
    pub fn mark_boundary(
        &'static self,
        value: &'static str,
        from: &'static str,
        to: &'static str,
    ) -> Mark {
        let lengths = (from.len().min(u32::MAX as usize) as u64) << 32
            | to.len().min(u32::MAX as usize) as u64;
        let extra = Some([to.as_ptr() as u64, lengths]);
        let (payload, len, position) = (value.as_ptr() as u64, value.len(), from.as_ptr() as u64);
        self.push_extra(abi::KIND_BOUNDARY, payload, len, position, extra)
    }

    /// Runs `f` under [`Feature::mark`] (the instance is the caller's location).
    #[track_caller]
    #[inline(always)]
    pub fn scope<R>(&'static self, f: impl FnOnce() -> R) -> R {
        let _mark = self.mark();
        f()
    }

    /// Runs `f` under [`Feature::mark_with`].
    #[inline(always)]
    pub fn scope_with<R>(&'static self, instance: &'static str, f: impl FnOnce() -> R) -> R {
        let _mark = self.mark_with(instance);
        f()
    }

    #[inline(always)]
    fn push(&'static self, kind: u32, payload: u64, len: usize, position: u64) -> Mark {
        self.push_extra(kind, payload, len, position, None)
    }

    #[inline(always)]
    fn push_extra(
        &'static self,
        kind: u32,
        payload: u64,
        len: usize,
        position: u64,
        extra: Option<[u64; 2]>,
    ) -> Mark {
        // A stack address in the caller's frame (this function is always inlined), so the profiler
        // can place the mark between the right native frames.
        let sp = stack_pointer();
        let len = len.min(u32::MAX as usize) as u64;
        let meta = (kind as u64) << 32 | len;
        let feature = self as *const Feature as u64;
        let pushed = stack::push(feature, payload, meta, position, sp, extra);
        Mark {
            pushed,
            _not_send: PhantomData,
        }
    }
}

impl core::fmt::Debug for Feature {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("Feature").field(&self.name()).finish()
    }
}

/// A mark or antimark on the current thread's stack; dropping it pops it.
///
/// Not `Send`: a mark belongs to the thread that pushed it.
#[must_use = "a mark is popped as soon as its guard is dropped; bind it: `let _m = FEATURE.mark();`"]
pub struct Mark {
    pushed: Pushed,
    _not_send: PhantomData<*const ()>,
}

impl Drop for Mark {
    #[inline(always)]
    fn drop(&mut self) {
        stack::pop(self.pushed);
    }
}

impl core::fmt::Debug for Mark {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Mark")
            .field("index", &self.pushed.index)
            .finish()
    }
}

/// Returns a `'static` copy of `name`, the same one for equal names, for [`Feature::mark_with`].
///
/// Intern a run-time name (a task, a connection id) once, when it is created, and mark with it as
/// often as needed: marking does not allocate. Interned names live until the process exits, so
/// intern names from a bounded set, not a fresh string per request.
pub fn intern(name: &str) -> &'static str {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(existing) = names.get(name) {
        return existing;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    leaked
}

/// The calling thread's current mark depth, including marks beyond the recorded capacity.
/// Meant for tests and debug assertions.
pub fn depth() -> u32 {
    stack::current_depth()
}

/// Address of this process's region, if it has been created (it is created on the first mark).
/// Meant for tests and diagnostics.
pub fn region_address() -> Option<usize> {
    region::region_address()
}

/// Marks without guards, for the C ABI of `fsprof-agent`: not for Rust code, which should use
/// [`Feature`]'s guards. Same region, same signal safety, same costs as the guards.
///
/// A raw pop removes the innermost mark, whoever pushed it. Mixing raw pops with guards is safe
/// (a guard whose mark a raw pop removed does nothing when dropped, as after an out-of-order drop)
/// but pairs marks however the calls pair them.
#[doc(hidden)]
pub mod raw {
    use crate::{region, stack, Feature};

    /// Pushes a mark or antimark of `feature` on the calling thread's stack: `kind` is one of the
    /// [`crate::abi`]`::KIND_*` constants, `payload`, `len` (capped at `u32::MAX`) and `position` are
    /// stored as that kind defines them, and `sp` must be a stack address in the frame of the
    /// function that marks (its stack pointer), which the profiler uses to place the mark among
    /// native frames. Does nothing if the mark cannot be recorded (see the crate's guarantees).
    #[inline(always)]
    pub fn push(
        feature: &'static Feature,
        kind: u32,
        payload: u64,
        len: usize,
        position: u64,
        sp: u64,
    ) {
        push_extended(feature, kind, payload, len, position, sp, None);
    }

    /// [`push`] of a kind with extra words ([`crate::abi::KIND_ALTERNATIVE`],
    /// [`crate::abi::KIND_BOUNDARY`]), written as that kind defines them.
    #[inline(always)]
    pub fn push_extended(
        feature: &'static Feature,
        kind: u32,
        payload: u64,
        len: usize,
        position: u64,
        sp: u64,
        extra: Option<[u64; 2]>,
    ) {
        let len = len.min(u32::MAX as usize) as u64;
        let meta = (kind as u64) << 32 | len;
        let feature = feature as *const Feature as u64;
        let _ = stack::push(feature, payload, meta, position, sp, extra);
    }

    /// Pushes a call-site mark of `feature` (`payload`: a return address; `bp`: the frame pointer
    /// register at the call, 0 if unknown; `sp`: the interposing function's stack pointer at
    /// entry, where that return address is) unless the calling
    /// thread's innermost recorded mark belongs to a feature whose descriptor address lies in
    /// `nested` and was pushed by a frame still live (its `sp` above this one), or the thread has
    /// no slot yet and `claim` is false, or its slot is busy and `close_left` is false. Returns
    /// the mark pushed, for [`CallSiteMark::pop`], or why none was. For the agent's built-in
    /// features: a libc call made inside another one is not counted twice, one left by
    /// `siglongjmp` is dropped at the thread's next call, functions that signal handlers may
    /// call never claim a slot (claiming may allocate), and a fast path that must call nothing
    /// passes `close_left` false and, on [`NotPushed::Busy`], tries again from its slow path with
    /// true (which may close a push that a jump left halfway: see the crate's guarantees).
    #[inline(always)]
    pub fn push_call_site_unless_nested(
        feature: &'static Feature,
        payload: u64,
        bp: u64,
        sp: u64,
        nested: core::ops::Range<u64>,
        claim: bool,
        close_left: bool,
    ) -> Result<CallSiteMark, NotPushed> {
        stack::push_unless_nested(
            feature as *const Feature as u64,
            payload,
            bp,
            sp,
            nested,
            claim,
            close_left,
        )
        .map(CallSiteMark)
    }

    pub use crate::stack::NotPushed;

    /// A mark pushed by [`push_call_site_unless_nested`].
    #[derive(Clone, Copy)]
    #[repr(transparent)]
    pub struct CallSiteMark(stack::Placed);

    /// What assembly needs to pop a [`CallSiteMark`] itself, as [`CallSiteMark::pop`] does, in
    /// a few instructions and no call (the agent's trampolines, after a system call, where a
    /// call and its return cost about a nanosecond): given the mark's words in memory,
    /// ```text
    /// if THREAD_STATE[STATE_SLOT] == mark[MARK_SLOT]                      (a 64-bit compare)
    ///     && slot[SLOT_DEPTH] == mark[MARK_INDEX] + 1 { slot[SLOT_DEPTH] = mark[MARK_INDEX] }
    /// ```
    /// (32-bit loads and store; `slot` is the mark's slot pointer; a plain store is a release on
    /// x86-64). `THREAD_STATE` is the calling module's initial-exec thread-local block: a `sym`
    /// operand, reached as `fs:[0] + [rip + sym@GOTTPOFF]`.
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    pub mod assembly_pop {
        use crate::{abi::Slot, stack::Placed, thread_state::ThreadState};
        use core::mem::offset_of;

        pub use crate::thread_state::BLOCK as THREAD_STATE;
        /// Offset of the thread's slot pointer in `THREAD_STATE`.
        pub const STATE_SLOT: usize = offset_of!(ThreadState, slot);
        /// Offset of the slot pointer in a [`super::CallSiteMark`].
        pub const MARK_SLOT: usize = offset_of!(Placed, slot);
        /// Offset of the mark's index (32 bits) in a [`super::CallSiteMark`].
        pub const MARK_INDEX: usize = offset_of!(Placed, index);
        /// Offset of the depth (32 bits) in a slot.
        pub const SLOT_DEPTH: usize = offset_of!(Slot, depth);
    }

    impl CallSiteMark {
        /// Pops this mark if it is still the calling thread's innermost one (else does nothing).
        /// Call it on the thread that pushed it.
        #[inline(always)]
        pub fn pop(self) {
            stack::pop_placed(self.0);
        }
    }

    /// Pops the calling thread's innermost mark or antimark; does nothing if it has none.
    #[inline(always)]
    pub fn pop_innermost() {
        stack::pop_innermost();
    }

    /// Tells the shim that the calling thread is about to jump (`siglongjmp`) to stack pointer
    /// `target`: a push of this thread that the jump leaves unfinished (a signal handler that
    /// interrupted it jumps out) is closed, so that its slot is not left "being written" forever.
    /// Async-signal-safe (loads and one store). For the agent's interposed `siglongjmp`.
    #[inline(always)]
    pub fn jumping_to(target: u64) {
        stack::jumping_to(target);
    }

    /// Turns publishing for the fleet's profilers (the `fleet` feature, see [`crate::fleet`]) on
    /// or off for the threads that mark for the first time afterwards (it is on by default with
    /// the feature, and does nothing without it): for the agent's environment switch, called
    /// before anything marks.
    pub fn publish_for_fleet(on: bool) {
        crate::fleet::set_enabled(on);
    }

    /// Forgets the region in a child process made without `fork`'s `pthread_atfork` handlers
    /// (glibc's `_Fork`): the region is not mapped in the child, and its first mark would fault.
    /// Async-signal-safe (it only stores).
    ///
    /// # Safety
    /// Call it only in such a child, before anything marks, while it has one thread.
    pub unsafe fn forget_region_in_child() {
        region::forget_region_in_child();
    }
}

#[cfg(test)]
mod tests;

/// The stack pointer, in the frame of the (always inlining) caller.
#[inline(always)]
fn stack_pointer() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        let sp: u64;
        // SAFETY: reads a register; touches no memory.
        unsafe {
            core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags))
        };
        sp
    }
    #[cfg(target_arch = "aarch64")]
    {
        let sp: u64;
        // SAFETY: reads a register; touches no memory.
        unsafe {
            core::arch::asm!("mov {}, sp", out(reg) sp, options(nomem, nostack, preserves_flags))
        };
        sp
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let anchor = 0u8;
        core::hint::black_box(&anchor) as *const u8 as u64
    }
}
