//! IOVA allocator: ranges with holes, the MSI window, alignment, exhaustion, fragmentation,
//! free and reuse, next fit and its wrap-round, and a randomized alloc/free sequence.

use dma::{DmaError, IovaAllocator, IovaRange, X86_MSI_WINDOW};
use proptest::prelude::*;

const PAGE: u64 = 0x1000;

#[test]
fn allocates_only_inside_the_ranges_and_never_at_zero() {
    // Two ranges with a hole between them; the first starts at IOVA 0.
    let mut a = IovaAllocator::new(&[
        IovaRange::new(0x10_0000, 0x10_ffff),
        IovaRange::new(0x0, 0xffff),
    ]);
    // The zero page is excluded, so the first range has 15 pages from 0x1000.
    assert_eq!(a.stats().total_free, 15 * PAGE + 16 * PAGE);
    assert_eq!(a.stats().holes, 2);
    assert_eq!(
        a.alloc(1, 1).unwrap(),
        0x1000,
        "IOVA 0 must never be handed out"
    );
    // 15 pages do not fit the rest of the first range (14 pages + 0xfff bytes): second range.
    assert_eq!(a.alloc(15 * PAGE, PAGE).unwrap(), 0x10_0000);
    // Nothing lands in the hole [0x10000, 0xfffff].
    let x = a.alloc(14 * PAGE, PAGE).unwrap();
    assert_eq!(x, 0x2000);
    let y = a.alloc(PAGE, PAGE).unwrap();
    assert_eq!(y, 0x10_f000);
    assert!(matches!(
        a.alloc(PAGE, PAGE),
        Err(DmaError::IovaExhausted { .. })
    ));
}

#[test]
fn a_range_holding_only_the_zero_page_is_empty() {
    let mut a = IovaAllocator::new(&[IovaRange::new(0, 0xfff)]);
    assert_eq!(a.stats().total_free, 0);
    assert!(matches!(
        a.alloc(1, 1),
        Err(DmaError::IovaExhausted {
            total_free: 0,
            holes: 0,
            ..
        })
    ));
}

#[test]
fn skips_the_msi_window() {
    // 0xfed00000 .. 0xff0fffff: 1 MiB below the window, the window itself, 2 MiB above it.
    let mut a = IovaAllocator::new(&[IovaRange::new(0xfed0_0000, 0xff0f_ffff)]);
    assert_eq!(a.stats().total_free, 3 << 20);
    assert_eq!(a.stats().holes, 2);
    let mib = 1 << 20;
    assert_eq!(a.alloc(mib, mib).unwrap(), 0xfed0_0000);
    // The next 1 MiB-aligned MiB would be 0xfee00000, the MSI window.
    assert_eq!(a.alloc(mib, mib).unwrap(), 0xfef0_0000);
    assert_eq!(a.alloc(mib, mib).unwrap(), 0xff00_0000);
    assert!(a.alloc(1, 1).is_err());
}

#[test]
fn full_64_bit_space_excludes_zero_page_and_msi_window() {
    let a = IovaAllocator::new(&[IovaRange::new(0, u64::MAX)]);
    let s = a.stats();
    // 2^64 - 4 KiB zero page - 1 MiB MSI window, written out.
    assert_eq!(s.total_free, 0xffff_ffff_ffef_f000);
    assert_eq!(s.holes, 2);
    assert_eq!(s.largest_free, u64::MAX - 0xfeef_ffff);
}

#[test]
fn top_of_the_64_bit_space_allocates_and_coalesces() {
    let mut a = IovaAllocator::new(&[IovaRange::new(u64::MAX - 0xffff, u64::MAX)]);
    let pages: Vec<u64> = (0..16).map(|_| a.alloc(PAGE, PAGE).unwrap()).collect();
    assert_eq!(*pages.last().unwrap(), u64::MAX - 0xfff);
    assert!(a.alloc(1, 1).is_err());
    for p in pages.into_iter().rev() {
        a.free(p, PAGE).unwrap();
    }
    assert_eq!(a.stats().holes, 1);
    assert_eq!(a.stats().largest_free, 0x10000);
}

