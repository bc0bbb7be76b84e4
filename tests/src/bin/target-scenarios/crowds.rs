//! `fsprof-target`'s scenarios of many threads, born and gone through the run (short-lived
//! requests, a churn of workers, a queue's consumers, a thousand busy threads, births faster
//! than a tick): each thread counts its own time as fsprof counts it, from its birth, running or
//! waiting for a CPU. The scenarios of one or a few long-lived threads are in the binary's root.

use super::*;

/// Two busy threads, one idle thread outside marks, one thread blocked inside a mark half the time.
pub(super) fn threads(truth: &Arc<Truth>, run_for: Duration, ready: impl FnOnce()) {
    let mut handles = Vec::new();
    for seed in [11, 12] {
        let truth = Arc::clone(truth);
        handles.push(thread::spawn(move || mixed(&truth, run_for, seed)));
    }
    // The idle thread's sleeps count nothing, but its running and its waits for a CPU as it
    // wakes count as any thread's (on a crowded machine, milliseconds a wake-up).
    let idle = Arc::clone(truth);
    handles.push(thread::spawn(move || {
        let start = Instant::now();
        while start.elapsed() < run_for {
            thread::sleep(Duration::from_millis(5)); // idle, outside marks
        }
        idle.active(thread_runnable_time());
    }));
    let blocked = Arc::clone(truth);
    handles.push(thread::spawn(move || {
        let start = Instant::now();
        let mut runnable_inside = Duration::ZERO;
        while start.elapsed() < run_for {
            let (t, runnable) = (Instant::now(), thread_runnable_time());
            {
                let _m = WAITING.mark_with("disk");
                thread::sleep(Duration::from_millis(4));
            }
            let waited = t.elapsed();
            runnable_inside += thread_runnable_time().saturating_sub(runnable);
            blocked.feature("waiting", "disk", waited);
            blocked.active(waited);
            thread::sleep(Duration::from_millis(4)); // idle outside marks
        }
        // Outside its mark, its running and its waits for a CPU, as the idle thread's.
        blocked.active(thread_runnable_time().saturating_sub(runnable_inside));
    }));
    ready();
    for handle in handles {
        handle.join().unwrap();
    }
}

/// Short-lived threads, started and finished all through the run, at most two at a time. Each
/// thread counts its time from its birth, and the spawner its own running and waiting for a
/// CPU (schedstat): on a busy machine a new thread waits for its first CPU, and the spawner for
/// one after each join, and that is active time outside marks (counted from the threads' first
/// instruction and without the spawner, the truth was 4.5 to 5.8% short beside one busy loop,
/// and every share read 1 to 2.7 points low).
pub(super) fn churn(truth: &Arc<Truth>, run_for: Duration, ready: impl FnOnce()) {
    let spawner_before = thread_runnable_time();
    let start = Instant::now();
    let mut rng = Rng::new(5);
    let mut running = std::collections::VecDeque::new();
    let mut ready = Some(ready);
    let mut seed = 100;
    while start.elapsed() < run_for {
        if running.len() == 2 {
            let handle: thread::JoinHandle<()> = running.pop_front().unwrap();
            handle.join().unwrap();
        }
        let truth = Arc::clone(truth);
        let life = rng
            .micros(10_000, 60_000)
            .min(run_for.saturating_sub(start.elapsed()));
        seed += 1;
        running.push_back(thread::spawn(move || {
            let before_first_run = thread_runnable_time();
            mixed(&truth, life, seed);
            truth.active(before_first_run);
        }));
        if let Some(ready) = ready.take() {
            ready();
        }
    }
    for handle in running {
        handle.join().unwrap();
    }
    truth.active(thread_runnable_time().saturating_sub(spawner_before));
    truth.extra("threads", (seed - 100) as f64);
}

/// A long-lived busy thread in one feature, and short-lived request threads (3–6 ms each, one
/// every 5–8 ms) in another: a thread's first and last moments must count like any other. The
/// spawner's own running time (creating threads) counts as active time, outside marks.
pub(super) fn requests(truth: &Arc<Truth>, run_for: Duration, ready: impl FnOnce()) {
    static SERVER: Feature = Feature::new("server");
    static HANDLING: Feature = Feature::new("handling");
    let background = Arc::clone(truth);
    let busy = thread::spawn(move || {
        let start = Instant::now();
        timed(&background, &SERVER, "loop", || spin(run_for));
        background.active(start.elapsed());
    });
    ready();
    // The spawner counts its running and its waits for a CPU (schedstat), its sleeps' wake-ups
    // included: in a CPU-limited cgroup it waited 3 ms a wake-up, 1.5 s of a 3 s run, which a
    // truth of its spawns alone left out (`handling` then read 10 points low).
    let spawner_before = thread_runnable_time();
    let start = Instant::now();
    let mut rng = Rng::new(8);
    while start.elapsed() < run_for {
        let truth = Arc::clone(truth);
        let work = rng.micros(3000, 6000);
        let spawning = Instant::now();
        let request = Arc::clone(&truth);
        thread::spawn(move || {
            // The thread's time counts from its birth, not from when it first ran: on a busy
            // machine a new thread can wait a millisecond for a CPU, which is active time
            // (counted from just before the spawn, so its stack's mapping, some µs, counts too).
            timed(&request, &HANDLING, "request", || spin(work));
            request.active(spawning.elapsed());
        });
        thread::sleep(rng.micros(5000, 8000)); // the spawner is idle outside marks
    }
    truth.active(thread_runnable_time().saturating_sub(spawner_before));
    busy.join().unwrap();
    thread::sleep(Duration::from_millis(20)); // let the last request finish
}

