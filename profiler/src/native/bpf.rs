//! The `bpf(2)` system calls fsprof makes: maps (made, updated, mapped into fsprof), programs
//! loaded (with the verifier's complaint when refused) and attached to tracepoints. It knows
//! nothing of what the programs do (`sampling.rs`, `walk.rs`, `cpu_wide/programs.rs`).

use crate::native::asm::Insn;
use nix::errno::Errno;
use nix::libc;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const BPF_MAP_CREATE: u32 = 0;
const BPF_MAP_LOOKUP_ELEM: u32 = 1;
const BPF_MAP_UPDATE_ELEM: u32 = 2;
const BPF_MAP_DELETE_ELEM: u32 = 3;
const BPF_PROG_LOAD: u32 = 5;
const BPF_RAW_TRACEPOINT_OPEN: u32 = 17;
pub(super) const BPF_MAP_TYPE_HASH: u32 = 1;
pub(super) const BPF_MAP_TYPE_PROG_ARRAY: u32 = 3;
pub(super) const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
pub(super) const BPF_MAP_TYPE_ARRAY: u32 = 2;
pub(super) const BPF_MAP_TYPE_RINGBUF: u32 = 27;
const BPF_F_MMAPABLE: u32 = 1 << 10;
const BPF_F_NO_PREALLOC: u32 = 1;
const BPF_PROG_TYPE_TRACEPOINT: u32 = 5;
const BPF_PROG_TYPE_PERF_EVENT: u32 = 7;
const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;
const BPF_PROG_TYPE_TRACING: u32 = 26;
const BPF_TRACE_RAW_TP: u32 = 23;

fn bpf_call<T>(command: u32, attr: &mut T) -> Result<libc::c_long, Errno> {
    // SAFETY: `attr` is a valid, zero-padded attribute block of the size passed.
    let result = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            command as libc::c_long,
            attr as *mut T,
            std::mem::size_of::<T>(),
        )
    };
    if result < 0 {
        return Err(Errno::last());
    }
    Ok(result)
}

