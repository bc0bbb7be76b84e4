//! Function ranges from a module's unwind tables (the FDEs of `.eh_frame`, which stripping keeps:
//! unwinding needs them): the start of the function covering an address that no symbol names,
//! so that in a stripped binary every address of one function gets one name,
//! `module+0xSTART`, and call paths, folded stacks and flamegraphs group by function instead of
//! by return address. It does not name anything (`symbols.rs` does).
//!
//! The section is untrusted: a malformed entry ends the walk (the ranges read so far are kept),
//! and at most [`MAX_RANGES`] are kept.

use addr2line::gimli::{self, UnwindSection};
use object::{Object, ObjectSection};

/// Most function ranges kept per module (a large C++ program has a few hundred thousand).
const MAX_RANGES: usize = 1 << 21;

/// The functions of one module, as its unwind tables state them (addresses as the ELF file
/// states them).
#[derive(Default)]
pub(super) struct FunctionRanges {
    /// (start, end), sorted by start.
    ranges: Vec<(u64, u64)>,
}

impl FunctionRanges {
    /// The ranges of `object`'s `.eh_frame` (none if it has none or it cannot be read).
    pub(super) fn from_object(object: &object::File) -> FunctionRanges {
        let Some(section) = object.section_by_name(".eh_frame") else {
            return FunctionRanges::default();
        };
        let Ok(data) = section.data() else {
            return FunctionRanges::default();
        };
        let eh_frame = gimli::EhFrame::new(data, gimli::LittleEndian);
        let mut bases = gimli::BaseAddresses::default().set_eh_frame(section.address());
        if let Some(text) = object.section_by_name(".text") {
            bases = bases.set_text(text.address());
        }
        if let Some(got) = object.section_by_name(".got") {
            bases = bases.set_got(got.address());
        }
        let mut ranges = Vec::new();
        let mut entries = eh_frame.entries(&bases);
        while let Ok(Some(entry)) = entries.next() {
            let gimli::CieOrFde::Fde(partial) = entry else {
                continue;
            };
            let Ok(fde) =
                partial.parse(|section, bases, offset| section.cie_from_offset(bases, offset))
            else {
                continue;
            };
            let start = fde.initial_address();
            if fde.len() > 0 {
                ranges.push((start, start.saturating_add(fde.len())));
            }
            if ranges.len() >= MAX_RANGES {
                break;
            }
        }
        ranges.sort_unstable();
        FunctionRanges { ranges }
    }

    /// The start of the function covering `svma`, if the unwind tables have one.
    pub(super) fn start_of(&self, svma: u64) -> Option<u64> {
        let after = self.ranges.partition_point(|(start, _)| *start <= svma);
        let (start, end) = *self.ranges.get(after.checked_sub(1)?)?;
        (svma < end).then_some(start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_binarys_functions_are_found_by_their_unwind_tables() {
        let image = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let object = object::File::parse(&*image).unwrap();
        let ranges = FunctionRanges::from_object(&object);
        assert!(ranges.ranges.len() > 100, "{} ranges", ranges.ranges.len());
        // Every address of a function maps to its start; outside every range, nothing.
        let (start, end) = ranges.ranges[ranges.ranges.len() / 2];
        assert_eq!(ranges.start_of(start), Some(start));
        assert_eq!(ranges.start_of(end - 1), Some(start));
        assert_eq!(ranges.start_of(0), None);
        assert_eq!(FunctionRanges::default().start_of(start), None);
    }
}
