//! The hakmem memory allocator as Rust's global allocator.
//!
//! ```
//! #[global_allocator]
//! static GLOBAL: hakmem::HakMem = hakmem::HakMem;
//!
//! fn main() {
//!     let v = vec![7u8; 1 << 20];
//!     assert!(hakmem::stats().in_use >= v.len());
//! }
//! ```
//!
//! Rust's allocations then go to hakmem through its `hakmem_*` C API.  C code
//! in the same program keeps the C library's `malloc`, unless the crate's
//! `override` feature is enabled: then hakmem also replaces `malloc`, `free`
//! and the rest of the C API for the whole process, as `-lhakmem` does.
#![no_std]

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::{c_char, c_int, c_long, c_void};
use core::ptr;

/// The C API of `include/hakmem.h` that the allocator uses.
pub mod ffi {
    use core::ffi::{c_char, c_int, c_long, c_void};

    /// `hakmem_stats_t`: see [`crate::stats`].
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct Stats {
        /// bytes in blocks handed out and not yet freed (block sizes)
        pub in_use: usize,
        /// bytes of hakmem's memory that may be resident
        pub committed: usize,
        /// bytes of address space mapped from the OS
        pub mapped: usize,
        /// the highest value `mapped` has had
        pub peak_mapped: usize,
        /// of `mapped`: empty segments and freed big blocks kept for reuse
        pub cached: usize,
        /// bytes returned to the OS since start
        pub purged: usize,
        /// 4 MiB segments mapped
        pub segments: usize,
        /// live blocks above 2 MiB (each has its own mapping)
        pub huge_blocks: usize,
        /// threads that have a heap
        pub threads: usize,
        pub mmap_calls: usize,
        pub munmap_calls: usize,
        pub madvise_calls: usize,
        pub mremap_calls: usize,
        pub mprotect_calls: usize,
        /// allocations since start (only counted with `HAKMEM_STATS=1`)
        pub mallocs: usize,
        /// frees since start (only counted with `HAKMEM_STATS=1`)
        pub frees: usize,
        /// bytes requested since start (only counted with `HAKMEM_STATS=1`)
        pub requested: usize,
        /// frees of blocks another thread allocated (only with `HAKMEM_STATS=1`)
        pub remote_frees: usize,
        /// bytes in freed blocks that threads keep for reuse (`HAKMEM_THREAD_CACHE_KB`)
        pub thread_cached: usize,
        /// 4-256 KiB mallocs served by the thread cache (only with `HAKMEM_STATS=1`)
        pub thread_cache_hits: usize,
        /// 4-256 KiB mallocs that found it empty (only with `HAKMEM_STATS=1`)
        pub thread_cache_misses: usize,
        /// bytes of the process in transparent huge pages (`AnonHugePages`;
        /// `HAKMEM_HUGEPAGES`), the whole process's
        pub huge_page_resident: usize,
    }

    extern "C" {
        pub fn hakmem_malloc(size: usize) -> *mut c_void;
        pub fn hakmem_calloc(n: usize, size: usize) -> *mut c_void;
        pub fn hakmem_realloc(p: *mut c_void, size: usize) -> *mut c_void;
        pub fn hakmem_aligned_alloc(alignment: usize, size: usize) -> *mut c_void;
        pub fn hakmem_free(p: *mut c_void);
        pub fn hakmem_malloc_usable_size(p: *const c_void) -> usize;
        pub fn hakmem_stats_get(out: *mut Stats);
        pub fn hakmem_collect(force: c_int);
        pub fn hakmem_heap_new() -> *mut c_void;
        pub fn hakmem_heap_malloc(heap: *mut c_void, size: usize) -> *mut c_void;
        pub fn hakmem_heap_calloc(heap: *mut c_void, n: usize, size: usize) -> *mut c_void;
        pub fn hakmem_heap_aligned_alloc(heap: *mut c_void, alignment: usize, size: usize) -> *mut c_void;
        pub fn hakmem_heap_delete(heap: *mut c_void);
        pub fn hakmem_heap_destroy(heap: *mut c_void);
        pub fn hakmem_option_get(name: *const c_char, value: *mut c_long) -> c_int;
        pub fn hakmem_option_set(name: *const c_char, value: c_long) -> c_int;
    }
}

/// Every hakmem block is aligned to at least this (`max_align_t`).
const MIN_ALIGN: usize = 16;

/// The hakmem allocator; use it as `#[global_allocator]`.
#[derive(Clone, Copy, Debug, Default)]
pub struct HakMem;

unsafe impl GlobalAlloc for HakMem {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= MIN_ALIGN {
            ffi::hakmem_malloc(layout.size()).cast()
        } else {
            ffi::hakmem_aligned_alloc(layout.align(), layout.size()).cast()
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= MIN_ALIGN {
            return ffi::hakmem_calloc(1, layout.size()).cast();
        }
        let p = self.alloc(layout);
        if !p.is_null() {
            ptr::write_bytes(p, 0, layout.size());
        }
        p
    }

    #[inline]
    unsafe fn dealloc(&self, p: *mut u8, _layout: Layout) {
        ffi::hakmem_free(p.cast());
    }

    #[inline]
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= MIN_ALIGN {
            return ffi::hakmem_realloc(p.cast(), new_size).cast();
        }
        // hakmem_realloc promises only MIN_ALIGN when it moves a block, so an
        // over-aligned block stays where it is if it still fits (and is not
        // mostly wasted), or else moves by hand to a block of its alignment.
        let usable = ffi::hakmem_malloc_usable_size(p.cast());
        if new_size <= usable && new_size >= usable / 2 {
            return p;
        }
        let q = self.alloc(Layout::from_size_align_unchecked(new_size, layout.align()));
        if !q.is_null() {
            ptr::copy_nonoverlapping(p, q, layout.size().min(new_size));
            self.dealloc(p, layout);
        }
        q
    }
}

