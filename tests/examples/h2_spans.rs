//! A real crate's spans in a feature profile: an HTTP/2 server and client (the `h2` crate, from
//! crates.io, which opens `tracing` spans in its connection code: `Connection`, `poll`,
//! `FramedWrite::flush`, ...) exchanging requests on loopback, with no marks of their own, only
//! `fsprof_tracing::layer()`.
//!
//!   fsprof run -- target/release/examples/h2_spans SECONDS

use std::time::{Duration, Instant};
use tracing_subscriber::layer::SubscriberExt;

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("usage: h2_spans SECONDS");
    let subscriber = tracing_subscriber::registry().with(fsprof_tracing::layer());
    tracing::subscriber::set_global_default(subscriber).expect("no subscriber yet");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .build()
        .expect("a runtime");
    let requests = runtime.block_on(exchange(Duration::from_secs_f64(secs)));
    println!("{requests} requests");
}

/// Serves on loopback and sends requests of 16 KiB until `run_for` has passed; returns how many.
async fn exchange(run_for: Duration) -> u64 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        socket.set_nodelay(true).unwrap();
        let mut connection = h2::server::handshake(socket).await.unwrap();
        while let Some(Ok((request, mut respond))) = connection.accept().await {
            tokio::spawn(async move {
                let mut body = request.into_body();
                let mut length = 0;
                while let Some(Ok(chunk)) = body.data().await {
                    length += chunk.len();
                    let _ = body.flow_control().release_capacity(chunk.len());
                }
                let response = http::Response::new(());
                if let Ok(mut send) = respond.send_response(response, false) {
                    let _ = send.send_data(bytes::Bytes::from(length.to_string()), true);
                }
            });
        }
    });
    let socket = tokio::net::TcpStream::connect(address).await.unwrap();
    socket.set_nodelay(true).unwrap();
    let (client, connection) = h2::client::handshake(socket).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut client = client.ready().await.unwrap();
    let (start, mut requests) = (Instant::now(), 0);
    while start.elapsed() < run_for {
        let request = http::Request::post("http://localhost/echo")
            .body(())
            .unwrap();
        let (response, mut stream) = client.send_request(request, false).unwrap();
        stream
            .send_data(bytes::Bytes::from(vec![b'x'; 16 * 1024]), true)
            .unwrap();
        let mut body = response.await.unwrap().into_body();
        while let Some(Ok(chunk)) = body.data().await {
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        requests += 1;
        client = client.ready().await.unwrap();
    }
    requests
}
