//! What fsprof may do beyond the rights of the user who ran it, and the discipline for using it.
//!
//! A copy of fsprof can hold more privilege than its user: file capabilities (`setcap`), a setuid
//! or setgid bit, or ambient capabilities. Such a copy must not become a way for that user to read
//! what they could not read themselves (the confused deputy: `CAP_SYS_PTRACE` would open every
//! process's memory, `CAP_PERFMON` passes over the kernel's ptrace check in `perf_event_open`).
//! So, first thing in `main` and before any thread exists, [`settle`] turns any such privilege
//! into one shape: the real user's uids and gids throughout, at most `CAP_PERFMON` and `CAP_BPF`
//! left in the permitted set (given up at once unless the perf backend may be used), none
//! effective, inheritable or ambient, and the process not dumpable (so that its user cannot
//! ptrace any of its threads and borrow what it holds). From then on:
//! * everything fsprof does to a target (reading its memory and `/proc` files, ptrace) is done
//!   with the real user's rights, and the kernel checks them at every call (so a target that
//!   turns into another user's by a setuid `exec` is refused from then on);
//! * files are created as the real user;
//! * a program `fsprof run` starts gets the real user's credentials and no capability;
//! * the two capabilities are raised on the calling thread only, around the system calls that
//!   need them ([`with_perf`]: BPF maps and programs, perf events and their rings); because
//!   `CAP_PERFMON` lets a perf event be opened on any thread, the thread is checked with
//!   [`may_trace`] before and after its event exists, and the process again ([`still_traceable`])
//!   each time its samples are taken (a process that runs a file-capability program stays
//!   dumpable and keeps its perf events: the kernel removes them only for setuid programs);
//! * [`drop_all`] gives them up when recording ends.
//!
//! Root run by root, and a user run without privilege, are left as they are: the kernel's own
//! checks are the whole story for them.
//!
//! Not here: choosing a backend (the sampler), advice for a read the kernel refused
//! (`program/process.rs`).

use caps::{CapSet, Capability, CapsHashSet};
use nix::unistd::{Gid, Uid};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::MetadataExt;
use std::sync::OnceLock;

/// The capabilities the perf backend needs, and the only ones ever kept.
const PERF_CAPS: [Capability; 2] = [Capability::CAP_PERFMON, Capability::CAP_BPF];

/// Where fsprof stands once [`settle`] has run.
#[derive(Debug)]
enum Standing {
    /// Root run by root, or a user without privilege: nothing is checked beyond the kernel.
    Plain,
    /// fsprof held privilege its user lacks; it now runs as that user, keeping `kept` in its
    /// permitted set (possibly nothing).
    Elevated {
        uid: u32,
        gid: u32,
        /// What fsprof held when it started, for messages (`cap_sys_ptrace`, `setuid root`, ...).
        held: String,
        kept: CapsHashSet,
        /// Why perf is not used although the capabilities were held.
        withheld: Option<String>,
    },
}

static STANDING: OnceLock<Standing> = OnceLock::new();

fn standing() -> &'static Standing {
    STANDING.get_or_init(|| Standing::Plain)
}