/// 40 threads busy on a machine with fewer CPUs (three fifths of their CPU time in a mark), so
/// that each waits for a CPU far longer than it runs. Each counts its time from its birth, run or
/// waiting (schedstat), as fsprof counts it. The regions' lengths are random (200-400 µs in the
/// mark, 100-300 µs out): a thread runs from one scheduler tick to another, and its `spin` ends
/// at once when it comes back from a wait, so with fixed lengths that divide the tick (300 and
/// 200 µs, ticks of 4 ms) each thread's waits all began at the same point of its loop, all in
/// the mark or all out, and the mix of waits the test checks was a few dozen coin tosses.
pub(super) fn queue(truth: &Arc<Truth>, run_for: Duration, ready: impl FnOnce()) {
    let busy: Vec<_> = (0..40)
        .map(|seed| {
            let truth = Arc::clone(truth);
            thread::spawn(move || {
                let mut rng = Rng::new(seed + 1);
                let start = Instant::now();
                let mut inside = Duration::ZERO;
                while start.elapsed() < run_for {
                    let began = Instant::now();
                    {
                        let _mark = VALIDATION.mark_with("rule-q");
                        spin(rng.micros(200, 400));
                    }
                    inside += began.elapsed();
                    spin(rng.micros(100, 300));
                }
                truth.feature("validation", "rule-q", inside);
                truth.active(thread_runnable_time().max(start.elapsed()));
            })
        })
        .collect();
    ready();
    for handle in busy {
        handle.join().unwrap();
    }
}

/// 500 threads busy (three fifths of their CPU time in a mark), 500 asleep outside marks. With
/// `--truth FILE`, `FILE.series` gets the busy threads' summed times every 10 ms (lines of: ns
/// since the Unix epoch, ns inside the mark, ns in all), so that the truth of a stretch (while a
/// profiler was attached: the threads are not scheduled alike with and without it) can be taken.
pub(super) fn thousand(
    truth: &Arc<Truth>,
    run_for: Duration,
    ready: impl FnOnce(),
    series: Option<&str>,
) {
    use std::sync::atomic::AtomicU64;
    for _ in 0..500 {
        thread::spawn(|| loop {
            thread::sleep(Duration::from_secs(3600));
        });
    }
    // Each busy thread's time inside the mark and in all so far (ns), kept by the thread
    // itself: 500 threads locking the truth's mutex inside the mark would wait there, in the
    // mark, for time the truth does not count.
    let sums: Arc<Vec<[AtomicU64; 2]>> = Arc::new((0..500).map(|_| Default::default()).collect());
    let busy: Vec<_> = (0..500)
        .map(|i| {
            let sums = Arc::clone(&sums);
            thread::spawn(move || {
                let start = Instant::now();
                let mut inside = Duration::ZERO;
                while start.elapsed() < run_for {
                    let began = Instant::now();
                    {
                        let _mark = VALIDATION.mark_with("rule-a");
                        spin(Duration::from_micros(300));
                    }
                    inside += began.elapsed();
                    spin(Duration::from_micros(200));
                    sums[i][0].store(inside.as_nanos() as u64, Ordering::Relaxed);
                    sums[i][1].store(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
                }
            })
        })
        .collect();
    ready();
    let now = || {
        sums.iter().fold((0, 0), |(inside, all), sum| {
            let load = |i: usize| sum[i].load(Ordering::Relaxed);
            (inside + load(0), all + load(1))
        })
    };
    let mut lines = String::new();
    while !busy.iter().all(|handle| handle.is_finished()) {
        let (inside, all) = now();
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        lines += &format!("{} {inside} {all}\n", unix.as_nanos());
        thread::sleep(Duration::from_millis(10));
    }
    for handle in busy {
        handle.join().unwrap();
    }
    if let Some(path) = series {
        std::fs::write(format!("{path}.series"), lines).unwrap();
    }
    let (inside, all) = now();
    truth.feature("validation", "rule-a", Duration::from_nanos(inside));
    truth.active(Duration::from_nanos(all));
}

/// Threads born and gone as fast as the machine allows (the aim is one every 100 µs, at most 16
/// alive): each spends 50 µs in a mark and 50 µs outside, timed by itself.
pub(super) fn births(truth: &Arc<Truth>, run_for: Duration, ready: impl FnOnce()) {
    let start = Instant::now();
    let mut running = std::collections::VecDeque::new();
    let mut ready = Some(ready);
    let mut born = 0u64;
    let mut next = start;
    while start.elapsed() < run_for {
        if running.len() == 16 {
            let handle: thread::JoinHandle<()> = running.pop_front().unwrap();
            handle.join().unwrap();
        }
        let truth = Arc::clone(truth);
        running.push_back(thread::spawn(move || {
            let began = Instant::now();
            {
                let _mark = VALIDATION.mark_with("short");
                spin(Duration::from_micros(50));
            }
            let inside = began.elapsed();
            spin(Duration::from_micros(50));
            // Told to the truth outside the mark (its mutex is shared by every thread). The
            // thread's time counts from its birth (the runtime's start-up work, before this
            // closure, is the thread running too), as fsprof counts it.
            truth.feature("validation", "short", inside);
            truth.active(thread_runnable_time().max(began.elapsed()));
        }));
        born += 1;
        if let Some(ready) = ready.take() {
            ready();
        }
        next += Duration::from_micros(100);
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
    }
    for handle in running {
        handle.join().unwrap();
    }
    // The spawner's own time running (making and joining threads) counts too.
    truth.active(thread_runnable_time());
    truth.extra(
        "births_per_second",
        born as f64 / start.elapsed().as_secs_f64(),
    );
}
