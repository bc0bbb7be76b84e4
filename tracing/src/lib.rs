//! The `tracing` bridge of [fsprof]: a [`Layer`] that marks every span while it is entered, so
//! that a program whose dependencies already emit spans (tokio, hyper, tower, sqlx, ...) gets a
//! feature profile with one line:
//!
//! ```
//! use tracing_subscriber::layer::SubscriberExt;
//!
//! let subscriber = tracing_subscriber::registry().with(fsprof_tracing::layer());
//! tracing::subscriber::with_default(subscriber, || {
//!     let _span = tracing::info_span!("parse").entered(); // feature `parse`, this call site
//! });
//! ```
//!
//! The feature is the span's name; the instance its call site (`file:line` from its metadata, a
//! crates.io dependency's file as `h2-0.4.20/src/...`),
//! or, with [`FsprofLayer::with_instance_field`], the value of one of its fields (`conn = 42`),
//! recorded when the span is made or later. A span's mark is pushed when it is entered and popped
//! when it exits (an `Instrumented` future's span around each poll), on the thread that entered
//! it; a span exited out of order pops the marks entered after it too.
//!
//! Costs: each distinct call site and span name is looked up once (a descriptor and an interned
//! string, leaked: call sites are finite); each span made looks its call site up in a map under
//! a read lock and keeps its marking in the registry's extensions; each enter and exit pushes or
//! pops a mark and a thread-local entry (BENCHMARKS.md, "The tracing bridge"). Field values are
//! interned too: past [`MAX_VALUES`] distinct ones, further values share one instance,
//! `<other values>`.
//!
//! Not here: events (`tracing::info!`), which have no duration, and spans' durations themselves
//! (fsprof samples; it does not time each span).
//!
//! [fsprof]: https://crates.io/crates/fsprof

#![deny(missing_docs)]

use fsprof_shim::{Feature, Mark};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Mutex, RwLock};
use tracing_core::callsite::Identifier;
use tracing_core::field::{Field, Visit};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// Distinct field values interned as instances (see [`FsprofLayer::with_instance_field`]).
pub const MAX_VALUES: usize = 10_000;

/// The instance of values past [`MAX_VALUES`].
const OTHER_VALUES: &str = "<other values>";

/// A layer that marks spans as fsprof features (see the crate's documentation).
pub fn layer() -> FsprofLayer {
    FsprofLayer {
        instance_field: None,
        sites: RwLock::new(HashMap::new()),
        features: Mutex::new(HashMap::new()),
        values: Mutex::new(HashMap::new()),
    }
}

/// The layer [`layer`] makes.
pub struct FsprofLayer {
    instance_field: Option<&'static str>,
    /// Per call site: its feature and its call-site instance.
    sites: RwLock<HashMap<Identifier, Marking>>,
    /// One descriptor per span name.
    features: Mutex<HashMap<&'static str, &'static Feature>>,
    /// Interned field values.
    values: Mutex<HashMap<String, &'static str>>,
}

/// What a span is marked with (kept in its extensions).
#[derive(Clone, Copy)]
struct Marking {
    feature: &'static Feature,
    instance: &'static str,
}

thread_local! {
    /// The spans this thread entered and has not exited, with their marks, innermost last.
    static ENTERED: RefCell<Vec<(Id, Mark)>> = const { RefCell::new(Vec::new()) };
}

impl FsprofLayer {
    /// Takes each span's instance from its field `name` (its `Display` form for strings, `Debug`
    /// otherwise), when the span has it, instead of its call site.
    pub fn with_instance_field(mut self, name: &'static str) -> FsprofLayer {
        self.instance_field = Some(name);
        self
    }

    /// The marking of call site `metadata` (worked out on its first span).
    fn site(&self, metadata: &'static Metadata<'static>) -> Marking {
        let id = metadata.callsite();
        if let Some(found) = self.sites.read().ok().and_then(|s| s.get(&id).copied()) {
            return found;
        }
        let feature = {
            let mut features = self.features.lock().unwrap_or_else(|e| e.into_inner());
            *(features.entry(metadata.name()))
                .or_insert_with(|| Box::leak(Box::new(Feature::new(metadata.name()))))
        };
        let instance = match (metadata.file().map(short_path), metadata.line()) {
            (Some(file), Some(line)) => fsprof_shim::intern(&format!("{file}:{line}")),
            (Some(file), None) => fsprof_shim::intern(file),
            _ => fsprof_shim::intern(metadata.target()),
        };
        let marking = Marking { feature, instance };
        if let Ok(mut sites) = self.sites.write() {
            sites.insert(id, marking);
        }
        marking
    }