/// Turns any privilege fsprof holds beyond its real user's into the shape the module header
/// describes, keeping `CAP_PERFMON` and `CAP_BPF` (if held; [`drop_all`] gives them up when perf
/// will not be used). Must run first, before any thread is started (capabilities are per thread).
/// Fails only if the kernel refuses to lower a privilege, in which case fsprof must not go on.
pub fn settle() -> anyhow::Result<()> {
    let uids = nix::unistd::getresuid()?;
    let gids = nix::unistd::getresgid()?;
    if uids.real.is_root() {
        let _ = STANDING.set(Standing::Plain); // root run by root: nothing to give up
        return Ok(());
    }
    let read = |set| caps::read(None, set).map_err(|e| anyhow::anyhow!("capget: {e}"));
    let permitted = read(CapSet::Permitted)?;
    let ambient = read(CapSet::Ambient)?;
    let (uid, gid) = (uids.real.as_raw(), gids.real.as_raw());
    let setuid = uids.effective != uids.real || uids.saved != uids.real;
    let setgid = gids.effective != gids.real || gids.saved != gids.real;
    if !setuid && !setgid && permitted.is_empty() {
        let _ = STANDING.set(Standing::Plain);
        return Ok(());
    }
    let held = describe_held(&uids, setgid, &permitted, &ambient);
    user_environment(); // from fsprof's own memory, before anything changes
                        // With fs.suid_dumpable other than 0 the kernel keeps perf events on a program that becomes
                        // privileged by exec (it removes them only from programs that end up not dumpable).
    let suid_dumpable = std::fs::read_to_string("/proc/sys/fs/suid_dumpable")
        .map_or_else(|_| "unknown".to_owned(), |s| s.trim().to_owned());
    let withheld = (suid_dumpable != "0").then(|| {
        format!(
            "fs.suid_dumpable is {suid_dumpable}, with which the kernel keeps perf events on a program that turns privileged by exec; \
             a capable fsprof then uses ptrace (an administrator can run `sysctl fs.suid_dumpable=0`)"
        )
    });
    let kept: CapsHashSet = PERF_CAPS
        .into_iter()
        .filter(|cap| permitted.contains(cap) && withheld.is_none())
        .collect();
    let refuse = |e: String| {
        anyhow::anyhow!(
            "cannot give up the privilege it was started with ({held}): {e}; refusing to go on"
        )
    };
    lower(uid, gid, setuid, setgid, &kept).map_err(refuse)?;
    // Not dumpable while any thread holds a capability: its user may not ptrace or read any of
    // its threads (they share its memory; a thread without capabilities would otherwise be a
    // way in). Set after the change of uid, which sets it from fs.suid_dumpable.
    // SAFETY: PR_SET_DUMPABLE and PR_GET_DUMPABLE take integer arguments.
    let dumpable = unsafe {
        nix::libc::prctl(nix::libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        nix::libc::prctl(nix::libc::PR_GET_DUMPABLE, 0, 0, 0, 0)
    };
    if dumpable != 0 {
        return Err(refuse("it stays dumpable".to_owned()));
    }
    let _ = STANDING.set(Standing::Elevated {
        uid,
        gid,
        held,
        kept,
        withheld,
    });
    Ok(())
}

/// Becomes the real user for good and narrows the capability sets to `kept` (permitted only).
fn lower(uid: u32, gid: u32, setuid: bool, setgid: bool, kept: &CapsHashSet) -> Result<(), String> {
    let fail = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
    if setgid {
        let gid = Gid::from_raw(gid);
        nix::unistd::setresgid(gid, gid, gid).map_err(|e| fail("setresgid", &e))?;
    }
    if setuid {
        // Keep the permitted set across the change of uid (a setuid-root fsprof holds all
        // capabilities as root; the ones it keeps must survive becoming the user).
        set_keep_caps(true);
        let uid = Uid::from_raw(uid);
        let changed = nix::unistd::setresuid(uid, uid, uid).map_err(|e| fail("setresuid", &e));
        set_keep_caps(false);
        changed?;
    }
    caps::clear(None, CapSet::Effective).map_err(|e| fail("clearing the effective set", &e))?;
    let permitted = caps::read(None, CapSet::Permitted).map_err(|e| fail("capget", &e))?;
    let kept: CapsHashSet = kept.intersection(&permitted).copied().collect();
    caps::set(None, CapSet::Permitted, &kept)
        .map_err(|e| fail("narrowing the permitted set", &e))?;
    caps::clear(None, CapSet::Inheritable).map_err(|e| fail("clearing the inheritable set", &e))?;
    caps::clear(None, CapSet::Ambient).map_err(|e| fail("clearing the ambient set", &e))?;
    let uids = nix::unistd::getresuid().map_err(|e| fail("getresuid", &e))?;
    if [uids.real, uids.effective, uids.saved] != [Uid::from_raw(uid); 3] {
        return Err("the uids did not change".to_owned());
    }
    Ok(())
}

fn set_keep_caps(keep: bool) {
    // SAFETY: PR_SET_KEEPCAPS takes one integer argument.
    unsafe { nix::libc::prctl(nix::libc::PR_SET_KEEPCAPS, u64::from(keep), 0, 0, 0) };
}

fn describe_held(
    uids: &nix::unistd::ResUid,
    setgid: bool,
    permitted: &CapsHashSet,
    ambient: &CapsHashSet,
) -> String {
    let mut held = Vec::new();
    if uids.effective != uids.real {
        held.push(if uids.effective.is_root() {
            "setuid root".to_owned()
        } else {
            format!("setuid uid {}", uids.effective)
        });
    }
    if setgid {
        held.push("setgid".to_owned());
    }
    if !permitted.is_empty() && !uids.effective.is_root() {
        let mut names: Vec<String> = permitted
            .iter()
            .map(|c| c.to_string().to_lowercase())
            .collect();
        names.sort();
        let kind = if ambient.is_empty() { "" } else { "ambient " };
        held.push(format!("{kind}capabilities {}", names.join(",")));
    }
    held.join(", ")
}

/// Why the perf backend is not used although fsprof held what it needs, if so.
pub fn perf_withheld() -> Option<&'static str> {
    match standing() {
        Standing::Elevated { withheld, .. } => withheld.as_deref(),
        Standing::Plain => None,
    }
}

