//! Run-time control: options read and set by name, their errors, and
//! `collect` giving back a thread's free memory.

use hakmem::{HakMem, OptionError};

#[global_allocator]
static GLOBAL: HakMem = HakMem;

#[test]
fn options_by_name() {
    assert_eq!(hakmem::option_get("segment_cache"), Ok(8));
    assert_eq!(hakmem::option_set("HAKMEM_SEGMENT_CACHE", 3), Ok(()));
    assert_eq!(hakmem::option_get("Segment_Cache"), Ok(3));
    assert_eq!(hakmem::option_set("segment_cache", 8), Ok(()));
    assert_eq!(hakmem::option_get("no_such_option"), Err(OptionError::Invalid));
    assert_eq!(
        hakmem::option_set("purge_delay_ms", -1),
        Err(OptionError::Invalid)
    );
    assert_eq!(
        hakmem::option_set("purge\0delay_ms", 1),
        Err(OptionError::Invalid)
    );
    assert_eq!(hakmem::option_set("secure", 1), Err(OptionError::Fixed));
    assert_eq!(hakmem::option_get("secure"), Ok(0));
}

#[test]
fn collect_keeps_live_memory() {
    let v: Vec<Vec<u8>> = (0..1000).map(|i| vec![i as u8; 1000]).collect();
    hakmem::collect(false);
    hakmem::collect(true);
    assert!(v.iter().enumerate().all(|(i, b)| b.iter().all(|&x| x == i as u8)));
}
