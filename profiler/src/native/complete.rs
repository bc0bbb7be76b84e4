//! Completing perf samples of deep stacks. The kernel copies 8 KiB of a thread's stack per
//! sample; a deeper stack's unwinding stops where the copy ends. The outer part of a deep stack
//! changes rarely (a recursion's frames are laid out the same way at every descent), so the
//! rest is taken from an *image*: the thread's outer stack read live (`process_vm_readv`, the
//! thread runs on), kept per thread and read again when it no longer fits.
//!
//! An image is used for a sample only when it agrees with what the sample itself saw:
//! * the seam: the return-address slots of the sample's two outermost frames in the copy hold
//!   the same words in the image (a different call path, or the same one shifted, puts other
//!   words there);
//! * the anchors: at each sample the BPF program also reads the words at a few return-address
//!   slots of the thread's outer frames, as they were at that instant (`layout::ANCHORS`: one slot
//!   per distinct return address, nearest the copy first, chosen from an image); every one of
//!   them must hold the same word in the image. A thread that went back up and down another
//!   way (`left_root` then `right_root`) has another return address in some slot;
//! * the turn: the first slot beyond the copy where the completed stack turns (holds another
//!   return address than the slot before it: a recursion turns once, into its caller) must be
//!   one of the anchors. An image is read after its sample, while the thread runs on: where the
//!   thread had gone back up meanwhile, the image holds dead stack, older frames that still
//!   look like a stack, and where it went down again, live frames of another descent. A stack
//!   unwound through both is spliced (a recursion with a leaf's frames in its middle; in the
//!   `deep` test target, 24 to 78% of the leaves' time before this rule); the splice is a turn,
//!   and the word the sample read there says what the frame really was;
//! * the chain: an image is kept with the slots of the stack first unwound through it (its
//!   sample's copy laid over it), and another sample may continue on it only from one of those
//!   slots, with the same return address: from there on its stack is the chain's. So a sample
//!   whose unwinding through its copy stopped at a frame of the chain, entered at the same stack
//!   pointer, takes the chain's frames from there rather than unwinding the image again
//!   (`Image::follow`: at 1000 Hz, unwinding a 10,000-frame image at every sample cost fsprof
//!   about 0.5 ms a sample, more than half its time, and the thread's ring overflowed).
//!
//! Then the sample's stack is unwound through the copy and on through the image; if it reaches
//! the root, that is the sample's stack. It can still be wrong where the thread's stack changed
//! beyond the turn, at no anchor, and came back to the same words at the seam, at the turn and
//! at every anchor. A sample taken before the thread had anchors is not completed (its image
//! gives the anchors). The words the BPF walk read at the sample (`walk.rs`) count as the
//! sample's own, as the copy does: the seam is in the copy, the turn and the join are beyond
//! what the sample saw, and they take precedence over the image's. A stack whose middle changes
//! between samples (rustc's) is completed by the walk, rarely here: the first turn beyond a
//! sample's copy is an anchor only when an earlier sample's copy ended at the same frame. Not
//! here: the unwinding (`unwind.rs`), the copies (`perf.rs`).

use crate::native::layout::ANCHORS;
use crate::native::memory_map::MAX_STACK_COPY;
use crate::native::unwind::Captured;
use crate::native::unwind::{read_word, StackView, UnwoundFrame};
use crate::program::remote::Remote;
use std::collections::HashMap;

/// Seam slots compared.
const SEAM_SLOTS: usize = 2;
/// Most bytes of images kept over all threads; past it, only the thread at hand keeps its own.
const MAX_IMAGE_BYTES: usize = 64 << 20;
/// Most images kept per thread (each is up to [`MAX_STACK_COPY`]), the latest used first: a
/// program that takes turns between a few ways down to its deep part (two phases) has images
/// of each, and the samples fsprof reads a few milliseconds after they were taken, some from
/// before a turn, find theirs; a recursion of random depths has chains ending at many depths
/// (the two-roots test completed 90 to 97% of its samples with 4, 92 to 99% with 16, 97 to
/// 98.6% with 32).
const IMAGES_PER_THREAD: usize = 32;