    /// `value` as an instance: interned, or [`OTHER_VALUES`] past [`MAX_VALUES`].
    fn value(&self, value: String) -> &'static str {
        let mut values = self.values.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = values.get(&value) {
            return found;
        }
        if values.len() >= MAX_VALUES {
            return OTHER_VALUES;
        }
        let interned = fsprof_shim::intern(&value);
        values.insert(value, interned);
        interned
    }
}

/// A source path without the cargo registry's directories: a dependency's file from crates.io
/// as `h2-0.4.20/src/proto/connection.rs`, not under `~/.cargo/registry/src/index.crates.io-…/`.
fn short_path(file: &str) -> &str {
    const REGISTRY: &str = "/registry/src/";
    match file.find(REGISTRY).map(|at| &file[at + REGISTRY.len()..]) {
        Some(rest) => rest.split_once('/').map_or(rest, |(_, path)| path),
        None => file,
    }
}

/// Finds the value of one field.
struct FieldValue {
    name: &'static str,
    value: Option<String>,
}

impl Visit for FieldValue {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == self.name {
            self.value = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == self.name {
            self.value = Some(format!("{value:?}"));
        }
    }
}

impl FsprofLayer {
    /// The instance field's value among `record`'s, interned, if it is there.
    fn field_instance(&self, visit: impl FnOnce(&mut FieldValue)) -> Option<&'static str> {
        let name = self.instance_field?;
        let mut found = FieldValue { name, value: None };
        visit(&mut found);
        found.value.map(|value| self.value(value))
    }
}

impl<S> Layer<S> for FsprofLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attributes: &Attributes<'_>, id: &Id, context: Context<'_, S>) {
        let mut marking = self.site(attributes.metadata());
        if let Some(instance) = self.field_instance(|found| attributes.record(found)) {
            marking.instance = instance;
        }
        if let Some(span) = context.span(id) {
            span.extensions_mut().insert(marking);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, context: Context<'_, S>) {
        let Some(instance) = self.field_instance(|found| values.record(found)) else {
            return;
        };
        if let Some(span) = context.span(id) {
            if let Some(marking) = span.extensions_mut().get_mut::<Marking>() {
                marking.instance = instance;
            }
        }
    }

    fn on_enter(&self, id: &Id, context: Context<'_, S>) {
        let Some(marking) = context
            .span(id)
            .and_then(|span| span.extensions().get::<Marking>().copied())
        else {
            return;
        };
        let mark = marking.feature.mark_with(marking.instance);
        ENTERED.with(|entered| entered.borrow_mut().push((id.clone(), mark)));
    }

    fn on_exit(&self, id: &Id, _context: Context<'_, S>) {
        let _ = ENTERED.try_with(|entered| {
            let mut entered = entered.borrow_mut();
            if let Some(at) = entered.iter().rposition(|(entered, _)| entered == id) {
                // Its guard pops its mark, and those of spans entered after it and not exited.
                let (_, mark) = entered.remove(at);
                drop(mark);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn a_span_is_marked_while_entered_and_out_of_order_exits_leave_no_mark() {
        let subscriber = tracing_subscriber::registry().with(layer().with_instance_field("page"));
        tracing::subscriber::with_default(subscriber, || {
            let base = fsprof_shim::depth();
            let outer = tracing::info_span!("outer", page = "home");
            let inner = tracing::info_span!("inner");
            {
                let _o = outer.enter();
                assert_eq!(fsprof_shim::depth(), base + 1);
                let _i = inner.enter();
                assert_eq!(fsprof_shim::depth(), base + 2);
            }
            assert_eq!(fsprof_shim::depth(), base);
            // Entered again later (an async task's next poll): marked again.
            let entered = outer.clone().entered();
            assert_eq!(fsprof_shim::depth(), base + 1);
            drop(entered);
            // Exited out of order: the outer exit pops both; the inner one's then does nothing.
            let o = outer.clone().entered();
            let i = inner.clone().entered();
            assert_eq!(fsprof_shim::depth(), base + 2);
            drop(o);
            assert_eq!(fsprof_shim::depth(), base);
            drop(i);
            assert_eq!(fsprof_shim::depth(), base);
        });
    }

    #[test]
    fn call_sites_in_the_cargo_registry_are_named_from_the_crate() {
        let file = "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/h2-0.4.20/src/a.rs";
        assert_eq!(short_path(file), "h2-0.4.20/src/a.rs");
        assert_eq!(short_path("src/main.rs"), "src/main.rs");
    }

    #[test]
    fn field_values_are_interned_once_and_bounded() {
        let layer = layer().with_instance_field("conn");
        let a = layer.value("conn-1".to_owned());
        assert_eq!(a, "conn-1");
        assert!(std::ptr::eq(a, layer.value("conn-1".to_owned())));
        for n in 0..MAX_VALUES + 5 {
            layer.value(format!("v{n}"));
        }
        assert_eq!(layer.value("one too many".to_owned()), OTHER_VALUES);
    }
}