#[test]
fn honours_power_of_two_alignment_and_rejects_others() {
    let mut a = IovaAllocator::new(&[IovaRange::new(0, 0xfff_ffff)]);
    assert_eq!(a.alloc(PAGE, PAGE).unwrap(), 0x1000);
    let x = a.alloc(100, 1 << 20).unwrap();
    assert_eq!(x, 1 << 20);
    let y = a.alloc(1, 64).unwrap();
    assert_eq!(y, 0x2000, "first fit: the first 64-aligned free address");
    let z = a.alloc(3, 2).unwrap();
    assert_eq!(z, 0x2002);
    assert!(matches!(a.alloc(1, 3), Err(DmaError::Invalid(_))));
    assert!(matches!(a.alloc(1, 0), Err(DmaError::Invalid(_))));
    assert!(matches!(a.alloc(0, 1), Err(DmaError::Invalid(_))));
}

#[test]
fn exhaustion_reports_sizes_without_claiming_fragmentation() {
    let mut a = IovaAllocator::new(&[IovaRange::new(0, 0x4fff)]); // 4 pages after the zero page
    for _ in 0..4 {
        a.alloc(PAGE, PAGE).unwrap();
    }
    let err = a.alloc(PAGE, PAGE).unwrap_err();
    assert!(
        matches!(
            err,
            DmaError::IovaExhausted {
                requested: 0x1000,
                align: 0x1000,
                largest_free: 0,
                total_free: 0,
                holes: 0
            }
        ),
        "{err:?}"
    );
    assert!(!err.to_string().contains("fragmented"), "{err}");
}

