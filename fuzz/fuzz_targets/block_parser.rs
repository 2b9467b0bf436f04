//! Fuzzes the block-file parser that start-up recovery runs over whatever a crash, a full
//! disk or a bad copy left on disk: it must never panic, loop or allocate from a length it
//! read, and must stop at the first frame whose CRC fails.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let frames = tsblob_storage::fuzzing::parse_block(data);
    // Every frame takes at least a few header bytes: the count can never exceed the input.
    assert!(frames <= data.len());
});
