//! Unit tests of the writer: stack discipline, out-of-order and leaked guards, depth bound, slot
//! reuse, fork, pushes left halfway by a jump. They read the region in-process through the same `abi` decoders the profiler uses.

use crate::abi::{self, KIND_ANTIMARK, KIND_LOCATION, KIND_NAME, MARK_CAPACITY};
use crate::{depth, intern, region_address, Feature};

static A: Feature = Feature::new("a");
static B: Feature = Feature::new("b");

extern "C" {
    fn gettid() -> i32;
    fn fork() -> i32;
    fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
    fn _exit(code: i32) -> !;
}

/// Copies this process's region (as the profiler would from outside).
fn region_bytes() -> &'static [u8] {
    let start = region_address().expect("region exists after a mark");
    // SAFETY: the region is REGION_SIZE bytes, mapped for the life of the process.
    unsafe { std::slice::from_raw_parts(start as *const u8, abi::REGION_SIZE) }
}

/// The calling thread's records, decoded from the region.
fn my_records() -> (u32, Vec<abi::RecordView>) {
    let bytes = region_bytes();
    let header = abi::parse_header(bytes).unwrap();
    assert!(header.is_compatible());
    let tid = unsafe { gettid() } as u32;
    for index in 0..header.slots_used as usize {
        let slot = &bytes[abi::HEADER_SIZE + index * abi::SLOT_SIZE..][..abi::SLOT_SIZE];
        let state = abi::parse_slot_state(slot).unwrap();
        if state.tid == tid {
            let records = (0..(state.depth as usize).min(MARK_CAPACITY))
                .map(|i| {
                    abi::parse_record(&slot[abi::RECORDS_OFFSET + i * abi::RECORD_SIZE..]).unwrap()
                })
                .collect();
            return (state.depth, records);
        }
    }
    (0, Vec::new())
}

#[test]
fn marks_nest_and_pop_in_order() {
    let base = depth();
    {
        let _a = A.mark();
        let line = line!() - 1;
        let _b = B.mark_with("inner");
        let _x = A.antimark();
        assert_eq!(depth(), base + 3);
        let (d, records) = my_records();
        assert_eq!(d, base + 3);
        let [a, b, x] = &records[base as usize..] else {
            panic!("{records:?}")
        };
        assert_eq!(a.feature, &A as *const Feature as u64);
        assert_eq!(a.kind, KIND_LOCATION);
        assert_eq!(a.line, line);
        assert_eq!(b.kind, KIND_NAME);
        assert_eq!(b.payload_len, 5);
        assert_eq!(x.kind, KIND_ANTIMARK);
        assert!(
            a.sp >= b.sp || a.sp.abs_diff(b.sp) < 4096,
            "stack anchors are in this frame"
        );
    }
    assert_eq!(depth(), base);
}

#[test]
fn outer_guard_dropped_first_pops_inner_and_inner_drop_is_harmless() {
    let outer = A.mark();
    let inner = B.mark();
    drop(outer);
    assert_eq!(depth(), 0);
    let again = A.mark_with("again");
    assert_eq!(depth(), 1);
    drop(inner); // its slot index (1) is above the current depth: nothing happens
    assert_eq!(depth(), 1);
    drop(again);
    assert_eq!(depth(), 0);
}

#[test]
fn stale_guard_does_not_pop_a_newer_mark_at_its_index() {
    let outer = A.mark();
    let inner = B.mark(); // index 1
    drop(outer); // pops both
    let new_outer = A.mark(); // index 0
    let new_inner = B.mark(); // index 1, a different mark
    drop(inner); // stale: must not pop new_inner
    assert_eq!(depth(), 2);
    drop(new_inner);
    drop(new_outer);
    assert_eq!(depth(), 0);
}

#[test]
fn leaked_guard_stays_until_enclosing_guard_drops() {
    let outer = A.mark();
    std::mem::forget(B.mark());
    assert_eq!(depth(), 2);
    drop(outer);
    assert_eq!(depth(), 0);
}

#[test]
fn marks_deeper_than_capacity_are_counted_not_written() {
    fn nest(n: usize) {
        if n == 0 {
            assert_eq!(depth() as usize, MARK_CAPACITY + 10);
            let (d, records) = my_records();
            assert_eq!(d as usize, MARK_CAPACITY + 10);
            assert_eq!(records.len(), MARK_CAPACITY);
            return;
        }
        let _m = A.mark_with("deep");
        nest(n - 1);
    }
    nest(MARK_CAPACITY + 10);
    assert_eq!(depth(), 0);
}

