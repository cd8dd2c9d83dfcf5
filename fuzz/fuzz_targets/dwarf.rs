//! Fuzz target: see `gprobe_agent::resolve::fuzzing::dwarf`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    gprobe_agent::resolve::fuzzing::dwarf(data);
});
