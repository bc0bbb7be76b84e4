//! How the counted time divides between threads (same weights as the feature analysis), and
//! the selection of one thread's samples (`fsprof report --thread NAME|TID`). It does not render.

use super::{group_weights, TimeView};
use crate::profile::Profile;

/// One thread's counted time.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadTime {
    /// Its name (`/proc/.../comm` when first seen).
    pub name: String,
    /// Its id.
    pub tid: u32,
    /// Time counted.
    pub ns: u64,
}

/// The threads with counted time, most first (then by id).
pub fn thread_times(profile: &Profile, view: TimeView) -> Vec<ThreadTime> {
    let mut ns = vec![0u64; profile.threads.len()];
    for (group, weight) in profile.samples.iter().zip(group_weights(profile, view)) {
        if let Some(total) = ns.get_mut(group.thread as usize) {
            *total = total.saturating_add(weight);
        }
    }
    let mut times: Vec<ThreadTime> = profile
        .threads
        .iter()
        .zip(ns)
        .filter(|(_, ns)| *ns > 0)
        .map(|(thread, ns)| ThreadTime {
            name: thread.name.clone(),
            tid: thread.tid,
            ns,
        })
        .collect();
    times.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.tid.cmp(&b.tid)));
    times
}

/// Keeps only the samples of the threads named `which`, or whose id it is; an error naming the
/// threads there are when none matches.
pub fn keep_thread(profile: &mut Profile, which: &str) -> Result<(), String> {
    let tid: Option<u32> = which.parse().ok();
    let chosen: Vec<bool> = profile
        .threads
        .iter()
        .map(|thread| thread.name == which || Some(thread.tid) == tid)
        .collect();
    if !chosen.contains(&true) {
        let known = (profile.threads.iter()).map(|t| format!("{} ({})", t.name, t.tid));
        return Err(format!(
            "no thread is named or numbered {which:?} in this profile; its threads: {}",
            first_twenty(known)
        ));
    }
    keep_threads(profile, &chosen);
    Ok(())
}

/// Keeps only the samples of the threads `chosen` marks.
pub(super) fn keep_threads(profile: &mut Profile, chosen: &[bool]) {
    profile
        .samples
        .retain(|group| chosen.get(group.thread as usize).copied().unwrap_or(false));
}

/// The first twenty of `items` joined, and how many more there are, for an error.
pub(super) fn first_twenty(items: impl ExactSizeIterator<Item = String>) -> String {
    let more = items.len().saturating_sub(20);
    let mut listed: Vec<String> = items.take(20).collect();
    if more > 0 {
        listed.push(format!("and {more} more"));
    }
    listed.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::fixtures::{build, S};

    fn profile() -> Profile {
        let s = |tid, us| S {
            marks: vec![],
            native: None,
            tid,
            wall_us: us,
            active_us: us,
        };
        build(&[s(1, 300), s(2, 700), s(1, 100)])
    }

    #[test]
    fn time_per_thread_and_one_threads_samples() {
        let mut p = profile();
        let times: Vec<(u32, u64)> = thread_times(&p, TimeView::Active)
            .iter()
            .map(|t| (t.tid, t.ns / 1000))
            .collect();
        assert_eq!(times, vec![(2, 700), (1, 400)]);
        keep_thread(&mut p, "1").unwrap();
        assert_eq!(thread_times(&p, TimeView::Active).len(), 1);
        keep_thread(&mut p, "t1").unwrap(); // by name (the test's threads are named t<tid>)
        let error = keep_thread(&mut p, "nope").unwrap_err();
        assert!(error.contains("t1 (1), t2 (2)"), "{error}");
    }
}