#[test]
fn exited_threads_release_their_slots_for_reuse() {
    let _m = A.mark(); // make sure the region exists
    let used_before = abi::parse_header(region_bytes()).unwrap().slots_used;
    for _ in 0..50 {
        std::thread::spawn(|| {
            let _m = B.mark();
        })
        .join()
        .unwrap();
    }
    let used_after = abi::parse_header(region_bytes()).unwrap().slots_used;
    // Each thread exits before the next starts, so the same slot is reused instead of 50 new
    // ones; other tests' threads, one test per CPU at once, may claim a few more meanwhile.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let others = (2 * cpus).clamp(8, 40) as u32;
    assert!(
        used_after <= used_before + others,
        "{used_before} -> {used_after} (beside {others} other tests' threads)"
    );
}

#[test]
fn interned_names_are_shared() {
    let a = intern(&format!("task-{}", 1));
    let b = intern("task-1");
    assert!(std::ptr::eq(a, b));
}

#[test]
fn forked_child_gets_its_own_region() {
    let _m = A.mark();
    let parent_region = region_address().unwrap();
    // SAFETY: the child only marks and checks, then _exits.
    let pid = unsafe { fork() };
    if pid == 0 {
        let ok = region_address().is_none() && {
            let _c = B.mark(); // creates a fresh region; the parent guard `_m` is inert here
            region_address().is_some_and(|r| r != parent_region || depth() == 1) && depth() == 1
        };
        unsafe { _exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    unsafe { waitpid(pid, &mut status, 0) };
    assert_eq!(status, 0, "child saw a stale region");
    assert_eq!(depth(), 1);
}

#[test]
fn raw_pops_take_the_innermost_mark_and_never_underflow() {
    use crate::raw;
    assert_eq!(depth(), 0);
    raw::pop_innermost(); // empty: nothing happens
    assert_eq!(depth(), 0);
    raw::push(&A, KIND_NAME, "x".as_ptr() as u64, 1, 0, 0x1000);
    raw::push(&B, abi::KIND_CALL_SITE, 0xdead, 0, 0, 0x0800);
    let (d, records) = my_records();
    assert_eq!(d, 2);
    assert_eq!(records[1].kind, abi::KIND_CALL_SITE);
    assert_eq!((records[1].payload, records[1].sp), (0xdead, 0x0800));
    raw::pop_innermost();
    assert_eq!(my_records().1[..1], records[..1]);
    // A guard above a raw mark: a raw pop removes it, and the guard's drop is then harmless.
    let guard = B.mark();
    raw::pop_innermost();
    assert_eq!(depth(), 1);
    raw::push(&A, KIND_ANTIMARK, 0, 0, 0, 0);
    drop(guard); // its index now holds a newer mark: left alone
    assert_eq!(depth(), 2);
    for _ in 0..5 {
        raw::pop_innermost();
    }
    assert_eq!(depth(), 0);
}

#[test]
fn a_call_site_mark_pops_itself_only_while_innermost_and_never_in_a_forked_child() {
    use crate::raw::{self, NotPushed};
    let nested = |f: &'static Feature| {
        let start = f as *const Feature as u64;
        start..start + 1
    };
    assert_eq!(depth(), 0);
    let _outer = A.mark(); // the thread has its slot
    let mark =
        raw::push_call_site_unless_nested(&B, 0xbeef, 0, 0x2000, nested(&B), false, true).unwrap();
    assert_eq!(depth(), 2);
    // Nested in a mark of a feature in `nested` (from a frame below it): nothing pushed.
    assert_eq!(
        raw::push_call_site_unless_nested(&B, 0xbeef, 0, 0x1000, nested(&B), false, true).err(),
        Some(NotPushed::Skipped)
    );
    // A mark above it (a signal handler's, say): the pop leaves both alone.
    raw::push(&A, KIND_NAME, "x".as_ptr() as u64, 1, 0, 0);
    mark.pop();
    assert_eq!(depth(), 3);
    raw::pop_innermost();
    // A forked child has forgotten the region (not even mapped in it): the pop does nothing.
    // SAFETY: the child only pops and checks, then _exits.
    let pid = unsafe { fork() };
    if pid == 0 {
        mark.pop();
        unsafe { _exit(if region_address().is_none() { 0 } else { 1 }) };
    }
    let mut status = 0;
    unsafe { waitpid(pid, &mut status, 0) };
    assert_eq!(status, 0, "the child's pop touched the region");
    assert_eq!(depth(), 2);
    // Innermost in its own slot: popped; a second pop finds it gone and does nothing.
    mark.pop();
    assert_eq!(depth(), 1);
    mark.pop();
    assert_eq!(depth(), 1);
}

#[test]
fn a_thread_without_a_slot_is_told_so_unless_it_may_claim() {
    use crate::raw::{self, NotPushed};
    std::thread::spawn(|| {
        let nothing = 0..0;
        assert_eq!(
            raw::push_call_site_unless_nested(&A, 1, 0, 0, nothing.clone(), false, true).err(),
            Some(NotPushed::NoSlot)
        );
        let mark = raw::push_call_site_unless_nested(&A, 1, 0, 0, nothing, true, true).unwrap();
        assert_eq!(depth(), 1);
        mark.pop();
        assert_eq!(depth(), 0);
    })
    .join()
    .unwrap();
}

#[test]
fn a_nested_mark_whose_frame_is_gone_is_replaced_not_nested_under() {
    use crate::raw::{self, NotPushed};
    std::thread::spawn(|| {
        let nested = |f: &'static Feature| {
            let start = f as *const Feature as u64;
            start..start + 1
        };
        let _outer = A.mark();
        // Pushed by a frame at 0x2000 that is never popped (a signal handler's siglongjmp left
        // the call): a call nested in it, from a frame below (0x1000), is still counted once.
        let _left =
            raw::push_call_site_unless_nested(&B, 1, 0, 0x2000, nested(&B), false, true).unwrap();
        assert_eq!(depth(), 2);
        assert_eq!(
            raw::push_call_site_unless_nested(&B, 2, 0, 0x1000, nested(&B), false, true).err(),
            Some(NotPushed::Skipped)
        );
        // A call whose entry is not below it (a sibling call from the same frame, at 0x2000) is
        // not inside that frame: the stale mark is replaced.
        let mark =
            raw::push_call_site_unless_nested(&B, 3, 0, 0x2000, nested(&B), false, true).unwrap();
        assert_eq!(depth(), 2);
        mark.pop();
        assert_eq!(depth(), 1);
    })
    .join()
    .unwrap();
}

