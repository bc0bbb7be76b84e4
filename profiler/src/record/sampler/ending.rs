//! The end of a recording: [`Sampler::end`] detaches from the target and fills the report's
//! recording fields; [`Recorded::finish`] then names the native stacks' frames, which can wait
//! until the whole recording has ended (`children.rs`). Not here: what is recorded (`sampler.rs`),
//! naming a frame (`symbolize`).

use super::Sampler;
use crate::native::perf::LabelFormat;
use crate::profile::{Meta, Profile, ProfileBuilder};
use crate::program::modules::{JitDump, Module};
use crate::symbolize::jit_code::JitCode;
use std::path::PathBuf;

impl Sampler {
    /// The finished profile; `meta`'s recording fields are filled in here.
    pub fn finish(self, meta: Meta) -> Profile {
        self.end(meta).finish()
    }

    /// Ends the recording (detaches from the target, closes its events, fills `meta`'s
    /// recording fields) and keeps what it took for [`Recorded::finish`], which names the
    /// native stacks' frames: a followed child's names are left until the program has ended,
    /// so that they do not take CPU from it (`children.rs`).
    pub fn end(mut self, mut meta: Meta) -> Recorded {
        self.flush_pending(None);
        self.end_recording();
        self.take_unseen(true);
        for state in self.threads.states.values_mut() {
            if let Some(pending) = state.before_perf.take() {
                pending.add(&mut self.builder, None);
            }
        }
        self.clock.fill(&mut meta);
        self.reader.fill(&mut meta);
        meta.reading.mark_capacity = fsprof_shim::abi::MARK_CAPACITY as u32;
        meta.sampling.sampler_priority = self.tally.priority.to_owned();
        meta.sampling.realtime_refused = self.tally.realtime_refused.unwrap_or_default();
        let mut notes = self.tally.notes;
        let (mut modules, mut jit_dumps) = (Vec::new(), Vec::new());
        if let Some(mut native) = self.native {
            native.detach();
            meta.native_stacks.native = true;
            let labels = native.label_format();
            meta.reading.custom_labels = labels == Some(LabelFormat::CustomLabels);
            meta.reading.otel_context = labels == Some(LabelFormat::Otel);
            notes.extend(native.labels_note());
            let stats = &native.stats;
            meta.native_stacks.native_backend =
                if native.uses_perf() { "perf" } else { "ptrace" }.to_owned();
            meta.native_stacks.perf_per_cpu = native.perf_per_cpu();
            meta.native_stacks.perf_at_tick = native.perf_at_tick();
            meta.native_stacks.native_captured = stats.captured;
            meta.native_stacks.native_complete = stats.complete;
            meta.native_stacks.native_not_stopped = stats.not_stopped;
            meta.native_stacks.native_moved = self.tally.native_moved;
            meta.native_stacks.native_departures_unmarked = self.tally.departures_unmarked;
            meta.native_stacks.native_late = self.tally.native_late;
            meta.native_stacks.native_preempted_unplaced_us = self.tally.unplaced_ns / 1_000;
            meta.native_stacks.native_blocked_unplaced_us = self.tally.blocked_unplaced_ns / 1_000;
            meta.native_stacks.native_blocked = stats.blocked;
            meta.native_stacks.native_blocked_skipped = stats.blocked_skipped;
            meta.native_stacks.native_uncopied = stats.uncopied;
            meta.native_stacks.unseen = self.unseen.counts;
            let losses = &mut meta.native_stacks.losses;
            (losses.perf_lost, losses.perf_unmatched) = native.perf_losses();
            losses.perf_lost_cpu_us = self.tally.lost_cpu_ns / 1_000;
            meta.native_stacks.stops.native_stops = native.pauses().count();
            meta.native_stacks.beyond.native_completed = native.completer.completed;
            meta.native_stacks.beyond.native_walked = stats.walked;
            meta.native_stacks.stops.pause_p50_us =
                native.pauses().quantile(0.5).as_micros() as u64;
            meta.native_stacks.stops.pause_p99_us =
                native.pauses().quantile(0.99).as_micros() as u64;
            if let Some(errno) = native.attach_error {
                notes.push(format!(
                    "native stacks: {} thread(s) could not be attached ({}): their samples have marks only{}",
                    stats.attach_failures,
                    errno.desc(),
                    if errno == nix::errno::Errno::EPERM {
                        " (is another debugger or tracer, such as gdb or strace, attached? see also /proc/sys/kernel/yama/ptrace_scope)"
                    } else {
                        ""
                    }
                ));
            }
            let (too_fast, rate) = native.perf_too_fast();
            if too_fast > 0 {
                notes.push(format!(
                    "{too_fast} thread(s) left their CPU more than {rate} times a second: fsprof stopped following their switches (following each costs the program and fsprof about a microsecond) and estimated their time waiting for a CPU instead"
                ));
            }
            if let Some(rate) = native.perf_unfollowed_at() {
                notes.push(format!(
                    "the machine switched threads {rate} times a second per busy CPU: fsprof stopped following switches while that lasted (each costs a few hundred ns where followed), so waits for a CPU were counted from each thread's scheduling totals and blocked time was estimated at the ticks (--idle, or a program that marks, has them followed)"
                ));
            }
            if let Some(why) = &native.perf_refused {
                notes.push(format!(
                    "native stacks were taken with ptrace (each running thread stopped for an instant per sample) because perf is not available: {why}"
                ));
            }
            (modules, jit_dumps) = native.into_modules();
        }
        meta.notes = notes;
        // Call sites are named here, with or without native stacks.
        meta.builtin_features = self.interner.finish(&mut self.builder);
        Recorded {
            builder: self.builder,
            meta,
            modules,
            jit_dumps,
            debug_dirs: self.options.debug_dirs,
            debuginfod: self.options.debuginfod,
        }
    }
}

/// A recording ended, its native stacks' frames not named yet ([`Sampler::end`]).
pub struct Recorded {
    builder: ProfileBuilder,
    meta: Meta,
    modules: Vec<Module>,
    jit_dumps: Vec<JitDump>,
    debug_dirs: Vec<PathBuf>,
    debuginfod: Option<std::sync::Arc<crate::symbolize::debuginfod::Debuginfod>>,
}

impl Recorded {
    /// The profile, its native frames named from the target's modules' files.
    pub fn finish(self) -> Profile {
        let mut symbolizer = crate::symbolize::symbols::Symbolizer::with_extra_debug_dirs(
            &self.modules,
            &self.debug_dirs,
        )
        .with_debuginfod(self.debuginfod)
        .with_jit_code(JitCode::of_process(self.meta.pid, &self.jit_dumps));
        let mut profile = self.builder.finish(self.meta, &mut symbolizer);
        profile.meta.missing_symbols = symbolizer.missing_symbols();
        profile.modules = symbolizer.modules_used();
        profile
    }
}