/// The images of the threads' outer stacks, and what became of the samples they were tried on.
#[derive(Default)]
pub struct Completer {
    images: HashMap<u32, Vec<Image>>,
    /// Samples completed from an image.
    pub completed: u64,
    /// Samples cut by the copy and left so: no image agreed with them.
    pub not_completed: u64,
    /// Whether new anchors were chosen for some thread since this was last reset.
    pub anchors_chosen: bool,
}

/// An image of a thread's stack from `start` up: the copy of the sample it was read for, then
/// the stack beyond, read live; and its chain: the return-address slots (and the addresses they
/// return to) of that sample's stack unwound through it, and that stack's frames, each by the
/// stack pointer it was entered with and its address.
struct Image {
    start: u64,
    bytes: Vec<u8>,
    chain: std::collections::HashSet<(u64, u64)>,
    frames: Vec<UnwoundFrame>,
    entered: HashMap<(u64, u64), usize>,
}

impl Image {
    fn word(&self, address: u64) -> Option<u64> {
        read_word(self.start, &self.bytes, address)
    }

    /// Keeps `captured`, the stack first unwound through the image, as its chain.
    fn set_chain(&mut self, captured: &Captured) {
        self.chain = return_slots(captured).collect();
        self.frames = captured.frames.clone();
        self.entered = (1..self.frames.len())
            .map(|i| ((self.frames[i - 1].cfa, self.frames[i].address), i))
            .collect();
    }

    /// `cut`, a sample's stack unwound through its copy alone, continued on the chain: where its
    /// last frame, the one whose caller the copy did not hold, is a frame of the chain entered
    /// at the same stack pointer, unwinding it through the image would read the words the
    /// chain's unwinding read from there on, so the rest is the chain's (for a 10,000-frame
    /// recursion, 10,000 frames not unwound again at every sample). `None` where it is not.
    fn follow(&self, cut: &Captured) -> Option<Captured> {
        let [.., inner, last] = cut.frames.as_slice() else {
            return None;
        };
        let at = *self.entered.get(&(inner.cfa, last.address))?;
        let mut frames = cut.frames[..cut.frames.len() - 1].to_vec();
        frames.extend_from_slice(&self.frames[at..]);
        Some(Captured {
            frames,
            complete: true,
        })
    }
}

