//! Ground truth for `fsprof what-if`: programs with a knob that really makes one feature cheaper
//! (its work, a fixed count of arithmetic steps, cut by a percentage), so the gain a speedup
//! buys is measured by running with the knob, and compared with what `what-if` predicts.
//!
//!   whatif batch|pipeline|server \[ITEMS\] [--cheaper FEATURE=PERCENT]...
//!
//! * `batch`: one thread, per item `parse` (3 units of work) then `check` (1 unit): a speedup
//!   of either buys its share of the time times the speedup.
//! * `pipeline`: a `decode` thread (3 units an item) hands items through a bounded channel to a
//!   `render` thread (1 unit an item); the main thread waits for both. Decode is the
//!   bottleneck: making it up to 50% faster buys up to half the time, making render faster
//!   buys nothing.
//! * `server`: a client thread sends requests one after another over a loopback TCP connection
//!   (`prepare`, 1 unit, before each) and waits for each answer; the server's thread for the
//!   connection answers each (`handle`, 2 units). The program's time is its requests' latencies
//!   added up. Each request is a `request` mark (a progress point for `what-if --progress
//!   request`); the client prints their mean latency to stderr (`latency_ns N`). (A logger thread beside them, fed through a channel, was left out: on two CPUs
//!   it delayed the requests by taking a CPU they were woken on, which no delay models.)
//!
//! Work is counted in steps, not timed: a thread slowed down (by a what-if experiment's delays)
//! does the same work later, as a slower CPU would. Prints its own wall time in ms.

use fsprof_shim::Feature;
use std::time::Instant;

static PARSE: Feature = Feature::new("parse");
static CHECK: Feature = Feature::new("check");
static DECODE: Feature = Feature::new("decode");
static RENDER: Feature = Feature::new("render");
static PREPARE: Feature = Feature::new("prepare");
static HANDLE: Feature = Feature::new("handle");
static REQUEST: Feature = Feature::new("request");

/// Arithmetic steps in one unit of work (about 100-150 µs on the machines here).
const UNIT: u64 = 100_000;

fn work(units: f64, seed: u64) -> u64 {
    let mut x = seed | 1;
    for _ in 0..(units * UNIT as f64) as u64 {
        x = std::hint::black_box(
            x.wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407),
        );
    }
    x
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map(String::as_str).unwrap_or("");
    let mut items: u64 = 1000;
    let mut cheaper = std::collections::HashMap::new();
    let mut rest = args.iter().skip(1);
    while let Some(arg) = rest.next() {
        if arg == "--cheaper" {
            let spec = rest.next().expect("--cheaper FEATURE=PERCENT");
            let (feature, percent) = spec.split_once('=').expect("FEATURE=PERCENT");
            let percent: f64 = percent.parse().expect("PERCENT");
            cheaper.insert(feature.to_owned(), 1.0 - percent / 100.0);
        } else {
            items = arg.parse().expect("ITEMS");
        }
    }
    let cost = |feature: &str, units: f64| units * cheaper.get(feature).copied().unwrap_or(1.0);
    let start = Instant::now();
    let result = match mode {
        "batch" => {
            let (parse, check) = (cost("parse", 3.0), cost("check", 1.0));
            let mut sum = 0u64;
            for item in 0..items {
                {
                    let _m = PARSE.mark();
                    sum = sum.wrapping_add(work(parse, item));
                }
                let _m = CHECK.mark();
                sum = sum.wrapping_add(work(check, item));
            }
            sum
        }
        "pipeline" => {
            let (decode, render) = (cost("decode", 3.0), cost("render", 1.0));
            let (send, receive) = std::sync::mpsc::sync_channel::<u64>(4);
            let producer = std::thread::Builder::new()
                .name("decode".into())
                .spawn(move || {
                    for item in 0..items {
                        let decoded = {
                            let _m = DECODE.mark();
                            work(decode, item)
                        };
                        send.send(decoded).unwrap();
                    }
                })
                .unwrap();
            let consumer = std::thread::Builder::new()
                .name("render".into())
                .spawn(move || {
                    let mut sum = 0u64;
                    for decoded in receive {
                        let _m = RENDER.mark();
                        sum = sum.wrapping_add(work(render, decoded));
                    }
                    sum
                })
                .unwrap();
            producer.join().unwrap();
            consumer.join().unwrap()
        }
        "server" => server(items, cost("prepare", 1.0), cost("handle", 2.0)),
        _ => {
            eprintln!("usage: whatif batch|pipeline|server [ITEMS] [--cheaper FEATURE=PERCENT]...");
            std::process::exit(2);
        }
    };
    std::hint::black_box(result);
    println!("{}", start.elapsed().as_millis());
}

/// The `server` mode (see the module's documentation): `requests` requests of 8 bytes, each
/// answered with 8 bytes.
fn server(requests: u64, prepare: f64, handle: f64) -> u64 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let answering = std::thread::Builder::new()
        .name("server".into())
        .spawn(move || {
            let (mut connection, _) = listener.accept().unwrap();
            connection.set_nodelay(true).unwrap();
            let mut request = [0u8; 8];
            while connection.read_exact(&mut request).is_ok() {
                let answer = {
                    let _m = HANDLE.mark();
                    work(handle, u64::from_le_bytes(request))
                };
                connection.write_all(&answer.to_le_bytes()).unwrap();
            }
        })
        .unwrap();
    let mut connection = std::net::TcpStream::connect(address).unwrap();
    connection.set_nodelay(true).unwrap();
    let mut sum = 0u64;
    let mut answer = [0u8; 8];
    let mut latency = std::time::Duration::ZERO;
    for request in 0..requests {
        let start = Instant::now();
        let _m = REQUEST.mark();
        let sent = {
            let _m = PREPARE.mark();
            work(prepare, request)
        };
        connection.write_all(&sent.to_le_bytes()).unwrap();
        connection.read_exact(&mut answer).unwrap();
        sum = sum.wrapping_add(u64::from_le_bytes(answer));
        latency += start.elapsed();
    }
    eprintln!(
        "latency_ns {}",
        latency.as_nanos() / u128::from(requests.max(1))
    );
    drop(connection);
    answering.join().unwrap();
    sum
}
