//! Where a member of one of the kernel's structures lies, from the kernel's own type description
//! (BTF, `/sys/kernel/btf/vmlinux`): the per-CPU sampler's switch program (`cpu_wide.rs`) reads the
//! pid of the thread coming onto a CPU from its `task_struct`, whose layout differs between kernels
//! and builds, and its fork program the process id of a task just made; the walk at the scheduler's
//! tick, where a thread's kernel stack is; and the id of the type of the `sched_switch`
//! tracepoint's hook, to which that program attaches where the kernel lets it (a program that then
//! reads its arguments' members directly). It reads top-level members of named structures and names
//! of typedefs only; it does not load BTF into the kernel or resolve types beyond that. The file is
//! the kernel's, but every length and index read from it is bounded before use.

/// The members fsprof's programs read, as `(structure, member)`: [`Offsets`] in this order.
const WANTED: [(&str, &str); 5] = [
    ("task_struct", "pid"),
    ("task_struct", "tgid"),
    ("task_struct", "thread"),
    ("thread_struct", "fsbase"),
    ("task_struct", "stack"),
];

/// The byte offsets of the members fsprof's programs read, from one walk of the description.
/// It is megabytes, read 4 KiB a call: 7 ms a read here, three reads per fsprof before these
/// were kept. Mapped where the kernel lets it be (Linux 6.16), a fraction of a millisecond.
struct Offsets {
    task_pid: Option<u32>,
    task_tgid: Option<u32>,
    task_thread: Option<u32>,
    thread_fsbase: Option<u32>,
    task_stack: Option<u32>,
    /// The type id of the typedef [`SWITCH_HOOK`].
    switch_hook: Option<u32>,
}

/// The typedef the kernel declares for the `sched_switch` tracepoint's hook: a program of the
/// `tracing` kind attached to it gets the hook's arguments with their types.
const SWITCH_HOOK: &str = "btf_trace_sched_switch";

/// [`Offsets`], read at the first call.
fn offsets() -> &'static Offsets {
    static OFFSETS: std::sync::OnceLock<Offsets> = std::sync::OnceLock::new();
    OFFSETS.get_or_init(|| {
        const PATH: &str = "/sys/kernel/btf/vmlinux";
        let file = std::fs::File::open(PATH);
        // SAFETY: the kernel's description, read-only and unchanging while it runs; only read
        // through the slice below, every index bounded.
        let mapped = (file.as_ref().ok())
            .and_then(|file| unsafe { memmap2::MmapOptions::new().map_copy_read_only(file) }.ok());
        let read = match mapped {
            Some(_) => Vec::new(),
            None => std::fs::read(PATH).unwrap_or_default(),
        };
        let data = mapped.as_deref().unwrap_or(&read);
        let ([task_pid, task_tgid, task_thread, thread_fsbase, task_stack], switch_hook) =
            find_members_and_typedef(data, &WANTED, SWITCH_HOOK);
        Offsets {
            task_pid,
            task_tgid,
            task_thread,
            thread_fsbase,
            task_stack,
            switch_hook,
        }
    })
}

/// The byte offset of `pid` in the kernel's `task_struct`: the per-CPU sampler's switch
/// program reads it for every process recorded per CPU.
pub fn task_pid_offset() -> Option<u32> {
    offsets().task_pid
}

/// The byte offset of `tgid` (its process's id) in the kernel's `task_struct`: the per-CPU
/// sampler's fork program tells a new process from a new thread by it.
pub fn task_tgid_offset() -> Option<u32> {
    offsets().task_tgid
}

/// The type id of the `sched_switch` tracepoint's hook (`btf_trace_sched_switch`), where the
/// kernel describes it.
pub fn switch_hook_type_id() -> Option<u32> {
    offsets().switch_hook
}

/// The byte offset of a thread's thread pointer (x86-64's `fs` base) in the kernel's
/// `task_struct` (`thread.fsbase`); `None` where the kernel does not describe it (or on other
/// architectures).
pub fn thread_pointer_offset() -> Option<u32> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    let offsets = offsets();
    offsets.task_thread?.checked_add(offsets.thread_fsbase?)
}

/// The byte offset of the pointer to a thread's kernel stack in the kernel's `task_struct`
/// (`stack`): its user registers lie at that stack's top (x86-64). `None` where the kernel
/// does not describe it (or on other architectures).
pub fn task_stack_offset() -> Option<u32> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    offsets().task_stack
}

