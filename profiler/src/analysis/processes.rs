//! How the counted time divides between the processes of a recording that followed a program's
//! children, and the selection of one process's samples (`fsprof report --process PID|NAME`).
//! It does not render.

use super::threads::{first_twenty, keep_threads};
use super::{group_weights, TimeView};
use crate::profile::Profile;

/// One process's counted time.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessTime {
    /// Its id.
    pub pid: u32,
    /// The process it was found as a child of (none for the program).
    pub parent: Option<u32>,
    /// Its command line, space-separated.
    pub command: String,
    /// Time counted.
    pub ns: u64,
}

/// Every process of the recording (none when it recorded one), most time first (then in the
/// order found).
pub fn process_times(profile: &Profile, view: TimeView) -> Vec<ProcessTime> {
    let mut ns = vec![0u64; profile.processes.len()];
    for (group, weight) in profile.samples.iter().zip(group_weights(profile, view)) {
        let process = profile
            .threads
            .get(group.thread as usize)
            .map(|t| t.process);
        if let Some(total) = process.and_then(|p| ns.get_mut(p as usize)) {
            *total = total.saturating_add(weight);
        }
    }
    let mut times: Vec<ProcessTime> = profile
        .processes
        .iter()
        .zip(ns)
        .map(|(process, ns)| ProcessTime {
            pid: process.pid,
            parent: process.parent,
            command: process.command.join(" "),
            ns,
        })
        .collect();
    times.sort_by_key(|t| std::cmp::Reverse(t.ns)); // stable: ties stay in the order found
    times
}

/// Keeps only the samples of the process with id `which`, or of those whose program (the
/// command's first word, without its directory) it names; an error listing the processes
/// there are when none matches.
pub fn keep_process(profile: &mut Profile, which: &str) -> Result<(), String> {
    let pid: Option<u32> = which.parse().ok();
    if profile.processes.is_empty() {
        return if pid == Some(profile.meta.pid) {
            Ok(())
        } else {
            Err(format!(
                "this profile recorded one process (pid {}): record with `fsprof run` (which follows the program's children) or `attach --children` to have several",
                profile.meta.pid
            ))
        };
    }
    let chosen: Vec<bool> = (profile.processes.iter())
        .map(|p| Some(p.pid) == pid || p.program() == which)
        .collect();
    if !chosen.contains(&true) {
        let known = (profile.processes.iter()).map(|p| format!("{} ({})", p.program(), p.pid));
        return Err(format!(
            "no process has id or program {which:?} in this profile; its processes: {}",
            first_twenty(known)
        ));
    }
    let threads: Vec<bool> = (profile.threads.iter())
        .map(|t| chosen.get(t.process as usize).copied().unwrap_or(false))
        .collect();
    keep_threads(profile, &threads);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::fixtures::{build, S};
    use crate::profile::{merge, Process};

    fn tree() -> Profile {
        let s = |tid, us| S {
            marks: vec![],
            native: None,
            tid,
            wall_us: us,
            active_us: us,
        };
        let process = |pid, parent, name: &str| Process {
            pid,
            parent,
            command: vec![format!("/bin/{name}"), "-x".into()],
        };
        merge(
            build(&[s(1, 100)]),
            process(1, None, "sh"),
            vec![
                (process(2, Some(1), "cc1"), build(&[s(2, 700)])),
                (process(3, Some(1), "as"), build(&[s(3, 200), s(4, 100)])),
            ],
        )
    }

    #[test]
    fn time_per_process_and_one_processs_samples() {
        let mut p = tree();
        let times: Vec<(u32, u64)> = process_times(&p, TimeView::Active)
            .iter()
            .map(|t| (t.pid, t.ns / 1000))
            .collect();
        assert_eq!(times, vec![(2, 700), (3, 300), (1, 100)]);
        keep_process(&mut p, "as").unwrap();
        let kept: Vec<u64> = process_times(&p, TimeView::Active)
            .iter()
            .map(|t| t.ns / 1000)
            .collect();
        assert_eq!(kept, vec![300, 0, 0]);
        keep_process(&mut p, "3").unwrap();
        let error = keep_process(&mut p, "ld").unwrap_err();
        assert!(error.contains("sh (1), cc1 (2), as (3)"), "{error}");
    }
}
