//! Samples at the scheduler's own tick (an experiment, `FSPROF_CLOCK=tick`): each CPU's
//! sampling event is the tracepoint `timer:hrtimer_expire_entry`, kept by its program only where
//! the expiring timer is the tick's (its function `tick_nohz_handler`, `tick_sched_timer` before
//! Linux 6.10), rather than a `cpu-clock` event of fsprof's own. A busy CPU takes the tick anyway
//! (`CONFIG_HZ` times a second; an idle one, under `NO_HZ_IDLE`, none): sampled there, the
//! program's CPUs take no interrupt of fsprof's. On the Intel guest python3 with four threads
//! cost 1.040 of alone under `perf record -a` at the tick against 1.096 under its `cpu-clock`
//! per CPU (BENCHMARKS.md, sixty-fifth session).
//!
//! The tick's length is the sampling period: used only where the rate asked for is within a
//! tenth of the kernel's `CONFIG_HZ`. Why it is not the default yet: a tracepoint's programs are
//! the tracepoint's, and the kernel writes a hit's sample only where every program attached
//! there keeps it, so two fsprof processes sampling at the tick would drop each other's samples
//! (a second one finds the first's program there and keeps the clock: [`first_event`]; two
//! started at once do not); the tick cannot be re-phased, so a loop in step with it
//! is not sampled evenly (the clock's grid moves every 40 ms: `CpuWide::rephase`); and the
//! handler's address comes from `/proc/kallsyms`, which shows addresses to root only. A program
//! at the tracepoint's BTF hook that copies the registers and stack itself would have none of
//! these (BENCHMARKS.md, sixty-fifth session). Stacks deeper than the copy are walked as the
//! clock's are (`walk.rs`), by a walk loaded as a tracepoint's program (a tail call stays within
//! one type of program) that reads the user registers from the thread's kernel stack
//! (`Rules::walk_at_tick`). Not here: the program's body
//! (`sampling::load_tick_program`), the event (`perf_events.rs`).

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
    /// The tick's length, what each of its samples stands for.
    pub(in crate::native) tick_ns: u64,
}

/// The tick's tracepoint and handler if `FSPROF_CLOCK=tick` asks for them and `period_ns` is
/// within a tenth of the kernel's tick (`CONFIG_HZ` from the kernel's configuration); else
/// `None` (the clock).
pub(in crate::native) fn asked(period_ns: u64) -> Option<Tick> {
    if std::env::var("FSPROF_CLOCK").ok()? != "tick" {
        return None;
    }
    let why = match find(period_ns) {
        Ok(tick) => return Some(tick),
        Err(why) => why,
    };
    eprintln!("fsprof: FSPROF_CLOCK=tick: {why}; sampling with the CPU clock");
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
    eprintln!("fsprof: FSPROF_CLOCK=tick: {why}; sampling with the CPU clock");
    None
}

fn find(period_ns: u64) -> Result<Tick, String> {
    let hz = kernel_hz().ok_or("the kernel's CONFIG_HZ is unknown")?;
    // The clock's period is a twentieth short of the rate's (`perf::sampling_period`).
    let tick_ns = 1_000_000_000 / hz.max(1);
    if period_ns.abs_diff(tick_ns) > tick_ns / 10 {
        return Err(format!("the rate is not the kernel's tick ({hz} Hz)"));
    }
    let tracepoint = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .iter()
        .find_map(|root| {
            let id =
                std::fs::read_to_string(format!("{root}/events/timer/hrtimer_expire_entry/id"));
            id.ok()?.trim().parse::<u64>().ok()
        })
        .ok_or("no tracefs id for timer:hrtimer_expire_entry")?;
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
        tick_ns,
    })
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
    fn the_kernels_hz_is_read_from_its_configuration() {
        let config =
            "# CONFIG_HZ_100 is not set\nCONFIG_HZ_250=y\nCONFIG_HZ=250\nCONFIG_HZ_PERIODIC=n\n";
        assert_eq!(hz_in(config), Some(250));
        assert_eq!(hz_in("CONFIG_HZ_1000=y\n"), None);
    }
}