const MAGIC: u16 = 0xeb9f;
const KIND_STRUCT: u32 = 4;
const KIND_TYPEDEF: u32 = 8;

/// The byte offset of `member` in `struct name` in the BTF blob `data`, if it describes it (a
/// top-level member, not a bit field).
#[cfg(test)]
fn find_member(data: &[u8], name: &str, member: &str) -> Option<u32> {
    let [offset] = find_members(data, &[(name, member)]);
    offset
}

/// The byte offsets of the members `wanted` (`(structure, member)`) in the BTF blob `data`,
/// each `None` where it does not describe it (a top-level member, not a bit field); walked once,
/// up to where all are found (a structure of a name wanted without the member does not end the
/// search: another of that name may have it).
#[cfg(test)]
fn find_members<const N: usize>(data: &[u8], wanted: &[(&str, &str); N]) -> [Option<u32>; N] {
    find_members_and_typedef(data, wanted, "").0
}

/// `find_members`, and the type id of the typedef named `typedef` (none for an empty name),
/// in the same walk.
fn find_members_and_typedef<const N: usize>(
    data: &[u8],
    wanted: &[(&str, &str); N],
    typedef: &str,
) -> ([Option<u32>; N], Option<u32>) {
    let mut found = [None; N];
    let mut typedef_id = None;
    walk_types(data, |id, kind, name_is, members| {
        if kind == KIND_TYPEDEF && typedef_id.is_none() && !typedef.is_empty() && name_is(typedef) {
            typedef_id = Some(id);
        }
        if kind == KIND_STRUCT {
            for (i, (name, member)) in wanted.iter().enumerate() {
                if found[i].is_none() && name_is(name) {
                    found[i] = members(member);
                }
            }
        }
        found.iter().all(Option::is_some) && (typedef.is_empty() || typedef_id.is_some())
    });
    (found, typedef_id)
}

/// Calls `visit` with each type in the BTF blob `data`: its id (from 1), its kind, a test of
/// its name, and (for a structure) a look-up of a member's byte offset in it; stops where
/// `visit` says `true` or the blob ends or is malformed.
fn walk_types(
    data: &[u8],
    mut visit: impl FnMut(u32, u32, &dyn Fn(&str) -> bool, &dyn Fn(&str) -> Option<u32>) -> bool,
) -> Option<()> {
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(
            data.get(at..at.checked_add(4)?)?.try_into().ok()?,
        ))
    };
    if data.get(0..2)? != MAGIC.to_le_bytes() {
        return None; // another byte order or not BTF: not read
    }
    let header = u32_at(4)? as usize;
    let (type_off, type_len) = (u32_at(8)? as usize, u32_at(12)? as usize);
    let (str_off, str_len) = (u32_at(16)? as usize, u32_at(20)? as usize);
    let types = header.checked_add(type_off)?;
    let types_end = types.checked_add(type_len)?.min(data.len());
    let strings = data.get(header.checked_add(str_off)?..)?;
    let strings = strings.get(..str_len.min(strings.len()))?;
    let name_is = |offset: u32, wanted: &str| -> bool {
        let Some(rest) = strings.get(offset as usize..) else {
            return false;
        };
        let end = rest.iter().position(|b| *b == 0).unwrap_or(rest.len());
        &rest[..end] == wanted.as_bytes()
    };
    let mut at = types;
    let mut id = 0u32;
    while at + 12 <= types_end {
        let (name_off, info) = (u32_at(at)?, u32_at(at + 4)?);
        at += 12;
        id += 1;
        let kind = (info >> 24) & 0x1f;
        let vlen = (info & 0xffff) as usize;
        let bit_fields = info >> 31 == 1;
        {
            let members_at = at;
            let member_offset = |member: &str| -> Option<u32> {
                if kind != KIND_STRUCT {
                    return None;
                }
                for m in 0..vlen {
                    let entry = members_at + 12 * m;
                    if entry + 12 > types_end {
                        return None;
                    }
                    if !name_is(u32_at(entry)?, member) {
                        continue;
                    }
                    let offset = u32_at(entry + 8)?;
                    let (bits, width) = if bit_fields {
                        (offset & 0x00ff_ffff, offset >> 24)
                    } else {
                        (offset, 0)
                    };
                    return (width == 0 && bits % 8 == 0).then_some(bits / 8);
                }
                None
            };
            if visit(id, kind, &|name| name_is(name_off, name), &member_offset) {
                return Some(());
            }
        }
        at += trailing(kind, vlen)?;
    }
    None
}