/// Makes the calling thread's slot look like a push of it was left halfway by a jump: `seq` odd,
/// the push's stack address `sp`. Returns the slot's index.
fn leave_a_push_halfway(sp: u64) -> usize {
    use core::sync::atomic::Ordering::Relaxed;
    crate::thread_state::with(|state| {
        let slot = state.slot.get();
        assert!(!slot.is_null(), "mark once first");
        state.push_sp.set(sp);
        // SAFETY: this thread's slot in the live region.
        let slot = unsafe { &*slot };
        assert_eq!(slot.seq.load(Relaxed) % 2, 0);
        slot.seq.fetch_add(1, Relaxed);
        (slot as *const abi::Slot as usize - region_address().unwrap() - abi::HEADER_SIZE)
            / abi::SLOT_SIZE
    })
    .unwrap()
}

fn slot_state(index: usize) -> abi::SlotState {
    abi::parse_slot_state(&region_bytes()[abi::HEADER_SIZE + index * abi::SLOT_SIZE..]).unwrap()
}

fn push_at(sp: u64) -> crate::stack::Pushed {
    crate::stack::push(
        &A as *const Feature as u64,
        0,
        (KIND_ANTIMARK as u64) << 32,
        0,
        sp,
        None,
    )
}

/// Held by the tests that leave a push halfway: one of them checks that a slot released so is
/// clean, and another's thread, given the same slot meanwhile, would have left it odd again.
static HALFWAY: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_push_left_halfway_is_closed_by_a_jump_past_it_or_a_later_push_above_it() {
    let _halfway = HALFWAY.lock().unwrap_or_else(|e| e.into_inner());
    std::thread::spawn(|| {
        let _first = A.mark(); // claims the slot
        let base = depth();
        let left = 0x7000_0000_0000;
        let index = leave_a_push_halfway(left);
        // A push below the unfinished one: a signal handler that interrupted it. Skipped.
        assert_eq!(push_at(left - 4096).index, u32::MAX);
        assert_eq!(slot_state(index).seq % 2, 1);
        // A jump that stays below it (a handler jumping within itself) leaves it alone.
        crate::raw::jumping_to(left - 8);
        assert_eq!(slot_state(index).seq % 2, 1);
        // A jump past it closes it; the thread marks again.
        crate::raw::jumping_to(left);
        assert_eq!(slot_state(index).seq % 2, 0);
        let pushed = push_at(left - 4096);
        assert_eq!((pushed.index, depth()), (base, base + 1));
        crate::stack::pop(pushed);
        // Without a jump it heard of: the next push at or above the unfinished one closes it.
        leave_a_push_halfway(left);
        let pushed = push_at(left);
        assert_eq!((pushed.index, depth()), (base, base + 1));
        assert_eq!(slot_state(index).seq % 2, 0);
        crate::stack::pop(pushed);
    })
    .join()
    .unwrap();
}

