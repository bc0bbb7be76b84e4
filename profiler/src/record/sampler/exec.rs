//! What the sampler does at an `exec` of the process it records: the program image starts
//! anew ([`Sampler::new_image`]), and a capable fsprof decides again whether its user may trace
//! the process ([`ExecGate`], see `os/privilege.rs`): a program that turned set-user-id,
//! set-group-id or capable by its `exec` is recorded no further. Whatever was recorded before
//! the `exec` stays.
//!
//! The `exec` is seen by where the process's arguments start (`arg_start` in `/proc/PID/stat`):
//! each `exec` builds a new stack, and the kernel shows 0 there for a process fsprof's user may
//! not read (a set-user-id or file-capability program is not dumpable). So for the gate a new
//! value, or 0 after a value, is an `exec` (or the process's end), and the first look is checked
//! too (a child found between its `fork` and its `exec`, or in the middle of the `exec`, is
//! checked once the `exec` completed: a new program is not dumpable until its `exec` settles
//! that, after `fsprof run`'s spawn has returned, and a process found so while it runs as the
//! user is left unread at that tick and looked at again, for up to 200 ms; refused at once,
//! it took `run`'s own program from a set-user-id-root copy in 2 of 6 runs). The gate runs at the start of every tick, before anything
//! else is read from the process; in between, the kernel's own checks refuse what fsprof's user
//! may not read (memory, maps, ptrace), and it removes the perf events of a program that is not
//! dumpable.
//!
//! The same check refuses a process that made itself not dumpable (its `arg_start` reads 0
//! too), as `attach` refuses one. A leader that exited while its threads run on (a zombie)
//! shows 0 as well, and is checked at every tick.
//!
//! The gate checks nothing, and reads nothing, where fsprof holds no privilege beyond its
//! user's (the kernel's checks are then the whole story). Not here: what is read at a tick
//! (`sampler.rs`).

use super::Sampler;
use crate::os::privilege::{self, Refusal, MOST_UNSETTLED};
use crate::program::thread_status::ThreadStatus;
use std::time::Instant;

/// The process's image as last checked.
pub(super) struct ExecGate {
    pid: u32,
    /// The leader's stat, kept open (none once it cannot be opened: the process is gone).
    status: Option<ThreadStatus>,
    /// `arg_start` of the image last allowed; `None` before the first check (or while the
    /// process shows 0, exiting).
    allowed: Option<u64>,
    /// Why recording stopped, once it did.
    refused: Option<String>,
    /// Since when the process has been found not dumpable though it runs as the user (in the
    /// middle of an `exec`, see [`Refusal::Unsettled`]), if it is.
    unsettled_since: Option<Instant>,
}

/// What a tick may do with the process, as the gate found it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Look {
    /// Read it.
    Read,
    /// Read nothing this time: it is in the middle of an `exec`.
    Skip,
    /// Read nothing more, ever.
    Refused,
}

impl ExecGate {
    /// A gate for process `pid`: open only where fsprof is elevated.
    pub(super) fn new(pid: u32) -> ExecGate {
        ExecGate {
            pid,
            status: privilege::elevated()
                .then(|| ThreadStatus::open(pid, pid, true))
                .flatten(),
            allowed: None,
            refused: None,
            unsettled_since: None,
        }
    }

    /// Whether the process may be read now: never again once it ran a program fsprof's user may
    /// not trace; not this time while it is in the middle of an `exec` (for at most
    /// [`MOST_UNSETTLED`]). A process that is gone may be read (the tick finds it gone).
    pub(super) fn look(&mut self) -> Look {
        if self.refused.is_some() {
            return Look::Refused;
        }
        let Some(status) = &mut self.status else {
            return Look::Read;
        };
        if !matches!(status.is_running(), Ok(Some(_))) {
            return Look::Read; // gone, or unreadable this time (the kernel still checks every read)
        }
        let token = status.image_token();
        if token.is_some() && token == self.allowed {
            return Look::Read;
        }
        match privilege::may_trace(self.pid) {
            Ok(()) => {
                self.allowed = token;
                self.unsettled_since = None;
                Look::Read
            }
            Err(Refusal::Gone) => Look::Read,
            Err(Refusal::Unsettled(why)) => {
                let since = *self.unsettled_since.get_or_insert_with(Instant::now);
                if since.elapsed() < MOST_UNSETTLED {
                    return Look::Skip;
                }
                self.refused = Some(why);
                Look::Refused
            }
            Err(Refusal::Rule(why)) => {
                self.refused = Some(why);
                Look::Refused
            }
        }
    }

    /// Why recording stopped, if it did.
    pub(super) fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }
}

impl Sampler {
    /// Called with the leader `tid`'s `arg_start` (`token`) at each of its samples: at the first
    /// image, or an `exec` since the previous tick, samples from now on are the new program's.
    /// `true` when this sample of the leader (at the tick taken at `now`) is to be skipped (an
    /// `exec`).
    pub(super) fn new_image(&mut self, tid: u32, token: Option<u64>, now: Instant) -> bool {
        if token.is_none() || token == self.image_token {
            return false;
        }
        let exec = self.image_token.is_some();
        self.image_token = token;
        // This program's regions, and whether it announces them, are looked for at once rather
        // than at the pace its scanner chose for what it found first: the program before the
        // `exec` (the scanner may have looked before the first tick), whose environment may
        // have named the socket where this one's does not (`env -u FSPROF_ANNOUNCE`).
        self.reader.look_again();
        // Samples still waiting for a ptrace stop are the old image's: added before it ends,
        // without a stack (a stop after the exec would give them the new program's).
        self.flush_pending(None);
        let pid = self.pid;
        self.builder
            .image(crate::program::process::thread_name(pid, pid));
        if !exec {
            return false;
        }
        // This tick's marks may be the old image's (its region was copied before the exec was
        // seen), and so may cached names; perf's samples since the previous tick were copied
        // from the old image's slot addresses. The thread's time since then has no known marks:
        // dropped, with those samples, which leaves shares as they were. (Carried to its next
        // sample, it made one sample of 125 to 160 ms, mostly running time read as blocked, in
        // whatever instance that sample found: 3 points of a 3 s program exec'd by `sh` beside
        // one busy loop, when the tick that met the new program's stacks spent 80 ms reading
        // its debug information.)
        if let Some(state) = self.threads.states.get_mut(&tid) {
            state.interval.restart(now);
        }
        self.forget_names();
        if let Some(native) = self.native.as_mut() {
            native.drop_perf_samples(tid);
        }
        if let Some(state) = self.threads.states.get_mut(&tid) {
            state.followed = None;
            // The new program's stack is read at the next sample even if the thread is blocked
            // then, as a new thread's is: otherwise one that blocked before a tick found it
            // running (python3 sleeping, exec'd by `sh`, at 250 Hz: 10 of 12 runs) was never
            // read, its whole wait without a stack.
            state.stacks.new_program();
        }
        true
    }
}