#[test]
fn fragmentation_is_reported_as_such() {
    let mut a = IovaAllocator::new(&[IovaRange::new(0x1000, 0x8fff)]); // 8 pages
    let pages: Vec<u64> = (0..8).map(|_| a.alloc(PAGE, PAGE).unwrap()).collect();
    for p in pages.iter().step_by(2) {
        a.free(*p, PAGE).unwrap();
    }
    let s = a.stats();
    assert_eq!((s.total_free, s.largest_free, s.holes), (4 * PAGE, PAGE, 4));
    let err = a.alloc(2 * PAGE, PAGE).unwrap_err();
    assert!(
        matches!(
            err,
            DmaError::IovaExhausted {
                requested: 0x2000,
                largest_free: 0x1000,
                total_free: 0x4000,
                holes: 4,
                ..
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("fragmented"), "{msg}");
    assert!(msg.contains("largest free hole is 4096 bytes"), "{msg}");
}

/// A request that fails only on its alignment (the largest hole is far larger) is not
/// called fragmentation: the message names the alignment as the cause.
#[test]
fn exhaustion_by_alignment_alone_names_the_alignment_not_fragmentation() {
    let mut a = IovaAllocator::new(&dma::VTD_39BIT_RANGES);
    let err = a.alloc(2 * PAGE, 1 << 63).unwrap_err();
    let DmaError::IovaExhausted {
        requested,
        largest_free,
        holes,
        ..
    } = err
    else {
        panic!("{err:?}");
    };
    assert!(largest_free >= requested && holes > 1, "{err:?}");
    let msg = err.to_string();
    assert!(!msg.contains("fragmented"), "{msg}");
    assert!(
        msg.contains("at a multiple of 0x8000000000000000")
            && msg.contains("ask for a smaller one"),
        "{msg}"
    );
    // With the same holes, an alignment they can meet succeeds.
    assert!(a.alloc(2 * PAGE, 1 << 30).is_ok());
}

#[test]
fn free_coalesces_and_space_is_reused() {
    let mut a = IovaAllocator::new(&[IovaRange::new(0x1000, 0x10_0fff)]);
    let initial = a.stats();
    let x = a.alloc(PAGE, PAGE).unwrap();
    let y = a.alloc(2 * PAGE, PAGE).unwrap();
    let z = a.alloc(PAGE, PAGE).unwrap();
    assert_eq!((x, y, z), (0x1000, 0x2000, 0x4000));
    a.free(y, 2 * PAGE).unwrap();
    assert_eq!(a.stats().holes, 2);
    // The hole y left is the first fit again.
    assert_eq!(a.alloc(2 * PAGE, PAGE).unwrap(), y);
    a.free(y, 2 * PAGE).unwrap();
    a.free(x, PAGE).unwrap();
    a.free(z, PAGE).unwrap();
    let st = a.stats();
    assert_eq!(st, initial, "all free again: one hole, nothing allocated");
    assert_eq!((st.holes, st.allocations, st.allocated_bytes), (1, 0, 0));
}

#[test]
fn next_fit_moves_on_past_freed_ranges_and_wraps_round_only_when_the_top_is_used_up() {
    let mut a = IovaAllocator::new(&[IovaRange::new(0x1000, 0x8fff)]); // 8 pages
    let x = a.alloc_next_fit(PAGE, PAGE).unwrap();
    let y = a.alloc_next_fit(2 * PAGE, PAGE).unwrap();
    assert_eq!((x, y), (0x1000, 0x2000));
    a.free(x, PAGE).unwrap();
    a.free(y, 2 * PAGE).unwrap();
    // Everything is free and coalesced, yet the next ones go on above what was handed out.
    assert_eq!(a.stats().holes, 1);
    assert_eq!(a.alloc_next_fit(PAGE, PAGE).unwrap(), 0x4000);
    // Alignment is honoured from the cursor on: 0x5000 is skipped for 0x6000.
    assert_eq!(a.alloc_next_fit(PAGE, 2 * PAGE).unwrap(), 0x6000);
    assert_eq!(a.alloc_next_fit(2 * PAGE, PAGE).unwrap(), 0x7000);
    // Nothing fits above 0x8fff: wrap round to the lowest free place, the oldest released.
    assert_eq!(a.alloc_next_fit(2 * PAGE, PAGE).unwrap(), 0x1000);
    assert_eq!(a.alloc_next_fit(PAGE, PAGE).unwrap(), 0x3000);
    // Then on upward from there: 0x5000 is the only page left.
    assert_eq!(a.alloc_next_fit(PAGE, PAGE).unwrap(), 0x5000);
    let err = a.alloc_next_fit(PAGE, PAGE).unwrap_err();
    assert!(
        matches!(err, DmaError::IovaExhausted { total_free: 0, .. }),
        "{err:?}"
    );
    // First fit is unaffected by the cursor: it takes the lowest hole.
    a.free(0x3000, PAGE).unwrap();
    a.free(0x7000, 2 * PAGE).unwrap();
    assert_eq!(a.alloc(PAGE, PAGE).unwrap(), 0x3000);
}

#[test]
fn next_fit_at_the_top_of_the_64_bit_space_wraps_to_the_bottom() {
    let mut a = IovaAllocator::new(&[
        IovaRange::new(0x1000, 0x1fff),
        IovaRange::new(u64::MAX - 0xfff, u64::MAX),
    ]);
    assert_eq!(a.alloc_next_fit(PAGE, PAGE).unwrap(), 0x1000);
    assert_eq!(a.alloc_next_fit(PAGE, PAGE).unwrap(), u64::MAX - 0xfff);
    a.free(0x1000, PAGE).unwrap();
    assert_eq!(a.alloc_next_fit(PAGE, PAGE).unwrap(), 0x1000);
}

#[test]
fn freeing_what_was_not_allocated_is_an_error_and_changes_nothing() {
    let mut a = IovaAllocator::new(&[IovaRange::new(0x1000, 0xf_ffff)]);
    let x = a.alloc(2 * PAGE, PAGE).unwrap();
    let before = a.stats();
    assert!(matches!(
        a.free(x, PAGE),
        Err(DmaError::IovaNotAllocated { iova, len: 0x1000 }) if iova == x
    ));
    assert!(matches!(
        a.free(x + PAGE, PAGE),
        Err(DmaError::IovaNotAllocated { .. })
    ));
    assert!(matches!(
        a.free(0x8_0000, PAGE),
        Err(DmaError::IovaNotAllocated { .. })
    ));
    assert_eq!(a.stats(), before);
    a.free(x, 2 * PAGE).unwrap();
    let err = a.free(x, 2 * PAGE).unwrap_err();
    assert!(err.to_string().contains("double free"), "{err}");
}

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        len: u64,
        align_log2: u32,
        next_fit: bool,
    },
    Free {
        pick: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u64..=0x30_0000, 0u32..=22, any::<bool>())
            .prop_map(|(len, align_log2, next_fit)| Op::Alloc { len, align_log2, next_fit }),
        2 => any::<usize>().prop_map(|pick| Op::Free { pick }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random alloc/free sequences (first and next fit mixed) never overlap, stay inside the
    /// ranges, avoid the MSI window and the zero page, honour alignment, and coalesce back to the
    /// initial state.
    #[test]
    fn random_alloc_free_sequences_are_sound(ops in prop::collection::vec(op(), 1..200)) {
        // Small ranges around the MSI window and at 0, so exhaustion and the holes get hit.
        let ranges = [
            IovaRange::new(0x0, 0x7f_ffff),
            IovaRange::new(0xfe00_0000, 0xff7f_ffff),
            IovaRange::new(0x1_0000_0000, 0x1_003f_ffff),
        ];
        let mut a = IovaAllocator::new(&ranges);
        let initial = a.stats();
        let mut live: Vec<(u64, u64)> = Vec::new();
        for op in ops {
            match op {
                Op::Alloc { len, align_log2, next_fit } => {
                    let align = 1u64 << align_log2;
                    let got = if next_fit {
                        a.alloc_next_fit(len, align)
                    } else {
                        a.alloc(len, align)
                    };
                    match got {
                        Ok(iova) => {
                            let last = iova + (len - 1);
                            prop_assert_eq!(iova % align, 0);
                            prop_assert!(iova >= 0x1000, "zero page handed out: {:#x}", iova);
                            prop_assert!(
                                ranges.iter().any(|r| r.contains(iova, len)),
                                "[{:#x}, {:#x}] outside the ranges", iova, last
                            );
                            prop_assert!(
                                last < X86_MSI_WINDOW.start || iova > X86_MSI_WINDOW.end,
                                "[{:#x}, {:#x}] touches the MSI window", iova, last
                            );
                            for &(s, l) in &live {
                                prop_assert!(
                                    last < s || iova > s + (l - 1),
                                    "[{:#x}+{:#x}] overlaps [{:#x}+{:#x}]", iova, len, s, l
                                );
                            }
                            live.push((iova, len));
                        }
                        Err(DmaError::IovaExhausted { largest_free, .. }) => {
                            // A hole of len + align - 1 bytes always holds an aligned
                            // block, so exhaustion must mean no hole is that large.
                            prop_assert!(
                                largest_free < len + (align - 1),
                                "refused {:#x} aligned {:#x} with a {:#x}-byte hole",
                                len, align, largest_free
                            );
                        }
                        Err(e) => prop_assert!(false, "unexpected error {e}"),
                    }
                }
                Op::Free { pick } => {
                    if !live.is_empty() {
                        let (iova, len) = live.swap_remove(pick % live.len());
                        prop_assert!(a.free(iova, len).is_ok());
                    }
                }
            }
            let s = a.stats();
            prop_assert_eq!(s.allocations, live.len());
            prop_assert_eq!(s.allocated_bytes, live.iter().map(|l| l.1).sum::<u64>());
            prop_assert_eq!(s.total_free + s.allocated_bytes, initial.total_free);
        }
        for (iova, len) in live {
            prop_assert!(a.free(iova, len).is_ok());
        }
        prop_assert_eq!(a.stats(), initial);
    }
}
