//! hakmem as the global allocator of this test program: what Rust allocates
//! (the tests and the test harness) goes through HakMem.

use hakmem::HakMem;
use std::alloc::{alloc, alloc_zeroed, dealloc, realloc, GlobalAlloc, Layout};

#[global_allocator]
static GLOBAL: HakMem = HakMem;

const MIB: usize = 1 << 20;

#[test]
fn vec_and_string_growth_by_realloc() {
    let mut v: Vec<u64> = Vec::new();
    for i in 0..1_000_000u64 {
        v.push(i * 3);
    }
    assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64 * 3));
    v.truncate(10);
    v.shrink_to_fit();
    assert_eq!(v, (0..10).map(|i| i * 3).collect::<Vec<u64>>());
    let mut s = String::new();
    for i in 0..100_000 {
        s.push_str(&i.to_string());
    }
    assert_eq!(s.len(), 488_890);
}

#[test]
fn alignment_up_to_4k_and_beyond() {
    let mut a = 1;
    while a <= 64 * 1024 {
        for size in [1, 8, a / 2 + 1, a, 3 * a + 5, 100_000, 3 * MIB] {
            let layout = Layout::from_size_align(size.max(1), a).unwrap();
            let p = unsafe { alloc(layout) };
            assert!(!p.is_null(), "alloc({size}, align {a}) failed");
            assert_eq!(p as usize % a, 0, "alloc({size}, align {a}) = {p:p}");
            unsafe {
                p.write_bytes(0x5a, layout.size());
                dealloc(p, layout);
            }
        }
        a *= 2;
    }
}

#[test]
fn over_aligned_types() {
    #[repr(align(4096))]
    struct Page([u8; 4096]);
    #[repr(align(64))]
    struct Line(#[allow(dead_code)] [u8; 64]);
    let pages: Vec<Box<Page>> = (0..100).map(|i| Box::new(Page([i as u8; 4096]))).collect();
    for (i, p) in pages.iter().enumerate() {
        assert_eq!(&**p as *const Page as usize % 4096, 0);
        assert!(p.0.iter().all(|&b| b == i as u8));
    }
    let lines: Vec<Line> = (0..10_000).map(|_| Line([0; 64])).collect();
    assert_eq!(lines.as_ptr() as usize % 64, 0);
}

#[test]
fn realloc_keeps_alignment_and_contents() {
    for align in [32, 64, 256, 4096] {
        let mut layout = Layout::from_size_align(24, align).unwrap();
        let mut p = unsafe { alloc(layout) };
        unsafe { p.write_bytes(0xa7, layout.size()) };
        // grow past small, medium and large classes, then shrink again
        for size in [100, 5000, 70_000, 400_000, 3 * MIB, 50_000, 40] {
            let q = unsafe { realloc(p, layout, size) };
            assert!(!q.is_null());
            assert_eq!(q as usize % align, 0, "realloc to {size} lost alignment {align}");
            let kept = layout.size().min(size);
            assert!(unsafe { std::slice::from_raw_parts(q, kept) }
                .iter()
                .all(|&b| b == 0xa7));
            layout = Layout::from_size_align(size, align).unwrap();
            unsafe { q.write_bytes(0xa7, size) };
            p = q;
        }
        unsafe { dealloc(p, layout) };
    }
}

#[test]
fn zeroed_even_when_memory_is_reused() {
    for align in [8, 16, 64, 4096] {
        for size in [16, 1000, 64 * 1024, 1 << 21, 5 * MIB] {
            let layout = Layout::from_size_align(size, align).unwrap();
            // dirty blocks of this size, free them, then ask for zeroed ones
            let dirty: Vec<*mut u8> = (0..4).map(|_| unsafe { alloc(layout) }).collect();
            for &p in &dirty {
                unsafe {
                    p.write_bytes(0xff, size);
                    dealloc(p, layout);
                }
            }
            for _ in 0..4 {
                let p = unsafe { alloc_zeroed(layout) };
                assert_eq!(p as usize % align, 0);
                let block = unsafe { std::slice::from_raw_parts(p, size) };
                assert!(
                    block.iter().all(|&b| b == 0),
                    "alloc_zeroed({size}, {align}) not zero"
                );
                unsafe { dealloc(p, layout) };
            }
        }
    }
}

#[test]
fn direct_calls_and_failure() {
    let too_big = Layout::from_size_align(isize::MAX as usize - 4096, 16).unwrap();
    assert!(unsafe { HakMem.alloc(too_big) }.is_null());
    assert!(unsafe { HakMem.alloc_zeroed(too_big) }.is_null());
    let layout = Layout::from_size_align(100, 64).unwrap();
    let p = unsafe { HakMem.alloc(layout) };
    assert!(unsafe { HakMem.realloc(p, layout, too_big.size()) }.is_null());
    unsafe { HakMem.dealloc(p, layout) }; // a failed realloc leaves the block intact
}

#[test]
fn threads_free_each_others_blocks() {
    use std::sync::mpsc;
    let (tx, rx) = mpsc::channel::<Vec<Box<[u8]>>>();
    let producers: Vec<_> = (0..4)
        .map(|t| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for round in 0..50 {
                    let batch = (0..200)
                        .map(|i| vec![t as u8; 16 + (i * 37 + round) % 3000].into_boxed_slice())
                        .collect();
                    tx.send(batch).unwrap();
                }
            })
        })
        .collect();
    drop(tx);
    let mut blocks = 0;
    for batch in rx {
        blocks += batch.len(); // freed here, on another thread than their own
    }
    producers.into_iter().for_each(|p| p.join().unwrap());
    assert_eq!(blocks, 4 * 50 * 200);
    assert!(hakmem::stats().threads >= 1);
}

#[test]
fn stats_struct_matches_c() {
    // hakmem_stats_get writes exactly size_of::<Stats>() bytes, no more.
    let words = std::mem::size_of::<hakmem::ffi::Stats>() / 8;
    let mut buf = [usize::MAX; 64];
    unsafe { hakmem::ffi::hakmem_stats_get(buf.as_mut_ptr().cast()) };
    let written = buf.iter().rposition(|&w| w != usize::MAX).map_or(0, |i| i + 1);
    assert_eq!(
        written, words,
        "hakmem_stats_t has {written} words, ffi::Stats {words}"
    );
}
