//! Marks made from signal handlers that interrupt a thread in the middle of its own marking must
//! never corrupt its stack or move the slot's sequence counter backwards (which would let a reader
//! accept a torn copy).

use fsprof_shim::{abi, region_address, Feature};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

static MAIN: Feature = Feature::new("main");
static HANDLER: Feature = Feature::new("handler");

extern "C" fn on_signal(_: libc::c_int) {
    let _m = HANDLER.mark_with("in-handler");
    std::hint::black_box(&_m);
}

#[test]
fn marks_from_signal_handlers_never_corrupt_the_stack() {
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        action.sa_flags = libc::SA_RESTART;
        assert_eq!(
            libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()),
            0
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    let tid = Arc::new(AtomicU32::new(0));
    let marker = {
        let (stop, tid) = (Arc::clone(&stop), Arc::clone(&tid));
        std::thread::spawn(move || {
            let _outer = MAIN.mark_with("outer");
            tid.store(unsafe { libc::gettid() } as u32, Ordering::SeqCst);
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..1000 {
                    let _m = MAIN.mark_with("inner");
                    std::hint::black_box(&_m);
                }
            }
            fsprof_shim::depth()
        })
    };
    while tid.load(Ordering::SeqCst) == 0 {
        std::thread::yield_now();
    }
    let target_tid = tid.load(Ordering::SeqCst) as i32;
    let region = region_address().unwrap() as *const u8;
    let header = unsafe { abi::header_at(region) };
    let slot = (0..header.slots_used as usize)
        .find(|i| unsafe { abi::slot_owner(region, *i) } == target_tid as u32)
        .expect("the marking thread has a slot");

    let (mut signals, mut copies, mut last_seq) = (0u64, 0u64, 0u32);
    let mut records = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), target_tid, libc::SIGUSR1) };
        signals += 1;
        for _ in 0..50 {
            if let Ok(state) = unsafe { abi::copy_slot(region, slot, &mut records) } {
                copies += 1;
                assert!(
                    state.seq >= last_seq,
                    "seq went back from {last_seq} to {}",
                    state.seq
                );
                last_seq = state.seq;
                // Possible stacks: [outer], [outer, inner], [outer, handler], [outer, inner, handler].
                let names: Vec<u32> = records.iter().map(|r| r.payload_len).collect();
                assert!(
                    matches!(names.as_slice(), [5] | [5, 5] | [5, 10] | [5, 5, 10]),
                    "impossible stack (payload lengths) {names:?}"
                );
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    assert_eq!(marker.join().unwrap(), 1, "only the outer mark is left");
    assert!(
        signals > 1000 && copies > 1000,
        "{signals} signals, {copies} copies"
    );
}

extern "C" fn mark_in_handler(_: libc::c_int) {
    let _m = HANDLER.mark_with("in-handler");
}

#[test]
fn a_handler_marking_during_a_threads_first_mark_does_not_leak_a_slot() {
    use std::sync::atomic::AtomicI32;
    static CURRENT: AtomicI32 = AtomicI32::new(0);
    static DONE: AtomicBool = AtomicBool::new(false);
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = mark_in_handler as extern "C" fn(libc::c_int) as usize;
        action.sa_flags = libc::SA_RESTART;
        assert_eq!(
            libc::sigaction(libc::SIGUSR2, &action, std::ptr::null_mut()),
            0
        );
    }
    {
        let _m = MAIN.mark_with("outer"); // the region exists; this thread has its slot
    }
    let pid = unsafe { libc::getpid() };
    let sender = std::thread::spawn(move || {
        while !DONE.load(Ordering::Relaxed) {
            let tid = CURRENT.load(Ordering::Relaxed);
            if tid != 0 {
                unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, libc::SIGUSR2) };
            }
        }
    });
    // Each thread's first mark (which claims its slot) races with the handler's marks.
    for _ in 0..2000 {
        std::thread::spawn(|| {
            CURRENT.store(unsafe { libc::gettid() }, Ordering::Relaxed);
            for _ in 0..100 {
                std::hint::spin_loop();
            }
            let _m = MAIN.mark_with("first");
            CURRENT.store(0, Ordering::Relaxed);
        })
        .join()
        .unwrap();
    }
    DONE.store(true, Ordering::Relaxed);
    sender.join().unwrap();
    // Every slot still owned must belong to a live thread of this process.
    let region = region_address().unwrap() as *const u8;
    let leaked: Vec<u32> = (0..abi::SLOT_COUNT)
        .map(|i| unsafe { abi::slot_owner(region, i) })
        .filter(|tid| {
            *tid != 0 && !std::path::Path::new(&format!("/proc/self/task/{tid}")).exists()
        })
        .collect();
    assert!(
        leaked.is_empty(),
        "{} slots owned by exited threads, e.g. {:?}",
        leaked.len(),
        &leaked[..leaked.len().min(8)]
    );
}
