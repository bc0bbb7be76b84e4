//! Samples at the scheduler's own tick, the default where it can be had (`FSPROF_CLOCK=clock`
//! asks for the clock; `FSPROF_CLOCK=tick` says why the tick cannot be had): each CPU's sampling
//! event is the tracepoint `timer:hrtimer_expire_entry`, kept by its program only where the
//! expiring timer is the tick's (its function `tick_nohz_handler`, `tick_sched_timer` before
//! Linux 6.10), rather than a `cpu-clock` event of fsprof's own. A busy CPU takes the tick anyway
//! (`CONFIG_HZ` times a second; an idle one, under `NO_HZ_IDLE`, none): sampled there, the
//! program's CPUs take no interrupt of fsprof's, and no tick of fsprof's ends a sleep early
//! within its timer slack (which ties a sleeping thread's runs to the clock's ticks: BENCHMARKS.md,
//! "A sleep's timer slack"). On the Intel guest python3 with four threads cost 1.040 of alone
//! under `perf record -a` at the tick against 1.096 under its `cpu-clock` per CPU (BENCHMARKS.md,
//! sixty-fifth session).
//!
//! Where the rate asked for is the kernel's `CONFIG_HZ` divided by a whole number (to a tenth),
//! the program keeps one tick in that many, at random, and each sample stands for that many
//! ticks; elsewhere (a rate above `CONFIG_HZ`, or between) the clock samples. Also the clock:
//! where `/proc/kallsyms` hides the handler's address (it shows addresses to root only), where
//! the kernel's configuration cannot be read, where the tracepoint's id cannot be read (tracefs
//! not mounted and no `CAP_SYS_ADMIN` to mount it for a moment: `os::tracefs`), and where
//! another program is attached to the tracepoint: a tracepoint's programs are the tracepoint's,
//! and the kernel writes a hit's sample only where every program attached there keeps it, so
//! two fsprof processes at the tick would drop each other's samples (a second one finds the first's program there and keeps the
//! clock: [`first_event`]; two started at the same instant do not), and while fsprof samples
//! there, another tool's event at that tracepoint gets only the hits fsprof keeps. The tick
//! cannot be re-phased (the clock's grid moves every 40 ms: `CpuWide::rephase`): a loop in step
//! with the tick is not sampled evenly. Its events' start and release cost fsprof about 65 ms
//! of waiting (the kernel's grace periods). A program at the tracepoint's BTF hook that copies
//! the registers and stack itself would have none of these limits (BENCHMARKS.md, sixty-fifth
//! session). Stacks deeper than the copy are walked as the clock's are (`walk.rs`), by a walk
//! loaded as a tracepoint's program (a tail call stays within one type of program) that reads
//! the user registers from the thread's kernel stack (`Rules::walk_at_tick`). Not here: the
//! program's body (`sampling::load_tick_program`), the event (`perf_events.rs`).

use crate::native::perf_events::{open_tracepoint_event, tracepoint_programs};
use std::os::fd::OwnedFd;

/// Where the tracepoint's record holds the expiring timer's function (`hrtimer_expire_entry`'s
/// format: 8 bytes of common fields, the timer, the time, then the function; fixed here, not
/// read from the tracepoint's `format` file).
pub(in crate::native) const FUNCTION_OFFSET: i16 = 24;

/// The tracepoint and the tick's handler, where sampling at the tick was asked for and is
/// possible.
#[derive(Clone, Copy, Debug)]
pub(in crate::native) struct Tick {
    /// The tracepoint's id in tracefs.
    pub(in crate::native) tracepoint: u64,
    /// The address of the tick's timer function.
    pub(in crate::native) handler: u64,
    /// Ticks per sample: the program keeps each tick with a chance of one in this many (at
    /// random, so that no loop in step with the ticks is sampled unevenly), where the rate
    /// asked for is the kernel's `CONFIG_HZ` divided by it.
    pub(in crate::native) every: u32,
    /// What each sample stands for: `every` ticks' length.
    pub(in crate::native) tick_ns: u64,
    /// Whether `FSPROF_CLOCK=tick` asked for it by name: then a tick that cannot be had is said.
    named: bool,
}

