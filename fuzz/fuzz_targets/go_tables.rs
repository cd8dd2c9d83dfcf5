//! Fuzz target: see `gprobe_agent::resolve::fuzzing::go_tables`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    gprobe_agent::resolve::fuzzing::go_tables(data);
});