/// Whether fsprof started with privilege its user lacks (see the module header).
pub fn elevated() -> bool {
    matches!(standing(), Standing::Elevated { .. })
}

/// Runs `f` with `CAP_PERFMON` and `CAP_BPF` effective on the calling thread, if they were kept,
/// and lowers them again. For the perf backend's system calls only.
pub fn with_perf<T>(f: impl FnOnce() -> T) -> T {
    let Standing::Elevated { kept, .. } = standing() else {
        return f();
    };
    if kept.is_empty() {
        return f();
    }
    let _ = caps::set(None, CapSet::Effective, kept);
    let result = f();
    if caps::clear(None, CapSet::Effective).is_err() {
        // Never go on with them raised (capset cannot refuse to lower a set, but if it did).
        say!("fsprof: error: cannot lower its capabilities again; aborting");
        std::process::abort();
    }
    result
}

/// Gives up every capability of the calling thread: perf will not be used (any more), or the
/// thread never needs them.
pub fn drop_all() {
    if let Standing::Elevated { kept, .. } = standing() {
        if !kept.is_empty() {
            let _ = caps::clear(None, CapSet::Effective);
            let _ = caps::clear(None, CapSet::Permitted);
        }
    }
}

/// Whether the calling thread still holds the capabilities fsprof keeps (a thread that gave
/// them up, or was started by one that had, holds none).
pub fn thread_intact() -> bool {
    match standing() {
        Standing::Elevated { kept, .. } if !kept.is_empty() => {
            caps::read(None, CapSet::Permitted).is_ok_and(|held| kept.is_subset(&held))
        }
        _ => true,
    }
}

/// Why [`may_trace`] says no.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The thread cannot be looked at (it has exited).
    Gone,
    /// It breaks this rule.
    Rule(String),
    /// It is not dumpable, though it runs as the user without capabilities: in the middle of an
    /// `exec` (the kernel settles a new program's dumpability after the `exec` has closed its
    /// descriptors, which is when `fsprof run`'s spawn returns), or it made itself so. Nothing
    /// may be read from it now; looked at again later, it passes or stays refused.
    Unsettled(String),
}

/// How long a process may stay [`Refusal::Unsettled`] before it is refused: an `exec` settles
/// it within microseconds; a program that made itself not dumpable stays so.
pub const MOST_UNSETTLED: std::time::Duration = std::time::Duration::from_millis(200);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Gone => f.write_str("it has exited"),
            Refusal::Rule(why) | Refusal::Unsettled(why) => f.write_str(why),
        }
    }
}

