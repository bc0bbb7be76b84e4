//! Where a member of one of the kernel's structures lies, from the kernel's own type
//! description (BTF, `/sys/kernel/btf/vmlinux`): the per-CPU sampler's switch program
//! (`cpu_wide.rs`) reads the pid of the thread coming onto a CPU from its `task_struct`, whose
//! layout differs between kernels and builds. It reads top-level members of named structures
//! only; it does not load BTF into the kernel or resolve types beyond that. The file is the
//! kernel's, but every length and index read from it is bounded before use.

/// The byte offset of `pid` in the kernel's `task_struct` ([`member_offset`]), read once per
/// fsprof: the description is megabytes, and every process recorded per CPU asks for it.
pub fn task_pid_offset() -> Option<u32> {
    static OFFSET: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *OFFSET.get_or_init(|| member_offset("task_struct", "pid"))
}

/// The byte offset of a thread's thread pointer (x86-64's `fs` base) in the kernel's
/// `task_struct` (`thread.fsbase`), read once per fsprof; `None` where the kernel does not
/// describe it (or on other architectures).
pub fn thread_pointer_offset() -> Option<u32> {
    static OFFSET: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *OFFSET.get_or_init(|| {
        if !cfg!(target_arch = "x86_64") {
            return None;
        }
        let thread = member_offset("task_struct", "thread")?;
        thread.checked_add(member_offset("thread_struct", "fsbase")?)
    })
}

/// The byte offset of `member` in the kernel's `struct name`, if the kernel describes it (a
/// top-level member, not a bit field).
pub fn member_offset(name: &str, member: &str) -> Option<u32> {
    let data = std::fs::read("/sys/kernel/btf/vmlinux").ok()?;
    find_member(&data, name, member)
}

const MAGIC: u16 = 0xeb9f;
const KIND_STRUCT: u32 = 4;

/// [`member_offset`] in the BTF blob `data`.
fn find_member(data: &[u8], name: &str, member: &str) -> Option<u32> {
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
    while at + 12 <= types_end {
        let (name_off, info) = (u32_at(at)?, u32_at(at + 4)?);
        at += 12;
        let kind = (info >> 24) & 0x1f;
        let vlen = (info & 0xffff) as usize;
        let bit_fields = info >> 31 == 1;
        if kind == KIND_STRUCT && name_is(name_off, name) {
            for m in 0..vlen {
                let entry = at + 12 * m;
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

    /// A blob of one struct `task_struct` { int other at 0; int pid at 1264 bytes }.
    fn blob(kind_flag: bool) -> Vec<u8> {
        let strings = b"\0task_struct\0other\0pid\0int\0";
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
        if std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
            let pid = member_offset("task_struct", "pid").expect("task_struct.pid");
            let tgid = member_offset("task_struct", "tgid").expect("task_struct.tgid");
            assert_eq!(tgid, pid + 4, "pid and tgid lie side by side");
        }
    }
}