impl HakMem {
    /// The usable size of a block hakmem handed out: at least the size it was
    /// requested with, and all of it may be written.
    ///
    /// # Safety
    /// `p` must be a live block from this allocator.
    pub unsafe fn usable_size(p: *const u8) -> usize {
        ffi::hakmem_malloc_usable_size(p.cast())
    }
}

/// A snapshot of hakmem's memory in the whole process (every thread's),
/// taken by walking its segments: cheap enough now and then, not per call.
pub fn stats() -> ffi::Stats {
    let mut s = ffi::Stats::default();
    // SAFETY: hakmem_stats_get fills exactly one hakmem_stats_t.
    unsafe { ffi::hakmem_stats_get(&mut s) };
    s
}

/// Gives back now the free memory this thread's heap holds (its caches, its
/// empty pages, blocks other threads freed to it), whatever the purge delay;
/// with `force`, every thread's, as `malloc_trim(0)`.
pub fn collect(force: bool) {
    // SAFETY: no arguments beyond a flag; callable from any thread.
    unsafe { ffi::hakmem_collect(force as c_int) };
}

/// `EPERM` and `EINVAL` on Linux.
const EPERM: c_int = 1;
const EINVAL: c_int = 22;

/// Why an option could not be read or set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptionError {
    /// No such option, or a value out of its range (`EINVAL`).
    Invalid,
    /// The option is fixed once the process starts (`EPERM`).
    Fixed,
}

/// `f` given `name` NUL-terminated (no option's name is longer than 63 bytes).
fn with_name(name: &str, f: impl FnOnce(*const c_char) -> c_int) -> c_int {
    let b = name.as_bytes();
    let mut buf = [0u8; 64];
    if b.len() >= buf.len() || b.contains(&0) {
        return EINVAL;
    }
    buf[..b.len()].copy_from_slice(b);
    f(buf.as_ptr().cast())
}

/// The value of an option of the `HAKMEM_*` variables, by the variable's
/// name or the rest after `HAKMEM_`, in any case (`"purge_delay_ms"`).
pub fn option_get(name: &str) -> Result<i64, OptionError> {
    let mut value: c_long = 0;
    // SAFETY: a NUL-terminated name and a pointer to one long.
    match with_name(name, |n| unsafe { ffi::hakmem_option_get(n, &mut value) }) {
        0 => Ok(value as i64),
        _ => Err(OptionError::Invalid),
    }
}

/// Sets an option (see [`option_get`]); it takes effect from the next
/// decision that reads it.  `secure`, `stats` and `thread_cache_kb` are
/// fixed once the process starts.
pub fn option_set(name: &str, value: i64) -> Result<(), OptionError> {
    let value = c_long::try_from(value).map_err(|_| OptionError::Invalid)?;
    // SAFETY: a NUL-terminated name.
    match with_name(name, |n| unsafe { ffi::hakmem_option_set(n, value) }) {
        0 => Ok(()),
        EPERM => Err(OptionError::Fixed),
        _ => Err(OptionError::Invalid),
    }
}

/// A first-class heap: allocate a request's or a parse's objects in it, and
/// free them all at once with [`Heap::destroy`].  Only the thread that made
/// it may allocate from it (it is neither `Send` nor `Sync`); its blocks are
/// ordinary hakmem blocks, which [`HakMem`] (or `free`) frees from any
/// thread.  Dropping the heap deletes it: its live blocks go on in the
/// thread's own heap.
#[derive(Debug)]
pub struct Heap {
    raw: *mut c_void,
}

impl Heap {
    /// A new heap, or `None` when memory runs out.
    pub fn new() -> Option<Heap> {
        // SAFETY: no arguments; the heap belongs to this thread.
        let raw = unsafe { ffi::hakmem_heap_new() };
        (!raw.is_null()).then_some(Heap { raw })
    }

    /// A block for `layout` from this heap (null when memory runs out).
    pub fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: self.raw is a live heap of this thread (Heap is not Send).
        unsafe {
            if layout.align() <= MIN_ALIGN {
                ffi::hakmem_heap_malloc(self.raw, layout.size()).cast()
            } else {
                ffi::hakmem_heap_aligned_alloc(self.raw, layout.align(), layout.size()).cast()
            }
        }
    }

    /// The same, zeroed.
    pub fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= MIN_ALIGN {
            // SAFETY: as in alloc.
            return unsafe { ffi::hakmem_heap_calloc(self.raw, 1, layout.size()).cast() };
        }
        let p = self.alloc(layout);
        if !p.is_null() {
            // SAFETY: p holds at least layout.size() bytes.
            unsafe { ptr::write_bytes(p, 0, layout.size()) };
        }
        p
    }

    /// Frees every block of the heap at once, in time proportional to its
    /// pages, not its blocks.
    ///
    /// # Safety
    /// No block of the heap may be used, or freed, afterwards, by any thread.
    pub unsafe fn destroy(self) {
        let raw = self.raw;
        core::mem::forget(self);
        ffi::hakmem_heap_destroy(raw);
    }
}

impl Drop for Heap {
    fn drop(&mut self) {
        // SAFETY: a live heap of this thread; its blocks stay valid.
        unsafe { ffi::hakmem_heap_delete(self.raw) };
    }
}
