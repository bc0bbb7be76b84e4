//! Async tasks on a real tokio runtime (two worker threads), each marked while it is polled with
//! `TASKS.instrument`: a `server` task spawns two connections from inside its own poll, `conn-A`
//! doing four times `conn-B`'s work per poll, and `conn-A` spawns a `request` task now and then,
//! so the feature's tree is server > conn-A > request and server > conn-B. Every task yields after
//! each piece of work (the worker moves to another task; no mark is held between polls).
//!
//!   tasks SECONDS --truth FILE
//!
//! The truth: the self time of each path (each piece of work, timed where it runs) under
//! `trees.tasks`, and as total every thread's time running or waiting for a CPU (the workers'
//! scheduling included, which is outside every mark).

use fsprof_shim::Feature;
use fsprof_tests::{runtime_counted_in, spin, thread_runnable_time, Rng, Truth};
use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

static TASKS: Feature = Feature::new("tasks");

thread_local! {
    /// Varies each piece of work around its mean (half to one and a half times it): tasks of
    /// equal steps would keep in step with the sampling grid (see the closing notes of
    /// 2026-11-26: the perf backend's samples fall on a grid).
    static RNG: RefCell<Rng> = RefCell::new(Rng::new(17));
}

/// Spins for about `mean`, crediting the time it took to `path` of the tasks' tree.
fn work(truth: &Truth, path: &[&str], mean: Duration) {
    let micros = mean.as_micros() as u64;
    let time = RNG.with(|rng| rng.borrow_mut().micros(micros / 2, micros * 3 / 2));
    let start = Instant::now();
    spin(time);
    truth.tree("tasks", path, start.elapsed());
}

/// Yields to the runtime once: the task's poll ends, and it is polled again later.
async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return std::task::Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 || args[2] != "--truth" {
        eprintln!("usage: tasks SECONDS --truth FILE");
        std::process::exit(2);
    }
    let run_for = Duration::from_secs_f64(args[1].parse().expect("SECONDS"));
    let truth = Arc::new(Truth::default());
    let runtime = runtime_counted_in(&truth);
    let deadline = Instant::now() + run_for;
    let server_truth = Arc::clone(&truth);
    runtime.block_on(async move {
        tokio::spawn(TASKS.instrument("server", server(server_truth, deadline)))
            .await
            .unwrap()
    });
    drop(runtime); // joins the workers, which add their time
    let main_thread = thread_runnable_time();
    truth.active(main_thread);
    truth.extra("main_thread_ms", main_thread.as_secs_f64() * 1e3);
    std::fs::write(&args[3], truth.to_json().to_string()).unwrap();
}

async fn server(truth: Arc<Truth>, deadline: Instant) {
    // Spawned inside the server's poll: both count under it.
    let a = tokio::spawn(TASKS.instrument("conn-A", connection_a(Arc::clone(&truth), deadline)));
    let b = tokio::spawn(TASKS.instrument("conn-B", connection_b(Arc::clone(&truth), deadline)));
    while Instant::now() < deadline {
        work(&truth, &["server"], Duration::from_micros(150));
        yield_now().await;
    }
    a.await.unwrap();
    b.await.unwrap();
}

async fn connection_a(truth: Arc<Truth>, deadline: Instant) {
    let mut requests = Vec::new();
    let mut round = 0u32;
    while Instant::now() < deadline {
        work(&truth, &["server", "conn-A"], Duration::from_micros(800));
        round += 1;
        if round.is_multiple_of(8) {
            let truth = Arc::clone(&truth);
            requests.push(tokio::spawn(TASKS.instrument("request", async move {
                for _ in 0..3 {
                    work(
                        &truth,
                        &["server", "conn-A", "request"],
                        Duration::from_micros(400),
                    );
                    yield_now().await;
                }
            })));
        }
        yield_now().await;
    }
    for request in requests {
        request.await.unwrap();
    }
}

async fn connection_b(truth: Arc<Truth>, deadline: Instant) {
    while Instant::now() < deadline {
        work(&truth, &["server", "conn-B"], Duration::from_micros(200));
        yield_now().await;
    }
}
