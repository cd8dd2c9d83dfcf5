//! Fuzz target: see `gprobe_crds::fuzzing::when`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    gprobe_crds::fuzzing::when(data);
});
