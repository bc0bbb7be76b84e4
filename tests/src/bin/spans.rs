//! A program instrumented with `tracing` spans alone (no marks of its own), profiled through
//! `fsprof_tracing::layer().with_instance_field("page")`: a `parse` span (its instance: its call
//! site), `render` spans whose instance is their `page` field (`home` twice as long as `about`),
//! and a `query` span nested in each render, between stretches of work outside any span.
//!
//!   spans SECONDS --truth FILE
//!
//! The truth: each span's time as measured around it (a render's includes its query's).

use fsprof_tests::{spin, Truth};
use std::time::{Duration, Instant};
use tracing_subscriber::layer::SubscriberExt;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 || args[2] != "--truth" {
        eprintln!("usage: spans SECONDS --truth FILE");
        std::process::exit(2);
    }
    let run_for = Duration::from_secs_f64(args[1].parse().expect("SECONDS"));
    let subscriber =
        tracing_subscriber::registry().with(fsprof_tracing::layer().with_instance_field("page"));
    tracing::subscriber::set_global_default(subscriber).expect("no subscriber yet");
    let truth = Truth::default();
    let us = Duration::from_micros;
    // A span's call site, as its metadata gives it (the layer's instance).
    let site = |span: &tracing::Span| {
        let metadata = span.metadata().expect("enabled");
        format!("{}:{}", metadata.file().unwrap(), metadata.line().unwrap())
    };
    let start = Instant::now();
    while start.elapsed() < run_for {
        let begun = Instant::now();
        let span = tracing::info_span!("parse");
        span.in_scope(|| spin(us(300)));
        truth.feature("parse", &site(&span), begun.elapsed());
        for (page, work) in [("home", us(400)), ("about", us(200))] {
            let begun = Instant::now();
            let render = tracing::info_span!("render", page);
            render.in_scope(|| {
                spin(work);
                let begun = Instant::now();
                let query = tracing::info_span!("query");
                query.in_scope(|| spin(us(100)));
                truth.feature("query", &site(&query), begun.elapsed());
            });
            truth.feature("render", page, begun.elapsed());
        }
        spin(us(250));
    }
    truth.active(start.elapsed());
    std::fs::write(&args[3], truth.to_json().to_string()).unwrap();
}
