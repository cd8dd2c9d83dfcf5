//! Go register ABI (ABIInternal, amd64): where each parameter and result lives.