/// Whether the real user could trace thread `tid` without fsprof's privilege: it runs as that
/// user (real, effective and saved uids and gids), holds no capability, is dumpable (its `/proc`
/// files belong to that user), and the kernel itself lets fsprof's user read it (`kcmp`, which
/// asks the same question as `ptrace_may_access` in read mode, security modules included, with
/// fsprof's capabilities lowered). Always `Ok` unless fsprof is [`elevated`]. Yama's rule is
/// for attaching, which fsprof does with its user's rights: the kernel applies it at every call.
/// Must not be called inside [`with_perf`].
pub fn may_trace(tid: u32) -> Result<(), Refusal> {
    let Standing::Elevated { uid, gid, .. } = standing() else {
        return Ok(());
    };
    let path = format!("/proc/{tid}/status");
    let status = std::fs::read_to_string(&path).map_err(|_| Refusal::Gone)?;
    let owner = std::fs::metadata(&path).map_err(|_| Refusal::Gone)?.uid();
    check_status(&status, owner, *uid, *gid)?;
    kernel_allows(tid)?;
    privileged_program(tid, *uid, *gid).map_or(Ok(()), |why| Err(Refusal::Rule(why)))
}

/// Why the program thread `tid` runs is a privileged one (set-user-id to another user than
/// `uid`, set-group-id to another group than `gid`, or with file capabilities), if it is: one that runs as its user all the same lost its privilege at
/// its `exec` (a tracer held the thread then, the file system is mounted `nosuid`, or
/// `no_new_privs` was set), and is not recorded either: a capable fsprof never reads a
/// privileged program.
fn privileged_program(tid: u32, uid: u32, gid: u32) -> Option<String> {
    let exe = format!("/proc/{tid}/exe");
    let file = std::fs::metadata(&exe).ok()?;
    let mode = file.mode();
    let (setuid, setgid, group_x) = (0o4000, 0o2000, 0o010);
    let what = if mode & setuid != 0 && file.uid() != uid {
        "set-user-id"
    } else if mode & setgid != 0 && mode & group_x != 0 && file.gid() != gid {
        "set-group-id"
    } else {
        let name = c"security.capability";
        let path = std::ffi::CString::new(exe).ok()?;
        // SAFETY: a size query (no buffer) on valid C strings.
        let size =
            unsafe { nix::libc::getxattr(path.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
        if size <= 0 {
            return None;
        }
        "file-capability"
    };
    Some(format!(
        "it runs a {what} program, which the kernel ran without its privilege (a tracer held it at its exec, a nosuid mount or no_new_privs)"
    ))
}

/// `kcmp(tid, tid, KCMP_VM)`: the kernel checks that the caller may read `tid` (ptrace read mode,
/// real credentials, security modules). Kernels without `kcmp` (no CONFIG_KCMP) leave the
/// `/proc` checks alone.
fn kernel_allows(tid: u32) -> Result<(), Refusal> {
    // `enum kcmp_type` (linux/kcmp.h): KCMP_FILE is 0, KCMP_VM 1. With 0 the call compared the
    // thread's descriptor 0 with itself, which fails with EBADF where the thread has none (its
    // file table already gone as it exits, or its standard input closed), and the user's own
    // program was refused: a fresh-clone run's `capable_copies_walk_deep_stacks` ("the kernel
    // does not let you read it (Bad file number ...)"; perf stopped, ptrace took over).
    const KCMP_VM: nix::libc::c_long = 1;
    let tid = nix::libc::c_long::from(tid as i32);
    // SAFETY: kcmp takes integers only.
    let result = unsafe { nix::libc::syscall(nix::libc::SYS_kcmp, tid, tid, KCMP_VM, 0, 0) };
    match (result, nix::errno::Errno::last()) {
        (0.., _) | (_, nix::errno::Errno::ENOSYS) => Ok(()),
        (_, nix::errno::Errno::ESRCH) => Err(Refusal::Gone),
        (_, errno) => Err(Refusal::Rule(format!(
            "the kernel does not let you read it ({}; a security module such as SELinux or AppArmor, or its credentials)",
            errno.desc()
        ))),
    }
}

/// [`may_trace`] for a process fsprof already records: `Ok` also when it is gone.
pub fn still_traceable(pid: u32) -> Result<(), Refusal> {
    match may_trace(pid) {
        Ok(()) | Err(Refusal::Gone) => Ok(()),
        Err(refusal) => Err(refusal),
    }
}

/// [`may_trace`]'s rules applied to a `/proc/TID/status` text and the owner of that file.
fn check_status(status: &str, owner: u32, uid: u32, gid: u32) -> Result<(), Refusal> {
    let ids = |key: &str| -> Option<[u32; 3]> {
        let line = status.lines().find(|l| l.starts_with(key))?;
        let mut fields = line[key.len()..]
            .split_ascii_whitespace()
            .map(|f| f.parse().ok());
        Some([fields.next()??, fields.next()??, fields.next()??])
    };
    let unreadable = || Refusal::Rule("its /proc status cannot be parsed".to_owned());
    let [real, effective, saved] = ids("Uid:").ok_or_else(unreadable)?;
    if [real, effective, saved] != [uid; 3] {
        return Err(Refusal::Rule(format!(
            "it runs as another user (uids: real {real}, effective {effective}, saved {saved}; you are uid {uid})"
        )));
    }
    let [real, effective, saved] = ids("Gid:").ok_or_else(unreadable)?;
    if [real, effective, saved] != [gid; 3] {
        return Err(Refusal::Rule(format!(
            "it runs with another group (gids: real {real}, effective {effective}, saved {saved}; yours is {gid})"
        )));
    }
    let permitted = status
        .lines()
        .find_map(|l| l.strip_prefix("CapPrm:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .ok_or_else(unreadable)?;
    if permitted != 0 {
        return Err(Refusal::Rule(format!(
            "it holds capabilities (CapPrm {permitted:016x}), which you do not"
        )));
    }
    // An exited thread (a zombie leader whose other threads run on) has no memory left, and
    // its files are root's whatever it was.
    let exited = status
        .lines()
        .find_map(|l| l.strip_prefix("State:"))
        .is_some_and(|state| matches!(state.trim().chars().next(), Some('Z' | 'X')));
    if owner != uid && !exited {
        return Err(Refusal::Unsettled(
            "it is not dumpable (it made itself so, or it runs a setuid or file-capability program), so its owner may not trace it either"
                .to_owned(),
        ));
    }
    Ok(())
}

/// The refusal for a target the real user could not trace: why, and what can be done.
pub fn refusal(pid: u32, why: &Refusal) -> String {
    let held = match standing() {
        Standing::Elevated { held, .. } => held.as_str(),
        Standing::Plain => "no privilege",
    };
    format!(
        "refusing to profile process {pid}: {why}. This fsprof was started with privilege its user lacks ({held}), \
         so it profiles only processes that user could trace without it. Profile the process as its own user, \
         or as root (sudo fsprof attach {pid})"
    )
}

/// The environment fsprof was started with, when the C library removed variables from it because
/// fsprof runs with privilege (`AT_SECURE`: `LD_PRELOAD`, `LD_LIBRARY_PATH`, `TMPDIR`, ...). A
/// program `run` starts runs as the real user, without privilege, and gets that user's whole
/// environment back. `None` when nothing was removed.
pub fn user_environment() -> Option<Vec<(OsString, OsString)>> {
    USER_ENVIRONMENT.get_or_init(read_user_environment).clone()
}

static USER_ENVIRONMENT: OnceLock<Option<Vec<(OsString, OsString)>>> = OnceLock::new();

/// The environment as `execve` gave it, read from fsprof's own memory between the addresses
/// `/proc/self/stat` gives (fields 50 and 51): the C library removed variables from `environ`
/// but not from there, and `/proc/self/environ` may be unreadable (a process that gained
/// capabilities at exec is not dumpable, and that file is then root's).
fn read_user_environment() -> Option<Vec<(OsString, OsString)>> {
    // SAFETY: getauxval has no preconditions.
    if unsafe { nix::libc::getauxval(nix::libc::AT_SECURE) } == 0 {
        return None;
    }
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (start, end) = environment_range(&stat)?;
    // SAFETY: [start, end) is this process's initial environment block, on its stack, mapped
    // and readable for the life of the process (the kernel reports it; the length is bounded).
    let raw = unsafe { std::slice::from_raw_parts(start as *const u8, end - start) };
    Some(
        raw.split(|b| *b == 0)
            .filter_map(|entry| {
                let at = entry.iter().position(|b| *b == b'=')?;
                (at > 0).then(|| {
                    (
                        OsString::from_vec(entry[..at].to_vec()),
                        OsString::from_vec(entry[at + 1..].to_vec()),
                    )
                })
            })
            .collect(),
    )
}

/// `env_start` and `env_end` from a `/proc/PID/stat` text, if they make a plausible range.
fn environment_range(stat: &str) -> Option<(usize, usize)> {
    // Fields after the command name (which may hold spaces and parentheses) start at field 3.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_ascii_whitespace().collect();
    let start: usize = fields.get(50 - 3)?.parse().ok()?;
    let end: usize = fields.get(51 - 3)?.parse().ok()?;
    (start > 0 && start < end && end - start <= 16 << 20).then_some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tx\nUid:\t1000\t1000\t1000\t1000\nGid:\t100\t100\t100\t100\nCapPrm:\t0000000000000000\n";

    #[test]
    fn a_thread_of_the_user_passes() {
        assert_eq!(check_status(STATUS, 1000, 1000, 100), Ok(()));
    }

    #[test]
    fn each_rule_is_named_when_broken() {
        let root = STATUS.replace("Uid:\t1000\t1000\t1000", "Uid:\t1000\t0\t1000");
        assert!(check_status(&root, 1000, 1000, 100)
            .unwrap_err()
            .to_string()
            .contains("another user"));
        let saved = STATUS.replace("Uid:\t1000\t1000\t1000", "Uid:\t1000\t1000\t0");
        assert!(check_status(&saved, 1000, 1000, 100)
            .unwrap_err()
            .to_string()
            .contains("saved 0"));
        let group = STATUS.replace("Gid:\t100\t100\t100", "Gid:\t100\t42\t100");
        assert!(check_status(&group, 1000, 1000, 100)
            .unwrap_err()
            .to_string()
            .contains("another group"));
        let capable = STATUS.replace("CapPrm:\t0000000000000000", "CapPrm:\t0000000000002000");
        assert!(check_status(&capable, 1000, 1000, 100)
            .unwrap_err()
            .to_string()
            .contains("capabilities"));
        assert!(check_status(STATUS, 0, 1000, 100)
            .unwrap_err()
            .to_string()
            .contains("not dumpable"));
        assert!(check_status("Name:\tx\n", 1000, 1000, 100).is_err());
        let zombie = format!("State:\tZ (zombie)\n{STATUS}");
        assert_eq!(check_status(&zombie, 0, 1000, 100), Ok(()));
    }

    #[test]
    fn the_environment_range_is_read_past_an_odd_command_name() {
        let mut fields: Vec<String> = (3..=52).map(|n| n.to_string()).collect();
        fields[50 - 3] = "1000".into();
        fields[51 - 3] = "2000".into();
        let stat = format!("42 (a) b (c) {}", fields.join(" "));
        assert_eq!(environment_range(&stat), Some((1000, 2000)));
        assert_eq!(environment_range("42 (x) S 1"), None);
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(environment_range(&own).is_some(), "{own}");
    }

    #[test]
    fn plain_standing_checks_nothing() {
        // The unit tests never settle: fsprof's standing is plain, and every thread passes.
        assert!(!elevated());
        assert_eq!(may_trace(u32::MAX), Ok(()));
        assert_eq!(with_perf(|| 7), 7);
    }
}
