//! The placing of marks on a captured stack (`place`).

use super::*;
use crate::native::unwind::UnwoundFrame;

fn mark(sp: u64) -> RecordView {
    RecordView {
        feature: 1,
        kind: 2,
        payload: 0,
        payload_len: 0,
        line: 0,
        column: 0,
        sp,
        position: 0,
        extra: [0, 0],
    }
}

#[test]
fn marks_go_after_the_frame_that_pushed_them() {
    // main (CFA ∞) > outer (CFA 1000) > inner (CFA 900) > leaf (CFA 800); sp decreases inward.
    let captured = Captured {
        frames: vec![
            UnwoundFrame {
                address: 4,
                cfa: 800,
            },
            UnwoundFrame {
                address: 3,
                cfa: 900,
            },
            UnwoundFrame {
                address: 2,
                cfa: 1000,
            },
            UnwoundFrame {
                address: 1,
                cfa: u64::MAX,
            },
        ],
        complete: true,
    };
    // Pushed by main (sp 1000..), by inner (sp 850), by leaf (sp 790).
    let stack = place(&captured, &[mark(1200), mark(850), mark(790)]).unwrap();
    assert_eq!(stack.addresses, vec![1, 2, 3, 4]);
    assert_eq!(stack.marks_at, vec![1, 3, 4]);
    assert!(!stack.truncated);
}

#[test]
fn marks_outside_a_cut_stack_go_first_and_order_is_kept() {
    let captured = Captured {
        frames: vec![
            UnwoundFrame {
                address: 2,
                cfa: 500,
            },
            UnwoundFrame {
                address: 1,
                cfa: 600,
            },
        ],
        complete: false,
    };
    // The first mark was pushed above the unwound part; the second claims an outer place
    // than the first (a corrupt sp): it keeps its order.
    let stack = place(&captured, &[mark(700), mark(450), mark(900)]).unwrap();
    assert_eq!(stack.marks_at, vec![0, 2, 2]);
    assert!(stack.truncated);
}

/// A stack not taken (no frames: a perf sample the kernel copied none of) places nothing, so
/// that its sample goes without a native stack rather than with an empty one.
#[test]
fn a_stack_not_taken_places_nothing() {
    let captured = Captured::default();
    assert!(place(&captured, &[mark(100)]).is_none());
}
