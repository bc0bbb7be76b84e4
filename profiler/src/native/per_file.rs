//! What the unwinder learns from an executable file's headers, learnt once per file for every
//! process that maps it: a build runs the same compiler and libraries in process after process,
//! and each of them parsed every module's ELF headers twice (its unwind sections, its code's
//! segments) at every change of its memory map.
//!
//! A fact is kept by the file's image (`program/modules.rs` maps each file once per recording
//! and keeps it), at most [`MOST_FILES`] files per kind; the vdso, copied from each process, is
//! not kept. Not here: what the facts are (`unwind.rs`, `scan.rs`).

use crate::program::modules::{Image, Module};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Most files whose facts of one kind are kept; further files are parsed each time.
const MOST_FILES: usize = 4096;

/// Facts of one kind, by file.
pub struct PerFile<T> {
    facts: Mutex<Option<Kept<T>>>,
}

/// By the image's address: each entry holds its image, so that the address is not reused.
type Kept<T> = HashMap<usize, (Image, Arc<T>)>;

impl<T> PerFile<T> {
    /// None kept yet.
    pub const fn new() -> PerFile<T> {
        PerFile {
            facts: Mutex::new(None),
        }
    }

    /// The facts of `module`'s file: those learnt before, else what `learn` makes of it (`None`
    /// for a file it cannot parse: not kept, tried again).
    pub fn get(&self, module: &Module, learn: impl FnOnce() -> Option<T>) -> Option<Arc<T>> {
        if module.inode == 0 {
            return learn().map(Arc::new); // the vdso: a copy per process
        }
        let key = module.image.address();
        if let Some((_, facts)) = self.lock().as_ref().and_then(|map| map.get(&key)) {
            return Some(Arc::clone(facts));
        }
        let facts = Arc::new(learn()?);
        let mut kept = self.lock();
        let map = kept.get_or_insert_with(HashMap::new);
        if map.len() < MOST_FILES {
            map.entry(key)
                .or_insert_with(|| (module.image.clone(), Arc::clone(&facts)));
        }
        Some(facts)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Kept<T>>> {
        self.facts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(image: &Image, inode: u64) -> Module {
        Module {
            name: "m".into(),
            path: "/m".into(),
            range: 0x1000..0x2000,
            bias: 0,
            inode,
            image: image.clone(),
        }
    }

    #[test]
    fn a_files_facts_are_learnt_once_and_the_vdsos_each_time() {
        static KEPT: PerFile<u32> = PerFile::new();
        let (a, b) = (Image::from_vec(vec![1]), Image::from_vec(vec![2]));
        let learnt = std::cell::Cell::new(0);
        let learn = |n| {
            learnt.set(learnt.get() + 1);
            Some(n)
        };
        assert_eq!(*KEPT.get(&module(&a, 7), || learn(1)).unwrap(), 1);
        assert_eq!(*KEPT.get(&module(&a, 7), || learn(2)).unwrap(), 1);
        assert_eq!(*KEPT.get(&module(&b, 8), || learn(3)).unwrap(), 3);
        assert_eq!(learnt.get(), 2);
        assert_eq!(*KEPT.get(&module(&a, 0), || learn(4)).unwrap(), 4);
        assert_eq!(*KEPT.get(&module(&a, 0), || learn(5)).unwrap(), 5);
        assert!(KEPT.get(&module(&b, 9), || None::<u32>).is_some()); // b was learnt
    }
}