impl Completer {
    /// For a sample of `tid` whose unwinding through `copy` stopped short (`cut`): its stack
    /// completed from an image that agrees with the sample (see the module's documentation), if
    /// one does; `unwind` unwinds the sample through a view. `anchors` are the words the
    /// program read at the sample; `top` is the end of the thread's stack mapping. Also returns
    /// new anchors for the thread when an image was read (to set for its next samples).
    pub fn complete(
        &mut self,
        tid: u32,
        (copy, cut, anchors): (StackView<'_>, &Captured, &[(u64, u64)]),
        top: u64,
        mut unwind: impl FnMut(StackView<'_>) -> Captured,
    ) -> (Option<Captured>, Option<[u64; ANCHORS]>) {
        let end = copy.end();
        if end >= top || copy.bytes.is_empty() {
            return (None, None); // the copy was not what cut it
        }
        let seam = seam(copy, cut);
        // An image must hold the seam's slots.
        let start = seam.first().map_or(end, |(slot, _)| *slot);
        // A new image starts at the sample's stack pointer: it also serves samples up to the
        // copy's size deeper.
        let agrees = |image: &Image| {
            !seam.is_empty()
                && !anchors.is_empty()
                && image.start <= start
                && seam.iter().all(|(at, word)| image.word(*at) == Some(*word))
                && anchors.iter().all(|(at, word)| {
                    if *at >= end {
                        image.word(*at) == Some(*word)
                    } else {
                        // In the copy: the sample's own word; below the stack pointer: not
                        // part of the stack then.
                        read_word(copy.start, copy.bytes, *at).is_none_or(|w| w == *word)
                    }
                })
        };
        let kept = self.images.entry(tid).or_default();
        for at in 0..kept.len() {
            if !agrees(&kept[at]) {
                continue;
            }
            let captured = (kept[at].follow(cut)).unwrap_or_else(|| unwind(view(copy, &kept[at])));
            if captured.complete
                && joins(&captured, (end, copy.instant), &kept[at].chain)
                && anchored_at_the_turn(&captured, (end, copy.instant), anchors)
            {
                let image = kept.remove(at);
                kept.insert(0, image);
                self.completed += 1;
                return (Some(captured), None);
            }
        }
        // A sample without anchors (its copies were lost, or came before the thread's anchors
        // were set) agrees with no image: reading one for it only chooses anchors, which a
        // thread with images already has. Read anyway, at every such sample, after a stall
        // that lost the copies (CI's machine, 18 ticks in 2 s), 10,000-frame images cost
        // fsprof milliseconds a sample and it fell further behind, losing the copies of
        // all later samples too.
        if anchors.is_empty() && !kept.is_empty() {
            self.not_completed += 1;
            return (None, None);
        }
        let Some(mut image) = read_image(tid, copy.start, top) else {
            self.not_completed += 1;
            return (None, None);
        };
        let captured = unwind(view(copy, &image));
        if !captured.complete {
            self.not_completed += 1;
            return (None, None);
        }
        let completed =
            agrees(&image) && anchored_at_the_turn(&captured, (end, copy.instant), anchors);
        // Kept with the sample's copy, and the words the walk read at the sample, in place of
        // what the thread holds there now: the chain is what the unwinding read (a chain
        // taken from the walk's words over stale bytes would lead a later sample off it).
        let copied = copy.bytes.len().min(image.bytes.len());
        image.bytes[..copied].copy_from_slice(&copy.bytes[..copied]);
        for (at, word) in copy.instant {
            let Some(offset) = at.checked_sub(image.start).map(|o| o as usize) else {
                continue;
            };
            if let Some(bytes) = offset
                .checked_add(8)
                .and_then(|end| image.bytes.get_mut(offset..end))
            {
                bytes.copy_from_slice(&word.to_le_bytes());
            }
        }
        image.set_chain(&captured);
        // New anchors only when the thread's did not serve this sample: otherwise a shallow
        // sample (cut only by a large frame near the root) would replace the anchors that the
        // deep ones need with some that lie above their turn.
        let anchors_now = (!completed).then(|| choose_anchors(&captured, end));
        let kept_bytes: usize = (self.images.values().flatten())
            .map(|image| image.bytes.len())
            .sum();
        if kept_bytes + image.bytes.len() > MAX_IMAGE_BYTES {
            self.images.retain(|t, _| *t == tid);
        }
        let kept = self.images.entry(tid).or_default();
        kept.insert(0, image);
        kept.truncate(IMAGES_PER_THREAD);
        // And the thread at hand keeps no more than the bound either (32 images of 8 MiB).
        while kept.len() > 1 && kept.iter().map(|i| i.bytes.len()).sum::<usize>() > MAX_IMAGE_BYTES
        {
            kept.pop();
        }
        if completed {
            self.completed += 1;
            return (Some(captured), None);
        }
        self.not_completed += 1;
        self.anchors_chosen |= anchors_now.is_some();
        (None, anchors_now)
    }

    /// Forgets a thread that exited.
    pub fn forget(&mut self, tid: u32) {
        self.images.remove(&tid);
    }
}

/// The return-address slots of a stack's frames (innermost first), each with the address it
/// returns to (frame i's slot holds the return address into frame i + 1, whose lookup address
/// is that return address minus one).
fn return_slots(captured: &Captured) -> impl Iterator<Item = (u64, u64)> + '_ {
    let frames = &captured.frames;
    (0..frames.len().saturating_sub(1))
        .filter(|i| frames[*i].cfa != u64::MAX)
        .map(|i| (frames[i].cfa - 8, frames[i + 1].address))
}

/// Whether the stack's first turn beyond what the sample saw (its first return-address slot
/// beyond the copy's end `end` and not among the words the walk read at the sample, `seen`,
/// holding another return address than the slot before it) is one of `anchors`.
fn anchored_at_the_turn(
    captured: &Captured,
    (end, seen): (u64, &[(u64, u64)]),
    anchors: &[(u64, u64)],
) -> bool {
    let mut before = None;
    let turn = return_slots(captured).find(|(slot, returns_to)| {
        // The cheap test first: a recursion's slots all hold one return address.
        let turns = before != Some(*returns_to) && !saw(*slot, end, seen);
        before = Some(*returns_to);
        turns
    });
    turn.is_none_or(|(turn, _)| anchors.iter().any(|(at, _)| *at == turn))
}

/// Whether the sample saw the word at `slot`: in its copy (which ends at `end`), or read by
/// the walk (`seen`, by address).
fn saw(slot: u64, end: u64, seen: &[(u64, u64)]) -> bool {
    slot < end || seen.binary_search_by_key(&slot, |(at, _)| *at).is_ok()
}

/// The copy, then the image beyond it.
fn view<'a>(copy: StackView<'a>, image: &'a Image) -> StackView<'a> {
    StackView {
        outer: (image.start, &image.bytes),
        ..copy
    }
}

/// The return-address slots (and the words in them) of `cut`'s frames in the copy, the
/// outermost [`SEAM_SLOTS`] (nearest the seam).
fn seam(copy: StackView<'_>, cut: &Captured) -> Vec<(u64, u64)> {
    let end = copy.end();
    let mut slots: Vec<(u64, u64)> = (cut.frames.iter())
        .filter(|frame| frame.cfa != u64::MAX)
        .map(|frame| frame.cfa.wrapping_sub(8))
        .filter(|slot| *slot >= copy.start && *slot < end)
        .filter_map(|slot| Some((slot, read_word(copy.start, copy.bytes, slot)?)))
        .collect();
    let keep = slots.len().saturating_sub(SEAM_SLOTS);
    slots.drain(..keep);
    slots
}

/// The thread's stack from `start` to `top` (at most [`MAX_STACK_COPY`]), read now.
fn read_image(tid: u32, start: u64, top: u64) -> Option<Image> {
    let len = (top.saturating_sub(start) as usize).min(MAX_STACK_COPY);
    let mut bytes = vec![0; len];
    let got = Remote::new(tid).read_long(start, &mut bytes).ok()?;
    bytes.truncate(got);
    (got > 0).then_some(Image {
        start,
        bytes,
        chain: Default::default(),
        frames: Vec::new(),
        entered: HashMap::new(),
    })
}

/// Whether the stack's first return-address slot beyond what the sample saw (see [`saw`]) is
/// on `chain` (with the same return address): from there on, unwinding the image follows the
/// chain. A stack the sample saw whole joins any.
fn joins(
    captured: &Captured,
    (end, seen): (u64, &[(u64, u64)]),
    chain: &std::collections::HashSet<(u64, u64)>,
) -> bool {
    return_slots(captured)
        .find(|(slot, _)| !saw(*slot, end, seen))
        .is_none_or(|first| chain.contains(&first))
}

/// Return-address slots of a complete stack's frames beyond the copy's end `end`, one per
/// distinct return address, nearest the copy first (a recursion's thousand frames hold one
/// return address: one anchor for them, and the rest for the frames that lead to it, where two
/// phases of a program differ); then, if there are fewer, the outermost slots left.
fn choose_anchors(captured: &Captured, end: u64) -> [u64; ANCHORS] {
    let slots: Vec<(u64, u64)> = return_slots(captured)
        .filter(|(slot, _)| *slot >= end)
        .collect();
    let mut chosen = Vec::with_capacity(ANCHORS);
    let mut seen = std::collections::HashSet::new();
    for (slot, returns_to) in &slots {
        if chosen.len() < ANCHORS && seen.insert(*returns_to) {
            chosen.push(*slot);
        }
    }
    for (slot, _) in slots.iter().rev() {
        if chosen.len() < ANCHORS && !chosen.contains(slot) {
            chosen.push(*slot);
        }
    }
    let mut anchors = [0u64; ANCHORS];
    anchors[..chosen.len()].copy_from_slice(&chosen);
    anchors
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::unwind::UnwoundFrame;

    fn frame(address: u64, cfa: u64) -> UnwoundFrame {
        UnwoundFrame { address, cfa }
    }

    #[test]
    fn anchors_go_to_distinct_return_addresses_nearest_the_copy_first() {
        // A recursion (frames 0 to 11 return into 7), then frames returning into 20 .. 25,
        // every 0x100 from 0x1000; the copy ends at 0x1400.
        let mut frames: Vec<UnwoundFrame> = (0..12).map(|i| frame(7, 0x1000 + 0x100 * i)).collect();
        frames.extend((0..6).map(|i| frame(20 + i, 0x1c00 + 0x100 * i)));
        frames.push(frame(99, u64::MAX));
        let captured = Captured {
            frames,
            complete: true,
        };
        let anchors = choose_anchors(&captured, 0x1400);
        // One slot for the recursion's return address (7, the first beyond the copy: 0x14f8),
        // then one per frame above it, then the outermost left.
        assert_eq!(anchors[0], 0x14f8);
        assert_eq!(
            &anchors[1..8],
            &[0x1af8, 0x1bf8, 0x1cf8, 0x1df8, 0x1ef8, 0x1ff8, 0x20f8]
        );
    }

    /// A sample cut inside the chain's recursion goes on with the chain's frames from the frame
    /// its copy could not unwind (entered at the same stack pointer); one entered elsewhere, or
    /// at another address, does not.
    #[test]
    fn a_cut_stack_goes_on_with_the_chains_frames_where_it_entered_one() {
        // The chain: a recursion (frames returning into 7, every 0x100 from 0x1000), its
        // caller, the root.
        let mut frames: Vec<UnwoundFrame> = (0..12).map(|i| frame(7, 0x1000 + 0x100 * i)).collect();
        frames.extend([frame(20, 0x1c00), frame(99, u64::MAX)]);
        let mut image = Image {
            start: 0x0f00,
            bytes: vec![0; 0x1000],
            chain: Default::default(),
            frames: Vec::new(),
            entered: HashMap::new(),
        };
        image.set_chain(&Captured {
            frames: frames.clone(),
            complete: true,
        });
        // A sample two frames deeper (a leaf, 5, then the recursion), cut at its frame entered
        // at 0x1300 (the chain's frame 3).
        let cut = Captured {
            frames: vec![
                frame(5, 0x0e00),
                frame(7, 0x0f00),
                frame(7, 0x1000),
                frame(7, 0x1100),
                frame(7, 0x1200),
                frame(7, 0x1300),
                frame(7, u64::MAX),
            ],
            complete: false,
        };
        let followed = image.follow(&cut).unwrap();
        assert!(followed.complete);
        assert_eq!(followed.frames[..6], cut.frames[..6]);
        assert_eq!(followed.frames[6..], frames[4..]);
        // Entered at a stack pointer the chain never had, or at another address: not followed.
        let mut elsewhere = cut.clone();
        elsewhere.frames[5].cfa = 0x1310;
        assert!(image.follow(&elsewhere).is_none());
        let mut other = cut.clone();
        other.frames[6].address = 8;
        assert!(image.follow(&other).is_none());
    }

    #[test]
    fn the_first_turn_beyond_the_copy_must_be_anchored() {
        // A recursion (slots at 0x10f8 .. 0x1af8 return into 7), its caller (slot 0x1bf8
        // returns into 20), the root; the copy ends at 0x1400.
        let mut frames: Vec<UnwoundFrame> = (0..12).map(|i| frame(7, 0x1000 + 0x100 * i)).collect();
        frames.extend([frame(20, 0x1c00), frame(99, u64::MAX)]);
        let whole = Captured {
            frames,
            complete: true,
        };
        // The recursion's slots do not turn; its caller's does.
        assert!(anchored_at_the_turn(&whole, (0x1400, &[]), &[(0x1af8, 20)]));
        assert!(!anchored_at_the_turn(
            &whole,
            (0x1400, &[]),
            &[(0x14f8, 7), (0x1bf8, 99)]
        ));
        // The walk read the recursion's slots and the caller's at the sample: the turn is
        // beyond them, at the root's (none).
        let walked: Vec<(u64, u64)> = (0x14f8..=0x1bf8).step_by(0x100).map(|a| (a, 7)).collect();
        assert!(anchored_at_the_turn(&whole, (0x1400, &walked), &[]));
        // A spliced stack: a leaf's frame (returning into 30) in the recursion's middle turns
        // twice; the first turn, at 0x15f8, must be anchored.
        let mut spliced = whole.clone();
        spliced.frames[7].address = 30;
        assert!(!anchored_at_the_turn(
            &spliced,
            (0x1400, &[]),
            &[(0x1af8, 20)]
        ));
        assert!(anchored_at_the_turn(
            &spliced,
            (0x1400, &[]),
            &[(0x15f8, 7)]
        ));
    }

    #[test]
    fn a_sample_continues_on_a_chain_only_from_one_of_its_slots() {
        let frames = vec![
            frame(7, 0x1100),
            frame(7, 0x1200),
            frame(20, 0x1300),
            frame(99, u64::MAX),
        ];
        let captured = Captured {
            frames,
            complete: true,
        };
        let chain: std::collections::HashSet<(u64, u64)> = [(0x11f8, 20), (0x12f8, 99)].into();
        // The first slot beyond 0x1180 is 0x11f8, returning into 20.
        assert!(joins(&captured, (0x1180, &[]), &chain));
        let other: std::collections::HashSet<(u64, u64)> = [(0x11f8, 21), (0x12f8, 99)].into();
        assert!(!joins(&captured, (0x1180, &[]), &other));
        // Unless the walk read that slot at the sample: then the first slot beyond it (the
        // root's) is the one to join on.
        assert!(joins(&captured, (0x1180, &[(0x11f8, 20)]), &other));
        let elsewhere: std::collections::HashSet<(u64, u64)> = [(0x12f8, 98)].into();
        assert!(!joins(&captured, (0x1180, &[(0x11f8, 20)]), &elsewhere));
        assert!(joins(
            &captured,
            (0x1180, &[(0x11f8, 20), (0x12f8, 99)]),
            &elsewhere
        ));
    }

    /// A thread with an image already: a sample of it without anchors (its copies lost) is
    /// left cut, without reading another image or unwinding through one.
    #[test]
    fn a_sample_without_anchors_reads_no_image_once_its_thread_has_one() {
        // fsprof's own memory stands for the thread's stack: readable, so an image would be read.
        let memory = vec![0u8; 0x4000];
        let start = memory.as_ptr() as u64;
        let copy = StackView::new(start, &memory[..0x1000]);
        let cut = Captured {
            frames: vec![frame(1, start + 0x800), frame(2, u64::MAX)],
            complete: false,
        };
        let tid = std::process::id();
        let mut completer = Completer::default();
        let image = read_image(tid, start, start + 0x4000).unwrap();
        completer.images.entry(tid).or_default().push(image);
        let unwound = |_: StackView<'_>| -> Captured { panic!("unwound through an image") };
        let (completed, anchors) =
            completer.complete(tid, (copy, &cut, &[]), start + 0x4000, unwound);
        assert!(completed.is_none() && anchors.is_none());
        assert_eq!(completer.images[&tid].len(), 1, "another image was read");
        assert_eq!(completer.not_completed, 1);
    }

    #[test]
    fn the_seam_is_the_return_address_slots_of_the_frames_in_the_copy() {
        let bytes: Vec<u8> = (0..0x2000u64 / 8).flat_map(|w| w.to_le_bytes()).collect();
        let copy = StackView::new(0x10000, &bytes);
        let cut = Captured {
            frames: vec![frame(1, 0x10800), frame(2, 0x11800), frame(3, u64::MAX)],
            complete: false,
        };
        // Both frames' slots are in the copy (0x10000 .. 0x12000); the root has none.
        let word = |slot: u64| (slot, (slot - 0x10000) / 8);
        assert_eq!(seam(copy, &cut), vec![word(0x107f8), word(0x117f8)]);
    }
}
