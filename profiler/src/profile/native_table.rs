//! The native stacks of a recording as the builder keeps them until symbolization: each
//! distinct stack once, its addresses as indexes into a table of the distinct addresses (4
//! bytes a frame: a 10,000-frame recursion sampled at 2,000 depths is 20 M frames), within a
//! budget of frames ([`FRAME_BUDGET`]): past it, a new stack keeps only its innermost
//! [`CUT_TO`] frames and counts as cut. Not here: symbolizing them (`builder.rs`).

use super::RawNativeStack;
use foldhash::HashMap;
use std::hash::BuildHasher;

/// Most frames kept over all stacks (64 MiB of indexes).
pub const FRAME_BUDGET: usize = 16 << 20;
/// Frames a stack keeps once the budget is spent: its innermost.
pub const CUT_TO: usize = 1024;

/// The distinct native stacks (see the module's documentation).
#[derive(Default)]
pub struct NativeTable {
    addresses: Vec<u64>,
    address_ids: HashMap<u64, u32>,
    stacks: Vec<Stored>,
    /// Stack ids by their hash.
    ids: HashMap<u64, Vec<u32>>,
    hasher: foldhash::fast::RandomState,
    frames: usize,
    /// Stacks cut to their innermost frames because the budget was spent.
    pub cut: u64,
}

/// A stack as kept: [`RawNativeStack`] with address indexes.
#[derive(PartialEq, Eq, Hash)]
struct Stored {
    addresses: Vec<u32>,
    marks_at: Vec<u32>,
    truncated: bool,
    marks: Option<u32>,
}

impl NativeTable {
    /// The id of `stack` (cut first if the budget is spent).
    pub fn id(&mut self, mut stack: RawNativeStack) -> u32 {
        if self.frames + stack.addresses.len() > FRAME_BUDGET && stack.addresses.len() > CUT_TO {
            // Root first: the outer frames go; marks pushed there go before every frame.
            let drop = stack.addresses.len() - CUT_TO;
            stack.addresses.drain(..drop);
            for at in &mut stack.marks_at {
                *at = at.saturating_sub(drop as u32);
            }
            stack.truncated = true;
            self.cut += 1;
        }
        let addresses = (stack.addresses.iter())
            .map(|address| {
                *(self.address_ids).entry(*address).or_insert_with(|| {
                    self.addresses.push(*address);
                    self.addresses.len() as u32 - 1
                })
            })
            .collect();
        let stored = Stored {
            addresses,
            marks_at: stack.marks_at,
            truncated: stack.truncated,
            marks: stack.marks,
        };
        let candidates = self.ids.entry(self.hasher.hash_one(&stored)).or_default();
        if let Some(id) = (candidates.iter()).find(|id| self.stacks[**id as usize] == stored) {
            return *id;
        }
        let id = self.stacks.len() as u32;
        self.frames += stored.addresses.len();
        self.stacks.push(stored);
        candidates.push(id);
        id
    }

    /// The number of distinct stacks.
    pub fn len(&self) -> usize {
        self.stacks.len()
    }

    /// Copies of the stacks from the `first`th on, in the order of their ids.
    pub fn stacks_from(&self, first: usize) -> Vec<RawNativeStack> {
        (self.stacks.iter().skip(first))
            .map(|stored| self.raw(stored))
            .collect()
    }

    fn raw(&self, stored: &Stored) -> RawNativeStack {
        RawNativeStack {
            addresses: (stored.addresses.iter())
                .map(|id| self.addresses[*id as usize])
                .collect(),
            marks_at: stored.marks_at.clone(),
            truncated: stored.truncated,
            marks: stored.marks,
        }
    }

    /// The distinct addresses of all stacks.
    pub fn addresses(&self) -> &[u64] {
        &self.addresses
    }

    /// The stacks in id order, with their addresses.
    pub fn into_stacks(self) -> impl Iterator<Item = RawNativeStack> {
        let addresses = self.addresses;
        self.stacks.into_iter().map(move |stored| RawNativeStack {
            addresses: (stored.addresses.iter())
                .map(|id| addresses[*id as usize])
                .collect(),
            marks_at: stored.marks_at,
            truncated: stored.truncated,
            marks: stored.marks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(addresses: Vec<u64>, marks_at: Vec<u32>) -> RawNativeStack {
        RawNativeStack {
            addresses,
            marks_at,
            truncated: false,
            marks: None,
        }
    }

    #[test]
    fn equal_stacks_share_an_id_and_a_spent_budget_cuts_the_outer_frames() {
        let mut table = NativeTable::default();
        let a = table.id(stack(vec![1, 2, 3], vec![1]));
        let b = table.id(stack(vec![1, 2, 4], vec![1]));
        assert_eq!(table.id(stack(vec![1, 2, 3], vec![1])), a);
        assert_ne!(a, b);
        assert_eq!(table.addresses(), &[1, 2, 3, 4]);
        table.frames = FRAME_BUDGET; // spent
        let deep: Vec<u64> = (0..CUT_TO as u64 + 10).collect();
        let c = table.id(stack(deep, vec![5, 15]));
        assert_eq!(table.cut, 1);
        let stacks: Vec<RawNativeStack> = table.into_stacks().collect();
        let cut = &stacks[c as usize];
        assert_eq!(cut.addresses.len(), CUT_TO);
        assert_eq!(cut.addresses[0], 10);
        assert_eq!(cut.marks_at, vec![0, 5]);
        assert!(cut.truncated);
        assert_eq!(stacks[a as usize].addresses, vec![1, 2, 3]);
    }
}