/// A command that makes a descriptor.
fn bpf<T>(command: u32, attr: &mut T) -> Result<OwnedFd, Errno> {
    let fd = bpf_call(command, attr)?;
    // SAFETY: a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

#[repr(C)]
#[derive(Default)]
struct MapUpdate {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// Sets `key` to `value` in the map `map` (8-byte keys and values).
pub(super) fn update_elem(map: RawFd, key: u64, value: u64) -> Result<(), Errno> {
    update_bytes(map, &key.to_ne_bytes(), &value.to_ne_bytes())
}

/// Removes `key` from the hash map `map` (8-byte keys).
pub(super) fn delete_elem(map: RawFd, key: u64) -> Result<(), Errno> {
    delete_bytes(map, &key.to_ne_bytes())
}

/// Sets `key` to `value` in the map `map` (keys and values of these sizes).
pub(super) fn update_bytes(map: RawFd, key: &[u8], value: &[u8]) -> Result<(), Errno> {
    let mut attr = MapUpdate {
        map_fd: map as u32,
        key: key.as_ptr() as u64,
        value: value.as_ptr() as u64,
        ..Default::default()
    };
    bpf_call(BPF_MAP_UPDATE_ELEM, &mut attr).map(|_| ())
}

/// Whether the hash map `map` holds `key` (keys of this size; values of at most 8 bytes).
pub(super) fn holds_key(map: RawFd, key: &[u8]) -> bool {
    let mut value = 0u64;
    let mut attr = MapUpdate {
        map_fd: map as u32,
        key: key.as_ptr() as u64,
        value: &mut value as *mut u64 as u64,
        ..Default::default()
    };
    bpf_call(BPF_MAP_LOOKUP_ELEM, &mut attr).is_ok()
}

/// Removes `key` from the hash map `map` (keys of this size).
pub(super) fn delete_bytes(map: RawFd, key: &[u8]) -> Result<(), Errno> {
    let mut attr = MapUpdate {
        map_fd: map as u32,
        key: key.as_ptr() as u64,
        ..Default::default()
    };
    bpf_call(BPF_MAP_DELETE_ELEM, &mut attr).map(|_| ())
}

#[repr(C)]
#[derive(Default)]
struct MapCreate {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    /// For a `tracing` program: how it attaches (`BPF_TRACE_RAW_TP`).
    expected_attach_type: u32,
    prog_btf_fd: u32,
    func_info_rec_size: u32,
    func_info: u64,
    func_info_cnt: u32,
    line_info_rec_size: u32,
    line_info: u64,
    line_info_cnt: u32,
    /// For a `tracing` program: the kernel's type it attaches to (its id in the kernel's BTF).
    attach_btf_id: u32,
    attach_btf_obj_fd: u32,
    _pad: u32,
}

/// An array (mapped into fsprof: the slot addresses are written there), a hash map or a ring
/// buffer (of `max_entries` bytes).
pub(super) fn create_map(
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
) -> Result<OwnedFd, Errno> {
    let flags = if map_type == BPF_MAP_TYPE_ARRAY {
        BPF_F_MMAPABLE
    } else {
        0
    };
    create_map_with(map_type, key_size, value_size, max_entries, flags)
}

/// A hash map whose elements the kernel allocates as fsprof adds them, not all `max_entries`
/// up front (the rules' 32768 were megabytes and milliseconds for each process recorded). Only
/// for maps that programs needing Linux 6.9 use (the walk's): before 6.1 the verifier refuses a
/// perf-event program that uses such a map, so the maps of the sampling programs are
/// preallocated.
pub(super) fn create_sparse_hash(
    key_size: u32,
    value_size: u32,
    max_entries: u32,
) -> Result<OwnedFd, Errno> {
    create_map_with(
        BPF_MAP_TYPE_HASH,
        key_size,
        value_size,
        max_entries,
        BPF_F_NO_PREALLOC,
    )
}

fn create_map_with(
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
) -> Result<OwnedFd, Errno> {
    let mut attr = MapCreate {
        map_type,
        key_size,
        value_size,
        max_entries,
        map_flags,
        map_name: *b"fsprof_slots\0\0\0\0",
        ..Default::default()
    };
    bpf(BPF_MAP_CREATE, &mut attr)
}

pub(super) fn load(insns: Vec<Insn>) -> Result<OwnedFd, String> {
    load_as(BPF_PROG_TYPE_PERF_EVENT, insns)
}

/// Loads a program for a tracepoint's perf event (its context the tracepoint's record), attached
/// to the event as a sampling event's program is (`cpu_wide/tick.rs`).
pub(super) fn load_tracepoint_event_program(insns: Vec<Insn>) -> Result<OwnedFd, String> {
    load_as(BPF_PROG_TYPE_TRACEPOINT, insns)
}

/// Loads a program run at a tracepoint (`cpu_wide.rs`), attached with [`attach_tracepoint`].
pub(super) fn load_tracepoint_program(insns: Vec<Insn>) -> Result<OwnedFd, String> {
    load_as(BPF_PROG_TYPE_RAW_TRACEPOINT, insns)
}

/// Loads a program for the tracepoint whose hook has the type `hook` in the kernel's BTF (a
/// `btf_trace_*` typedef: `tp_btf`), attached with [`attach_typed_tracepoint`]: its arguments
/// have their types, so that the verifier lets it load members of the structures they point
/// to directly, rather than through `bpf_probe_read_kernel`.
pub(super) fn load_typed_tracepoint_program(
    insns: Vec<Insn>,
    hook: u32,
) -> Result<OwnedFd, String> {
    load_with(BPF_PROG_TYPE_TRACING, insns, |attr| {
        attr.expected_attach_type = BPF_TRACE_RAW_TP;
        attr.attach_btf_id = hook;
    })
}

#[repr(C)]
#[derive(Default)]
struct RawTracepointOpen {
    name: u64,
    prog_fd: u32,
    _pad: u32,
    cookie: u64,
}

/// Runs `program` at every hit of the kernel's tracepoint `name` (`sched_switch`, ...), with
/// the tracepoint's arguments as its context, until the returned descriptor is closed. Needs
/// no tracefs.
pub(super) fn attach_tracepoint(
    name: &std::ffi::CStr,
    program: &OwnedFd,
) -> Result<OwnedFd, Errno> {
    let mut attr = RawTracepointOpen {
        name: name.as_ptr() as u64,
        prog_fd: program.as_raw_fd() as u32,
        ..Default::default()
    };
    bpf(BPF_RAW_TRACEPOINT_OPEN, &mut attr)
}

fn load_as(prog_type: u32, insns: Vec<Insn>) -> Result<OwnedFd, String> {
    load_with(prog_type, insns, |_| {})
}

/// [`load_as`], with `more` of the attributes set.
fn load_with(
    prog_type: u32,
    insns: Vec<Insn>,
    more: impl FnOnce(&mut ProgLoad),
) -> Result<OwnedFd, String> {
    let license = c"GPL"; // probe_read_user is a GPL-only helper
    let mut log = vec![0u8; 1 << 20];
    let mut attr = ProgLoad {
        prog_type,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        prog_name: *b"fsprof_marks\0\0\0\0",
        ..Default::default()
    };
    more(&mut attr);
    match bpf(BPF_PROG_LOAD, &mut attr) {
        Ok(fd) => Ok(fd),
        Err(Errno::EACCES | Errno::EINVAL | Errno::EFAULT) => {
            // Load again with the verifier's log, to say why.
            attr.log_level = 1;
            attr.log_size = log.len() as u32;
            attr.log_buf = log.as_mut_ptr() as u64;
            let again = bpf(BPF_PROG_LOAD, &mut attr);
            let end = log.iter().position(|b| *b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            // The verifier's complaint: its log's last line but for the statistics after it.
            let last = text
                .lines()
                .rev()
                .filter(|l| !l.trim().is_empty() && !l.starts_with("processed "))
                .find(|l| !l.starts_with("verification time"))
                .unwrap_or("");
            match again {
                Ok(fd) => Ok(fd),
                Err(e) => Err(format!("{}: {last}", e.desc())),
            }
        }
        Err(e) => Err(e.desc().to_owned()),
    }
}

/// Runs `program` (loaded by [`load_typed_tracepoint_program`]) at every hit of the tracepoint
/// its hook type names, until the returned descriptor is closed.
pub(super) fn attach_typed_tracepoint(program: &OwnedFd) -> Result<OwnedFd, Errno> {
    // No name: the kernel takes the tracepoint from the program's hook type.
    let mut attr = RawTracepointOpen {
        prog_fd: program.as_raw_fd() as u32,
        ..Default::default()
    };
    bpf(BPF_RAW_TRACEPOINT_OPEN, &mut attr)
}

/// Maps `len` bytes of `fd` from `offset`, shared, readable (and writable if `write`).
pub(super) fn map_shared(
    fd: &OwnedFd,
    len: usize,
    write: bool,
    offset: usize,
) -> Result<*mut u8, Errno> {
    let protection = if write {
        libc::PROT_READ | libc::PROT_WRITE
    } else {
        libc::PROT_READ
    };
    // SAFETY: a new mapping chosen by the kernel; the result is checked.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            protection,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            offset as libc::off_t,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(Errno::last());
    }
    Ok(base.cast())
}

pub(super) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as usize
}
