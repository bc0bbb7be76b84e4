//! An actor-style echo server on loopback, the process-accounting case study: a `server` task on
//! a tokio runtime accepts two connections and spawns, from inside its own poll, an actor task
//! per connection, named by the client's first byte (`conn-A`, `conn-B`) and marked while it is
//! polled with `TASKS.instrument`. Two client threads (plain blocking sockets, outside the runtime
//! and every mark) send chunks at the same pace, each waiting for its echo, client A ten times as
//! many bytes as client B; an actor transforms every byte it receives (a fixed cost per byte) and
//! echoes the result. The tree should show the two connections under the server in the
//! proportion of their input.
//!
//!   echo SECONDS --truth FILE
//!
//! The truth: under `trees.tasks`, the self time of each path as the tasks measured it (the wall
//! time of each of their polls, timed around the poll inside the mark's wrapper: what a task
//! costs is the time it is polled, reads, writes and polls that find nothing to do included),
//! `extra.bytes A` and `extra.bytes B`; as total, every thread's time running or waiting for a
//! CPU.

use fsprof_shim::Feature;
use fsprof_tests::{
    runtime_counted_in, thread_cpu_time, thread_runnable_time, thread_wait_time, Rng, Truth,
};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

static TASKS: Feature = Feature::new("tasks");

/// Rounds of arithmetic per byte an actor transforms (about 0.15 µs a byte: a chunk costs well
/// above the 40 µs of its echo on loopback, so the actors' times follow their input).
const ROUNDS: u32 = 200;
/// Client B's mean chunk; client A's is ten times larger.
const CHUNK: usize = 2000;
/// The clients' pause between two chunks (varied by half either way).
const PAUSE: Duration = Duration::from_millis(8);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 || args[2] != "--truth" {
        eprintln!("usage: echo SECONDS --truth FILE");
        std::process::exit(2);
    }
    let run_for = Duration::from_secs_f64(args[1].parse().expect("SECONDS"));
    let truth = Arc::new(Truth::default());
    let runtime = runtime_counted_in(&truth);
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let address = listener.local_addr().unwrap();
    let deadline = Instant::now() + run_for;
    let clients: Vec<_> = [(b'A', 10, 21), (b'B', 1, 22)]
        .into_iter()
        .map(|(name, scale, seed)| {
            let truth = Arc::clone(&truth);
            std::thread::spawn(move || {
                let bytes = client(address, name, CHUNK * scale, deadline, seed);
                truth.extra(&format!("bytes {}", name as char), bytes as f64);
                // Each client's own figures, for a failing test's message.
                let (cpu, wait) = (thread_cpu_time(), thread_wait_time());
                truth.extra(&format!("client {} cpu_ms", name as char), ms(cpu));
                truth.extra(&format!("client {} wait_ms", name as char), ms(wait));
                truth.active(thread_runnable_time());
            })
        })
        .collect();
    let server_truth = Arc::clone(&truth);
    runtime.block_on(async move {
        let server = server(listener, Arc::clone(&server_truth));
        let server = timed_polls(server, server_truth, &["server"]);
        tokio::spawn(TASKS.instrument("server", server))
            .await
            .unwrap()
    });
    for client in clients {
        client.join().unwrap();
    }
    drop(runtime); // joins the workers, which add their time
    truth.active(thread_runnable_time());
    std::fs::write(&args[3], truth.to_json().to_string()).unwrap();
}

/// Accepts the two connections and spawns their actors from inside its own poll (so both count
/// under it), then waits for them.
async fn server(listener: tokio::net::TcpListener, truth: Arc<Truth>) {
    let mut actors = Vec::new();
    for _ in 0..2 {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut hello = [0u8];
        socket.read_exact(&mut hello).await.unwrap();
        let (name, path): (_, &'static [&'static str]) = if hello[0] == b'A' {
            ("conn-A", &["server", "conn-A"])
        } else {
            ("conn-B", &["server", "conn-B"])
        };
        let actor = timed_polls(actor(socket), Arc::clone(&truth), path);
        actors.push(tokio::spawn(TASKS.instrument(name, actor)));
    }
    for actor in actors {
        actor.await.unwrap();
    }
}

/// One connection's actor: transforms each chunk it reads and echoes it, until the client
/// closes its side.
async fn actor(mut socket: tokio::net::TcpStream) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = socket.read(&mut buffer).await.unwrap();
        if n == 0 {
            return;
        }
        transform(&mut buffer[..n]);
        socket.write_all(&buffer[..n]).await.unwrap();
    }
}

/// `future`, the wall time of each of its polls added to the truth's tree at `path`.
fn timed_polls<F: std::future::Future>(
    future: F,
    truth: Arc<Truth>,
    path: &'static [&'static str],
) -> impl std::future::Future<Output = F::Output> {
    let mut future = Box::pin(future);
    std::future::poll_fn(move |cx| {
        let start = Instant::now();
        let poll = future.as_mut().poll(cx);
        truth.tree("tasks", path, start.elapsed());
        poll
    })
}

/// The actor's work: a cost per byte.
fn transform(bytes: &mut [u8]) {
    for byte in bytes {
        let mut x = u64::from(*byte) | 0x100;
        for _ in 0..ROUNDS {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        *byte = (x >> 56) as u8;
    }
}

/// A client: says its name, then until `deadline` sends a chunk of about `mean` bytes (half to
/// one and a half times it) every [`PAUSE`] or so, reading each echo whole. Returns the bytes it
/// sent.
fn client(address: SocketAddr, name: u8, mean: usize, deadline: Instant, seed: u64) -> u64 {
    let mut socket = std::net::TcpStream::connect(address).unwrap();
    socket.set_nodelay(true).unwrap();
    socket.write_all(&[name]).unwrap();
    let mut rng = Rng::new(seed);
    let chunk: Vec<u8> = (0..mean * 3 / 2).map(|i| i as u8).collect();
    let mut echo = vec![0u8; chunk.len()];
    let mut sent = 0u64;
    let mut next = Instant::now();
    while next < deadline {
        let n = rng.below(mean) + mean / 2;
        socket.write_all(&chunk[..n]).unwrap();
        socket.read_exact(&mut echo[..n]).unwrap();
        sent += n as u64;
        // On a schedule, not after the echo: both clients send as many chunks.
        let pause = PAUSE.as_micros() as u64;
        next += rng.micros(pause / 2, pause * 3 / 2);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    socket.shutdown(std::net::Shutdown::Write).unwrap();
    sent
}

/// `duration` in milliseconds.
fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}
