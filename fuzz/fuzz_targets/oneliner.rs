//! Fuzz target: see `gprobe_crds::fuzzing::oneliner`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    gprobe_crds::fuzzing::oneliner(data);
});
