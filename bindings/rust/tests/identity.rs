//! Whose blocks are these?  Rust's allocations are hakmem's; C's malloc is
//! hakmem's only with the `override` feature.  One test in its own program:
//! the proof is hakmem's in_use figure, which concurrent tests would disturb.

use hakmem::HakMem;

#[global_allocator]
static GLOBAL: HakMem = HakMem;

const MIB: usize = 1 << 20;

extern "C" {
    fn malloc(n: usize) -> *mut u8;
    fn free(p: *mut u8);
    #[cfg(feature = "override")]
    fn strdup(s: *const u8) -> *mut u8;
}

/// Does allocating `n` bytes with `f` raise hakmem's in_use by `n`?
fn counted_by_hakmem(n: usize, f: impl FnOnce(usize) -> Box<dyn FnOnce()>) -> bool {
    let before = hakmem::stats().in_use;
    let release = f(n);
    let counted = hakmem::stats().in_use >= before + n;
    release();
    counted
}

#[test]
fn whose_blocks() {
    let rust = counted_by_hakmem(16 * MIB, |n| {
        let v = vec![1u8; n];
        assert!(unsafe { HakMem::usable_size(v.as_ptr()) } >= n);
        Box::new(move || drop(v))
    });
    assert!(rust, "a Vec's memory is not in hakmem's in_use");

    let c = counted_by_hakmem(16 * MIB, |n| {
        let p = unsafe { malloc(n) };
        assert!(!p.is_null());
        unsafe { p.write_bytes(1, n) };
        Box::new(move || unsafe { free(p) })
    });
    assert_eq!(
        c,
        cfg!(feature = "override"),
        "C malloc on hakmem: {c}, override feature: {}",
        cfg!(feature = "override")
    );

    // With the feature, the C library's own allocations are hakmem blocks too.
    #[cfg(feature = "override")]
    unsafe {
        let s = strdup(c"hakmem".as_ptr().cast());
        assert!(HakMem::usable_size(s) >= 7);
        free(s);
    }
}
