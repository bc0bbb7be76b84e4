//! Async tasks as feature instances: [`Feature::instrument`] marks a future while it is polled,
//! so that each task's polls count for it, and a task made while another task of the same
//! feature is being polled (spawned from inside it) counts under that task, as a sub-process
//! under its parent: the profiler's tree of the feature shows the nesting.
//!
//! Between polls the task holds no mark: a task waiting for I/O or a timer costs nothing, and the
//! worker thread that polled it is free for other tasks. Each poll pushes one mark per level of
//! the task's path (its ancestors', then its own), and pops them all when the poll returns: a few
//! nanoseconds per level, no allocation. Making the task allocates its path once.
//!
//! Not here: the marks themselves (`lib.rs`, `stack.rs`).

use crate::Feature;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::cell::Cell;

/// Most levels of a task's path: a task made deeper keeps its innermost ancestors.
pub const MAX_TASK_DEPTH: usize = 16;

/// What the calling thread is polling: the feature and the path of the innermost instrumented
/// future being polled on it (null when none). Valid while that poll runs.
type Polling = (*const Feature, *const [&'static str]);

thread_local! {
    static POLLING: Cell<Polling> = const {
        Cell::new((core::ptr::null(), core::ptr::slice_from_raw_parts(core::ptr::null(), 0)))
    };
}

/// A future marked with its feature while it is polled: see [`Feature::instrument`].
#[must_use = "futures do nothing unless polled"]
pub struct Instrumented<F> {
    feature: &'static Feature,
    /// The instances from the outermost ancestor to this task.
    path: Box<[&'static str]>,
    future: F,
}

impl Feature {
    /// Marks `future` with this feature, instance `instance`, while it is polled (each poll of
    /// an async task, say): `tokio::spawn(TASKS.instrument("conn-42", serve(socket)))`. When it
    /// is made while another instrumented future of this feature is being polled on the thread
    /// (a task spawned from inside another), its polls count under that one's instance, whose
    /// whole path they repeat, at most [`MAX_TASK_DEPTH`] levels (the innermost kept). Names made
    /// at run time go through [`crate::intern`] first.
    pub fn instrument<F: Future>(
        &'static self,
        instance: &'static str,
        future: F,
    ) -> Instrumented<F> {
        let (feature, parent) = POLLING.with(Cell::get);
        let mut path: Vec<&'static str> = Vec::new();
        if core::ptr::eq(feature, self) {
            // SAFETY: the path of the future being polled on this thread, alive while it polls.
            path.extend_from_slice(unsafe { &*parent });
        }
        path.push(instance);
        let keep = path.len().saturating_sub(MAX_TASK_DEPTH);
        Instrumented {
            feature: self,
            path: path.split_off(keep).into_boxed_slice(),
            future,
        }
    }
}

/// Restores what the thread was polling when a poll ends, also by a panic.
struct Restore(Polling);

impl Drop for Restore {
    fn drop(&mut self) {
        POLLING.with(|polling| polling.set(self.0));
    }
}

impl<F: Future> Future for Instrumented<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: `future` is never moved out of `self` (structural pinning); the other fields
        // are not pinned.
        let this = unsafe { self.get_unchecked_mut() };
        // The outermost mark's guard pops every mark above it when it drops (the shim's
        // guarantee): the inner levels need no guard of their own.
        let (first, rest) = this
            .path
            .split_first()
            .expect("a path has its own instance");
        let _marks = this.feature.mark_with(first);
        for instance in rest {
            core::mem::forget(this.feature.mark_with(instance));
        }
        let previous = POLLING.with(|polling| {
            polling.replace((this.feature as *const Feature, &*this.path as *const _))
        });
        let _restore = Restore(previous);
        // SAFETY: pinned projection of the pinned `self`, see above.
        unsafe { Pin::new_unchecked(&mut this.future) }.poll(cx)
    }
}

impl<F> core::fmt::Debug for Instrumented<F> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Instrumented")
            .field("feature", &self.feature)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{depth, Feature};
    use std::sync::Mutex;

    static TASKS: Feature = Feature::new("tasks");

    /// Polls `future` once with a waker that does nothing.
    fn poll_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
        future.poll(&mut Context::from_waker(std::task::Waker::noop()))
    }

    #[test]
    fn a_task_is_marked_while_polled_and_a_child_made_inside_it_nests() {
        let child: Mutex<Option<Instrumented<std::future::Ready<u32>>>> = Mutex::new(None);
        let before = depth();
        let mut parent = std::pin::pin!(TASKS.instrument("parent", async {
            assert_eq!(depth(), before + 1, "the parent's mark while it is polled");
            *child.lock().unwrap() = Some(TASKS.instrument("child", std::future::ready(7)));
            1
        }));
        assert_eq!(poll_once(parent.as_mut()), Poll::Ready(1));
        assert_eq!(depth(), before, "no mark between polls");
        let child = child.lock().unwrap().take().unwrap();
        assert_eq!(&*child.path, ["parent", "child"]);
        // Polled later, elsewhere: under its parent all the same.
        let mut child = std::pin::pin!(child);
        assert_eq!(poll_once(child.as_mut()), Poll::Ready(7));
        assert_eq!(depth(), before);
        // Made outside any poll: a root.
        assert_eq!(&*TASKS.instrument("root", async {}).path, ["root"]);
    }

    #[test]
    fn a_deep_path_keeps_its_innermost_levels() {
        let mut path: Vec<&'static str> = Vec::new();
        fn nest(level: usize, path: &mut Vec<&'static str>) {
            let name = crate::intern(&format!("level-{level}"));
            let mut task = std::pin::pin!(TASKS.instrument(name, async {}));
            if level == MAX_TASK_DEPTH + 3 {
                *path = task.path.to_vec();
                return;
            }
            // Make the next level while this one is polled.
            let _ = poll_once(task.as_mut());
            POLLING.with(|polling| {
                let saved = polling.replace((&TASKS as *const Feature, &*task.path as *const _));
                nest(level + 1, path);
                polling.set(saved);
            });
        }
        nest(0, &mut path);
        assert_eq!(path.len(), MAX_TASK_DEPTH);
        assert_eq!(
            path.last(),
            Some(&format!("level-{}", MAX_TASK_DEPTH + 3).as_str())
        );
    }
}
