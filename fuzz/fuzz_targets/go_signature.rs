//! Fuzz target: see `gprobe_crds::fuzzing::go_signature`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    gprobe_crds::fuzzing::go_signature(data);
});
