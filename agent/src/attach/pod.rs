//! The ABI's records as aya map keys and values: aya stays behind attach/, and the ABI
//! (crate::abi) does not depend on it.

macro_rules! impl_pod {
    ($($t:ident),*) => {
        // SAFETY: each is an abi::Record: a repr(C) struct of integers and byte arrays whose
        // layout is checked against gprobe.h, so any bytes of its size are a valid value.
        $( unsafe impl aya::Pod for crate::abi::$t {} )*
    };
}
crate::for_each_record!(impl_pod);
