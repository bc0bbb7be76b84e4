//! The functions of a process's modules with the rule of each one's body, for the BPF walk
//! (`walk.rs`) to follow a frame whose return address it has not learnt, and the innermost
//! frame, whose instruction pointer can be anywhere. A function's body is the longest stretch
//! of it with one rule in its `.eh_frame` (after the prologue, before the epilogue): a call
//! returns there in code as compilers lay it out, and a sample mostly lands there. Where it
//! does not (a prologue, a call made before the frame is set up), the walk reads the wrong
//! words; the unwinder, which reads them, then misses the ones it needs, and nothing is
//! wrong, only not completed.
//!
//! Parses with gimli (the reader framehop uses); it does not unwind, and holds nothing: the
//! table is written into a BPF map by `rules.rs`.

use crate::native::unwind::FrameRule;
use crate::native::walk_tables_cache::{self, CACHED_FROM};
use crate::program::modules::Module;
use gimli::{
    BaseAddresses, CfaRule, CieOrFde, EhFrame, LittleEndian, RegisterRule, UnwindContext,
    UnwindSection, X86_64,
};

/// The functions of `module` (each: its start in the process, and its body's rule if the walk
/// can follow it), by address; at most `most`.
pub fn functions(module: &Module, most: usize) -> Vec<(u64, Option<FrameRule>)> {
    let mut all = Vec::new();
    module_functions(module, &mut all, most);
    // Where its code ends, none: an address beyond is no function of its.
    all.push((module.range.end, None));
    all.sort_unstable_by_key(|(start, _)| *start);
    all.dedup_by_key(|(start, _)| *start);
    all
}

/// FDEs per thread reading a module's functions: rustc's driver (107 000) is read by four.
const FDES_PER_THREAD: usize = 32_000;

/// Appends the functions of `module` with an FDE in its `.eh_frame` (until `out` has `most`):
/// those `.eh_frame_hdr` lists, read by several threads when they are many, else those
/// `.eh_frame` holds, in order. A large module's, listed by its `.eh_frame_hdr`, is kept on
/// disk (`walk_tables_cache.rs`) and taken from there when it was.
fn module_functions(module: &Module, out: &mut Vec<(u64, Option<FrameRule>)>, most: usize) {
    use object::{Object, ObjectSection};
    let Ok(file) = object::File::parse(&*module.image) else {
        return;
    };
    let Some(section) = file.section_by_name(".eh_frame") else {
        return;
    };
    let Ok(data) = section.data() else {
        return;
    };
    let eh_frame = EhFrame::new(data, LittleEndian);
    let mut bases = BaseAddresses::default().set_eh_frame(section.address());
    if let Some(text) = file.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    let header = (file.section_by_name(".eh_frame_hdr"))
        .and_then(|header| Some((header.address(), header.data().ok()?)));
    let key = header.map(|(address, bytes)| {
        let addresses = [section.address(), data.len() as u64, address];
        let addresses: Vec<u8> = addresses.iter().flat_map(|a| a.to_le_bytes()).collect();
        walk_tables_cache::key(&[&addresses, bytes])
    });
    if let Some(table) = key.and_then(|key| walk_tables_cache::load(key, most)) {
        let biased =
            (table.into_iter()).map(|(start, rule)| (start.wrapping_add(module.bias), rule));
        out.extend(biased.filter(|(start, _)| module.range.contains(start)));
        return;
    }
    let offsets = header.and_then(|(address, bytes)| {
        let bases = bases.clone().set_eh_frame_hdr(address);
        let parsed = gimli::EhFrameHdr::new(bytes, LittleEndian)
            .parse(&bases, 8)
            .ok()?;
        let table = parsed.table()?;
        let mut offsets = Vec::new();
        let mut entries = table.iter(&bases);
        while let Ok(Some((_, fde))) = entries.next() {
            if offsets.len() > most {
                break;
            }
            offsets.push(table.pointer_to_offset(fde).ok()?);
        }
        Some(offsets)
    });
    let reader = Reader {
        eh_frame,
        bases,
        bias: module.bias,
    };
    match offsets {
        Some(offsets) => {
            let whole = reader.read_listed(&offsets, out) && offsets.len() <= most;
            if let Some(key) = key.filter(|_| whole && out.len() >= CACHED_FROM) {
                let unbiased =
                    (out.iter()).map(|(start, rule)| (start.wrapping_sub(module.bias), *rule));
                walk_tables_cache::store(key, &unbiased.collect::<Vec<_>>());
            }
        }
        None => {
            // Every FDE in the section, in order (no header to find them by).
            let mut entries = reader.eh_frame.entries(&reader.bases);
            let mut offsets = std::iter::from_fn(|| loop {
                match entries.next() {
                    Ok(Some(CieOrFde::Fde(partial))) => {
                        return Some(gimli::EhFrameOffset(partial.offset()))
                    }
                    Ok(Some(CieOrFde::Cie(_))) => continue,
                    _ => return None,
                }
            });
            out.extend(reader.read(&mut offsets.by_ref().take(most)));
        }
    }
    out.truncate(most);
}

