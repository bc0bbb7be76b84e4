//! The one fact the perf backend takes from the kernel's own type information
//! (`/sys/kernel/btf/vmlinux`, BTF): where a thread's scheduling state lies in the kernel's
//! `struct task_struct`, so that the program run as a thread leaves its CPU can tell a thread
//! that was preempted (still runnable: its state is 0) from one that blocks (`bpf.rs`). It reads
//! the type section once, in place, looking only at structures' names: a general BTF library
//! (btf-rs) indexes all of the kernel's hundred thousand types first, 160 ms at each start on
//! the 2-core test machine, for this one member. Everything read is bounded; a kernel without
//! BTF, or whose layout is not understood, gives `None` (departures then carry no stack).

use std::sync::OnceLock;

const BTF_PATH: &str = "/sys/kernel/btf/vmlinux";
/// The kernel's BTF is a few MB; more is not a kernel's.
const MOST_BYTES: u64 = 64 << 20;
const MAGIC: u16 = 0xeb9f;
const KIND_STRUCT: u32 = 4;

/// The byte offset of the scheduling state (`__state`, `state` before Linux 5.14) in the
/// running kernel's `struct task_struct`, read once.
pub(super) fn task_state_offset() -> Option<u32> {
    static OFFSET: OnceLock<Option<u32>> = OnceLock::new();
    *OFFSET.get_or_init(|| {
        use std::io::Read;
        let mut bytes = Vec::new();
        let file = std::fs::File::open(BTF_PATH).ok()?;
        file.take(MOST_BYTES).read_to_end(&mut bytes).ok()?;
        member_offset(&bytes, "task_struct", &["__state", "state"])
    })
}

/// The byte offset of the first of `members` found in the structure named `name`, in the BTF
/// blob `btf` (its own byte order); `None` if either is missing, the member is a bit field not
/// on a byte, or the blob is malformed.
fn member_offset(btf: &[u8], name: &str, members: &[&str]) -> Option<u32> {
    let u16_at = |at: usize| Some(u16::from_ne_bytes(btf.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_ne_bytes(btf.get(at..at + 4)?.try_into().ok()?));
    if u16_at(0)? != MAGIC {
        return None;
    }
    let header = u32_at(4)? as usize;
    let (type_off, type_len) = (u32_at(8)? as usize, u32_at(12)? as usize);
    let (str_off, str_len) = (u32_at(16)? as usize, u32_at(20)? as usize);
    let types =
        header.checked_add(type_off)?..header.checked_add(type_off)?.checked_add(type_len)?;
    let strings = btf.get(header + str_off..(header + str_off).checked_add(str_len)?)?;
    let string = |offset: u32| -> Option<&[u8]> {
        let rest = strings.get(offset as usize..)?;
        Some(&rest[..rest.iter().position(|b| *b == 0)?])
    };
    let mut at = types.start;
    while at + 12 <= types.end {
        let (name_off, info) = (u32_at(at)?, u32_at(at + 4)?);
        let (kind, vlen) = ((info >> 24) & 0x1f, (info & 0xffff) as usize);
        let kind_flag = info >> 31 == 1;
        let extra = match kind {
            1 | 14 | 17 => 4,             // int, var, decl tag
            3 => 12,                      // array
            4 | 5 | 15 | 19 => 12 * vlen, // struct, union, datasec, enum64
            6 | 13 => 8 * vlen,           // enum, function prototype
            2 | 7..=12 | 16 | 18 => 0,    // pointers, qualifiers, functions, floats
            _ => return None,             // a kind this reader does not know: stop
        };
        let body = at + 12;
        if kind == KIND_STRUCT && string(name_off)? == name.as_bytes() {
            for wanted in members {
                for member in 0..vlen {
                    let entry = body + 12 * member;
                    if string(u32_at(entry)?)? != wanted.as_bytes() {
                        continue;
                    }
                    let offset = u32_at(entry + 8)?;
                    let bits = if kind_flag {
                        offset & 0xff_ffff
                    } else {
                        offset
                    };
                    return bits.is_multiple_of(8).then_some(bits / 8);
                }
            }
        }
        at = body + extra;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTF blob of one `int` and one structure `task_struct` with members `flags` and
    /// `__state` (at byte 24), built by hand in the kernel's layout.
    fn blob(kind_flag: bool) -> Vec<u8> {
        let strings = b"\0int\0task_struct\0flags\0__state\0";
        let name = |s: &str| {
            let at = strings
                .windows(s.len() + 1)
                .position(|w| &w[..s.len()] == s.as_bytes() && w[s.len()] == 0)
                .unwrap();
            at as u32
        };
        let mut types = Vec::new();
        let mut word = |w: u32| types.extend_from_slice(&w.to_ne_bytes());
        word(name("int"));
        word(1 << 24);
        word(4);
        word(0x20);
        word(name("task_struct"));
        word(KIND_STRUCT << 24 | 2 | u32::from(kind_flag) << 31);
        word(64);
        for (member, bits) in [("flags", 0u32), ("__state", 192)] {
            word(name(member));
            word(1);
            word(bits);
        }
        let mut btf = Vec::new();
        btf.extend_from_slice(&MAGIC.to_ne_bytes());
        btf.extend_from_slice(&[1, 0]);
        for w in [
            24u32,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ] {
            btf.extend_from_slice(&w.to_ne_bytes());
        }
        btf.extend_from_slice(&types);
        btf.extend_from_slice(strings);
        btf
    }

    #[test]
    fn the_state_member_is_found_by_structure_and_name() {
        for kind_flag in [false, true] {
            let btf = blob(kind_flag);
            assert_eq!(member_offset(&btf, "task_struct", &["__state"]), Some(24));
            assert_eq!(
                member_offset(&btf, "task_struct", &["nope", "flags"]),
                Some(0)
            );
            assert_eq!(member_offset(&btf, "mm_struct", &["__state"]), None);
        }
    }

    #[test]
    fn a_cut_or_foreign_blob_gives_nothing() {
        let btf = blob(false);
        for len in 0..btf.len() {
            assert_eq!(
                member_offset(&btf[..len], "task_struct", &["__state"]),
                None,
                "cut at {len}"
            );
        }
        let mut other = btf.clone();
        other[0] ^= 1;
        assert_eq!(member_offset(&other, "task_struct", &["__state"]), None);
    }

    #[test]
    fn the_running_kernel_has_one_where_it_publishes_its_types() {
        if std::path::Path::new(BTF_PATH).exists() {
            assert!(task_state_offset().is_some());
        }
    }
}