/// Bytes that follow a type's 12-byte header, by its kind (`linux/btf.h`); `None` for a kind
/// this reader does not know (the rest cannot be walked then).
fn trailing(kind: u32, vlen: usize) -> Option<usize> {
    Some(match kind {
        1 | 14 | 17 => 4,             // int, var, decl tag
        3 => 12,                      // array
        4 | 5 | 15 | 19 => 12 * vlen, // struct, union, datasec, enum64
        6 | 13 => 8 * vlen,           // enum, function prototype
        2 | 7..=12 | 16 | 18 => 0, // pointer, forward, typedef, qualifiers, func, float, type tag
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A blob of one struct `task_struct` { int other at 0; int pid at 1264 bytes }, and a
    /// typedef `hook` of it (type 3).
    fn blob(kind_flag: bool) -> Vec<u8> {
        let strings = b"\0task_struct\0other\0pid\0int\0hook\0";
        let mut types = Vec::new();
        let word = |v: &mut Vec<u8>, x: u32| v.extend_from_slice(&x.to_le_bytes());
        // type 1: int
        word(&mut types, 24);
        word(&mut types, 1 << 24);
        word(&mut types, 4);
        word(&mut types, 32);
        // type 2: the struct, two members
        word(&mut types, 1);
        word(&mut types, (4 << 24) | 2 | (u32::from(kind_flag) << 31));
        word(&mut types, 2048);
        for (name, offset) in [(13, 0), (19, 1264 * 8)] {
            word(&mut types, name);
            word(&mut types, 1);
            word(&mut types, offset);
        }
        // type 3: typedef hook of type 2
        word(&mut types, 27);
        word(&mut types, KIND_TYPEDEF << 24);
        word(&mut types, 2);
        let mut data = Vec::new();
        data.extend_from_slice(&MAGIC.to_le_bytes());
        data.extend_from_slice(&[1, 0]);
        word(&mut data, 24);
        word(&mut data, 0);
        word(&mut data, types.len() as u32);
        word(&mut data, types.len() as u32);
        word(&mut data, strings.len() as u32);
        data.extend_from_slice(&types);
        data.extend_from_slice(strings);
        data
    }

    #[test]
    fn a_member_is_found_by_its_structure_and_name() {
        for kind_flag in [false, true] {
            let data = blob(kind_flag);
            assert_eq!(find_member(&data, "task_struct", "pid"), Some(1264));
            assert_eq!(find_member(&data, "task_struct", "tgid"), None);
            assert_eq!(find_member(&data, "mm_struct", "pid"), None);
            let wanted = [("task_struct", "pid")];
            assert_eq!(
                find_members_and_typedef(&data, &wanted, "hook"),
                ([Some(1264)], Some(3))
            );
            assert_eq!(
                find_members_and_typedef(&data, &wanted, "task_struct").1,
                None
            );
        }
    }

    #[test]
    fn a_cut_or_mangled_blob_is_refused_without_a_panic() {
        let data = blob(true);
        for len in 0..data.len() {
            let _ = find_member(&data[..len], "task_struct", "pid");
        }
        let mut rng = fastrand::Rng::with_seed(3);
        for _ in 0..crate::fuzz::cases(20_000) {
            let bytes = crate::fuzz::mutate(&mut rng, &data);
            let _ = find_member(&bytes, "task_struct", "pid");
        }
    }

    /// The running kernel's own description, where it has one.
    #[test]
    fn the_running_kernel_says_where_a_task_keeps_its_pid() {
        if let Ok(data) = std::fs::read("/sys/kernel/btf/vmlinux") {
            let wanted = [("task_struct", "pid"), ("task_struct", "tgid")];
            let [pid, tgid] = find_members(&data, &wanted);
            let (pid, tgid) = (
                pid.expect("task_struct.pid"),
                tgid.expect("task_struct.tgid"),
            );
            assert_eq!(tgid, pid + 4, "pid and tgid lie side by side");
            assert_eq!(task_pid_offset(), Some(pid));
            assert_eq!(task_tgid_offset(), Some(tgid));
            assert!(switch_hook_type_id().is_some(), "{SWITCH_HOOK}");
            if cfg!(target_arch = "x86_64") {
                assert!(thread_pointer_offset().is_some());
            }
        }
    }
}