#[test]
fn a_slot_released_mid_push_is_clean_for_its_next_owner() {
    let _halfway = HALFWAY.lock().unwrap_or_else(|e| e.into_inner());
    let index = std::thread::spawn(|| {
        let _first = A.mark();
        leave_a_push_halfway(0x7000_0000_0000)
    })
    .join()
    .unwrap();
    // (Another test's thread may own the slot by now: its `seq` is even all the same, as no
    // other test leaves a push halfway meanwhile.)
    assert_eq!(slot_state(index).seq % 2, 0);
}

/// The index of the calling thread's slot.
fn my_slot() -> usize {
    let bytes = region_bytes();
    let header = abi::parse_header(bytes).unwrap();
    let tid = unsafe { gettid() } as u32;
    (0..header.slots_used as usize)
        .find(|index| {
            let slot = &bytes[abi::HEADER_SIZE + index * abi::SLOT_SIZE..][..abi::SLOT_SIZE];
            abi::parse_slot_state(slot).unwrap().tid == tid
        })
        .expect("this thread has a slot")
}

#[test]
fn later_branches_are_remembered_and_read_back_in_order_and_overwritten_ones_counted() {
    let _m = A.mark(); // a slot first
    let slot = my_slot();
    let region = region_bytes().as_ptr();
    let mut out = Vec::new();
    // SAFETY: this process's region, mapped for its life; slot < SLOT_COUNT.
    let (start, _) = unsafe { abi::copy_history(region, slot, 0, &mut out) };
    // Branch 0 is a first try: not remembered. Later branches are, with their place.
    for offset in 0..3u64 {
        drop(A.mark_alternative("item", 0, offset));
        drop(A.mark_alternative("item", 1 + offset as u32, offset));
    }
    drop(B.mark_with("other"));
    out.clear();
    // SAFETY: as above.
    let (written, lost) = unsafe { abi::copy_history(region, slot, start, &mut out) };
    assert_eq!((written, lost), (start + 3, 0));
    let places: Vec<_> = out
        .iter()
        .map(|r| (r.kind, r.position, r.extra[0]))
        .collect();
    assert_eq!(places, [(5, 0, 1), (5, 1, 2), (5, 2, 3)]);
    assert!(out
        .iter()
        .all(|r| r.feature == &A as *const Feature as u64 && r.payload_len == 4));
    // More than the history holds between two reads: the oldest are lost, and counted.
    let extra = abi::HISTORY_CAPACITY as u64 + 10;
    for offset in 0..extra {
        drop(A.mark_alternative("item", 1, 100 + offset));
    }
    out.clear();
    // SAFETY: as above.
    let (next, lost) = unsafe { abi::copy_history(region, slot, written, &mut out) };
    assert_eq!((next, lost), (written + extra, 11));
    assert_eq!(out.len(), abi::HISTORY_CAPACITY - 1);
    assert_eq!(out.last().map(|r| r.position), Some(100 + extra - 1));
    // The same through the bytes a remote reader copies.
    let bytes = &region_bytes()[abi::HEADER_SIZE + slot * abi::SLOT_SIZE + abi::HISTORY_OFFSET..]
        [..abi::HISTORY_SIZE];
    let mut parsed = Vec::new();
    assert_eq!(
        abi::parse_history(bytes, next, written, &mut parsed),
        Some((next, 11))
    );
    assert_eq!(parsed, out);
}

#[test]
fn a_history_counter_from_a_stray_write_keeps_at_most_what_the_history_holds() {
    let cap = abi::HISTORY_CAPACITY as u64;
    // Written far ahead of what was read: only the entries the history still holds.
    let (keep, lost) = abi::history_range(1 << 40, 1 << 40, 0);
    assert!(keep.end - keep.start <= cap, "{keep:?}");
    assert_eq!(keep.end, 1 << 40);
    assert_eq!(lost, (1 << 40) - (keep.end - keep.start));
    // Gone backwards, before the copy or during it: nothing kept, nothing lost.
    assert_eq!(abi::history_range(5, 5, 100), (5..5, 0));
    assert_eq!(abi::history_range(100, 50, 90), (100..100, 0));
    // The usual case is unchanged: everything since the last read, none lost.
    assert_eq!(abi::history_range(10, 10, 4), (4..10, 0));
}