/// Reads FDEs of one module's `.eh_frame` into functions.
struct Reader<'a> {
    eh_frame: EhFrame<Slice<'a>>,
    bases: BaseAddresses,
    bias: u64,
}

impl Reader<'_> {
    /// The functions of the FDEs at `offsets`, those that parse, by several threads when they
    /// are many; whether every thread finished.
    fn read_listed(
        &self,
        offsets: &[gimli::EhFrameOffset],
        out: &mut Vec<(u64, Option<FrameRule>)>,
    ) -> bool {
        std::thread::scope(|scope| {
            let threads: Vec<_> = (offsets.chunks(FDES_PER_THREAD))
                .map(|chunk| scope.spawn(|| self.read(&mut chunk.iter().copied())))
                .collect();
            let mut whole = true;
            for thread in threads {
                match thread.join() {
                    Ok(found) => out.extend(found),
                    Err(_) => whole = false,
                }
            }
            whole
        })
    }

    /// The functions of the FDEs at `offsets`, those that parse.
    fn read(
        &self,
        offsets: &mut dyn Iterator<Item = gimli::EhFrameOffset>,
    ) -> Vec<(u64, Option<FrameRule>)> {
        let (eh_frame, bases) = (&self.eh_frame, &self.bases);
        let mut found = Vec::new();
        let mut context = Box::new(UnwindContext::new());
        let mut cies = std::collections::HashMap::new();
        for offset in offsets {
            let fde = eh_frame.partial_fde_from_offset(bases, offset);
            let Ok(fde) = fde.and_then(|partial| {
                // The CIEs, parsed once each (most FDEs share a few).
                partial.parse(|_, bases, offset| {
                    if let Some(cie) = cies.get(&offset.0) {
                        return Ok(Clone::clone(cie));
                    }
                    let cie = eh_frame.cie_from_offset(bases, offset)?;
                    cies.insert(offset.0, cie.clone());
                    Ok(cie)
                })
            }) else {
                continue;
            };
            if fde.len() > 0 {
                let rule = body_rule(eh_frame, bases, &mut context, &fde);
                found.push((fde.initial_address().wrapping_add(self.bias), rule));
            }
        }
        found
    }
}

type Slice<'a> = gimli::EndianSlice<'a, LittleEndian>;
type Fde<'a> = gimli::FrameDescriptionEntry<Slice<'a>>;

/// The rule of the longest stretch of `fde` with one row, if the walk can follow it.
fn body_rule(
    eh_frame: &EhFrame<Slice<'_>>,
    bases: &BaseAddresses,
    context: &mut UnwindContext<usize>,
    fde: &Fde<'_>,
) -> Option<FrameRule> {
    let mut table = fde.rows(eh_frame, bases, context).ok()?;
    let mut best: Option<(u64, Option<FrameRule>)> = None;
    while let Ok(Some(row)) = table.next_row() {
        let length = row.end_address().saturating_sub(row.start_address());
        if best.as_ref().is_none_or(|(longest, _)| length > *longest) {
            best = Some((length, rule(row)));
        }
    }
    best.and_then(|(_, rule)| rule)
}

/// A row as the walk's rule, if it can be one.
fn rule(row: &gimli::UnwindTableRow<usize>) -> Option<FrameRule> {
    match row.register(X86_64::RA) {
        Some(RegisterRule::Undefined) => return Some(FrameRule::Root),
        Some(RegisterRule::Offset(-8)) | None => {}
        _ => return None,
    }
    let bp_saved = match row.register(X86_64::RBP) {
        None | Some(RegisterRule::SameValue | RegisterRule::Undefined) => 0,
        Some(RegisterRule::Offset(offset)) => i16::try_from(offset).ok()?,
        _ => return None,
    };
    let CfaRule::RegisterAndOffset { register, offset } = row.cfa() else {
        return None;
    };
    let cfa = u32::try_from(*offset).ok().filter(|o| *o < 1 << 30)?;
    match *register {
        X86_64::RSP => Some(FrameRule::StackPointer { cfa, bp_saved }),
        X86_64::RBP => Some(FrameRule::FramePointer { cfa, bp_saved }),
        _ => None,
    }
}