/// Ticks per sample at most: below `CONFIG_HZ / MOST_EVERY` the clock samples.
const MOST_EVERY: u64 = 64;

/// The tick's tracepoint and handler unless `FSPROF_CLOCK=clock` asks for the clock, where
/// `period_ns` is within a tenth of a whole number of the kernel's ticks (`CONFIG_HZ` from the
/// kernel's configuration); else `None` (the clock), said where `FSPROF_CLOCK=tick` asked.
pub(in crate::native) fn asked(period_ns: u64) -> Option<Tick> {
    let named = match std::env::var("FSPROF_CLOCK").as_deref() {
        Ok("clock") => return None,
        Ok("tick") => true,
        _ => false,
    };
    let why = match find(period_ns) {
        Ok(tick) => return Some(Tick { named, ..tick }),
        Err(why) => why,
    };
    if named {
        eprintln!("fsprof: FSPROF_CLOCK=tick: {why}; sampling with the CPU clock");
    }
    None
}

/// The first CPU's (`cpu`'s) event at the tick, if it opens and the tick is free to sample:
/// else `None`, said (the caller keeps the clock). Another process's program there (another
/// fsprof at the tick) would drop this one's samples, and this one its: the kernel writes a
/// hit's sample only where every program attached to the tracepoint keeps it. Two started at
/// the same instant still can. (Asked of a probe event of its own, closing it cost a grace
/// period, 34 ms.)
pub(in crate::native) fn first_event(cpu: u32, tick: Tick) -> Option<OwnedFd> {
    let why = match open_tracepoint_event(cpu, tick.tracepoint) {
        Ok(event) if tracepoint_programs(&event) == Some(0) => return Some(event),
        Ok(_) => "another program samples at the tick (another fsprof?)".to_owned(),
        Err(e) => format!("cannot open an event at the tracepoint ({})", e.desc()),
    };
    if tick.named {
        eprintln!("fsprof: FSPROF_CLOCK=tick: {why}; sampling with the CPU clock");
    }
    None
}

fn find(period_ns: u64) -> Result<Tick, String> {
    let hz = kernel_hz().ok_or("the kernel's CONFIG_HZ is unknown")?;
    let every = ticks_per_sample(period_ns, hz).ok_or_else(|| {
        format!("the rate is not the kernel's tick ({hz} Hz) divided by a whole number")
    })?;
    let tick_ns = every * (1_000_000_000 / hz);
    let tracepoint = tracepoint_id().ok_or("no tracefs id for timer:hrtimer_expire_entry")?;
    // Read up to the handler's line only: the whole file takes the kernel ~30 ms to write.
    use std::io::BufRead as _;
    let symbols = std::fs::File::open("/proc/kallsyms").map_err(|e| e.to_string())?;
    let lines = std::io::BufReader::new(symbols)
        .lines()
        .map_while(Result::ok);
    let handler = handler_in(lines)
        .ok_or("the tick's handler is not in /proc/kallsyms (its addresses need root)")?;
    Ok(Tick {
        tracepoint,
        handler,
        every: every as u32,
        tick_ns,
        named: false,
    })
}

/// The tracepoint's id: from tracefs where it is mounted, else from one mounted for a moment in
/// a mount namespace of a child's own (`os::tracefs`: root only). Unmounted on a fresh virtual
/// machine here (2026-12-05, AMD guest), the defaults took the clock: the two-thread target's
/// CPU +0.28 points against +0.01 at the tick (30 rounds, the difference -0.33, 95% -0.53 to
/// -0.14). Asked once per fsprof.
fn tracepoint_id() -> Option<u64> {
    static ID: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *ID.get_or_init(|| {
        const RELATIVE: &str = "events/timer/hrtimer_expire_entry/id";
        let mounted = [crate::os::tracefs::ROOT, "/sys/kernel/debug/tracing"]
            .iter()
            .find_map(|root| std::fs::read_to_string(format!("{root}/{RELATIVE}")).ok());
        let text = mounted.or_else(|| crate::os::tracefs::read_unmounted(RELATIVE))?;
        text.trim().parse::<u64>().ok()
    })
}

