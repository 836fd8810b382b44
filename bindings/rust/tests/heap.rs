//! First-class heaps: blocks from a heap, destroyed at once or kept when the
//! heap is dropped (deleted), judged by hakmem's in_use figure.

use core::alloc::{GlobalAlloc, Layout};
use hakmem::{HakMem, Heap};

#[global_allocator]
static GLOBAL: HakMem = HakMem;

#[test]
fn destroy_and_delete() {
    // (one test: in_use is the whole process's)
    let before = hakmem::stats().in_use;
    let heap = Heap::new().expect("a heap");
    for i in 0..100_000usize {
        let layout = Layout::from_size_align(16 + i % 200, if i % 10 == 0 { 64 } else { 8 }).unwrap();
        let p = heap.alloc(layout);
        assert!(!p.is_null() && p as usize % layout.align() == 0);
        unsafe { p.write(i as u8) };
    }
    let z = heap.alloc_zeroed(Layout::from_size_align(4096, 16).unwrap());
    assert!(unsafe { core::slice::from_raw_parts(z, 4096) }
        .iter()
        .all(|&b| b == 0));
    assert!(hakmem::stats().in_use > before + 10_000_000);
    unsafe { heap.destroy() };
    // (other threads of the test harness allocate meanwhile)
    assert!(hakmem::stats().in_use < before + 1_000_000);

    let heap = Heap::new().expect("a heap");
    let layout = Layout::from_size_align(1000, 8).unwrap();
    let kept = heap.alloc(layout);
    unsafe { kept.write_bytes(7, 1000) };
    drop(heap);
    assert!(unsafe { core::slice::from_raw_parts(kept, 1000) }
        .iter()
        .all(|&b| b == 7));
    unsafe { GLOBAL.dealloc(kept, layout) };
}
