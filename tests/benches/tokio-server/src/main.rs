//! A small tokio line server and the load that drives it over loopback, for
//! `tests/benches/agent-programs.sh`.
//!
//! `tokio-server serve CONNECTIONS` listens on 127.0.0.1, prints its port, answers each request
//! line with a line computed from it (a `String` and a `Vec` per request: the allocator, reads,
//! writes and epoll waits a real server makes) and exits once CONNECTIONS connections have
//! closed. `tokio-server load PORT CONNECTIONS REQUESTS` opens CONNECTIONS connections from as
//! many threads and makes REQUESTS requests on each, one at a time, checking every answer.

use std::io::{BufRead, BufReader, Write};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let number = |i: usize| -> usize { args[i].parse().expect("a number") };
    match args.get(1).map(String::as_str) {
        Some("serve") => serve(number(2)),
        Some("load") => load(number(2) as u16, number(3), number(4)),
        _ => panic!("usage: tokio-server serve CONNECTIONS | load PORT CONNECTIONS REQUESTS"),
    }
}

fn answer(line: &str) -> String {
    let words: Vec<&str> = line.split_whitespace().collect();
    let sum: u64 = words.iter().flat_map(|w| w.bytes()).map(u64::from).sum();
    format!("{} {} {}\n", words.len(), sum, words.last().unwrap_or(&""))
}

fn serve(connections: usize) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_io()
        .build()
        .unwrap();
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!("{}", listener.local_addr().unwrap().port());
        std::io::stdout().flush().unwrap();
        let mut handles = Vec::new();
        for _ in 0..connections {
            let (socket, _) = listener.accept().await.unwrap();
            handles.push(tokio::spawn(async move {
                socket.set_nodelay(true).unwrap();
                let (reader, mut writer) = socket.into_split();
                let mut lines = tokio::io::BufReader::new(reader).lines();
                while let Some(line) = lines.next_line().await.unwrap() {
                    writer.write_all(answer(&line).as_bytes()).await.unwrap();
                }
            }));
        }
        for handle in handles {
            handle.await.unwrap();
        }
    });
}

fn load(port: u16, connections: usize, requests: usize) {
    let threads: Vec<_> = (0..connections)
        .map(|c| {
            std::thread::spawn(move || {
                let stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
                stream.set_nodelay(true).unwrap();
                let mut writer = stream.try_clone().unwrap();
                let mut reader = BufReader::new(stream);
                let mut got = String::new();
                for r in 0..requests {
                    let line = format!("request {c} {r} from the load\n");
                    writer.write_all(line.as_bytes()).unwrap();
                    got.clear();
                    reader.read_line(&mut got).unwrap();
                    assert_eq!(got, answer(line.trim_end()), "a wrong answer");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}