/// How many of the kernel's ticks (`hz` a second) make one period of `period_ns`, where that is
/// a whole number (to a tenth; the clock's period is a twentieth short of the rate's:
/// `perf::sampling_period`) of at most [`MOST_EVERY`].
fn ticks_per_sample(period_ns: u64, hz: u64) -> Option<u64> {
    let tick_ns = 1_000_000_000 / hz.max(1);
    let every = (period_ns + tick_ns / 2) / tick_ns;
    ((1..=MOST_EVERY).contains(&every)
        && period_ns.abs_diff(every * tick_ns) <= every * tick_ns / 10)
        .then_some(every)
}

/// The tick's handler's address in `lines` (`/proc/kallsyms`'s; a kernel has one of the two
/// names), read up to its line; `None` where it is not there or shown as 0 (addresses hidden
/// from this user).
fn handler_in(lines: impl Iterator<Item = String>) -> Option<u64> {
    lines
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let address = u64::from_str_radix(fields.next()?, 16).ok()?;
            let name = fields.nth(1)?;
            ["tick_nohz_handler", "tick_sched_timer"]
                .contains(&name)
                .then_some(address)
        })
        .next()
        .filter(|&address| address != 0)
}

/// `CONFIG_HZ` in a kernel configuration's text.
fn hz_in(config: &str) -> Option<u64> {
    config
        .lines()
        .find_map(|line| line.strip_prefix("CONFIG_HZ=")?.trim().parse().ok())
}

/// `CONFIG_HZ` from `/boot/config-<release>` or `/proc/config.gz`.
fn kernel_hz() -> Option<u64> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let text = std::fs::read_to_string(format!("/boot/config-{}", release.trim()))
        .ok()
        .or_else(|| {
            use std::io::Read as _;
            let file = std::fs::File::open("/proc/config.gz").ok()?;
            let mut text = String::new();
            flate2::read::GzDecoder::new(file)
                .take(1 << 22)
                .read_to_string(&mut text)
                .ok()?;
            Some(text)
        })?;
    hz_in(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ticks_handler_is_found_by_either_name_and_not_where_hidden() {
        let lines = |text: &str| {
            text.lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
                .into_iter()
        };
        let newer =
            "ffffffff81442900 t tick_nohz_lowres_handler\nffffffff81442960 t tick_nohz_handler\n";
        assert_eq!(handler_in(lines(newer)), Some(0xffff_ffff_8144_2960));
        let older = "ffffffff81100000 T tick_sched_timer\n";
        assert_eq!(handler_in(lines(older)), Some(0xffff_ffff_8110_0000));
        let hidden = "0000000000000000 t tick_nohz_handler\n";
        assert_eq!(handler_in(lines(hidden)), None);
        assert_eq!(
            handler_in(lines("ffffffff81442960 t tick_nohz_handler_x\n")),
            None
        );
    }

    #[test]
    fn a_rate_is_sampled_at_the_tick_where_it_divides_the_kernels() {
        let period = |hz: u64| 1_000_000_000 / hz * 19 / 20; // as the clock's
        assert_eq!(ticks_per_sample(period(250), 250), Some(1));
        assert_eq!(ticks_per_sample(period(250), 1000), Some(4));
        assert_eq!(ticks_per_sample(period(100), 1000), Some(10));
        assert_eq!(
            ticks_per_sample(period(1000), 250),
            None,
            "faster than the tick"
        );
        assert_eq!(ticks_per_sample(period(400), 1000), None, "2.5 ticks");
        assert_eq!(ticks_per_sample(period(10), 1000), None, "100 ticks");
    }

    #[test]
    fn the_kernels_hz_is_read_from_its_configuration() {
        let config =
            "# CONFIG_HZ_100 is not set\nCONFIG_HZ_250=y\nCONFIG_HZ=250\nCONFIG_HZ_PERIODIC=n\n";
        assert_eq!(hz_in(config), Some(250));
        assert_eq!(hz_in("CONFIG_HZ_1000=y\n"), None);
    }
}
