//! Prints the ProbeSpec and ProbeAttachment CRDs as multi-document YAML:
//! `cargo run -p gprobe-crds --bin crdgen > crds/crds.yaml`.

fn main() {
    print!("{}", gprobe_crds::crds_yaml());
}
