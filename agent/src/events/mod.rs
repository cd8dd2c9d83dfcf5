//! Ring buffer records to calls: decoding captured values, pairing entries with returns,
//! and counting what could not be paired.

mod call;
mod composite;
mod decode;
mod dyntypes;
mod errno;
mod errtext;
mod nesting;
mod pairing;
pub mod reader;
pub mod redact;
mod sampling;
pub mod tracecontext;
mod value;

pub use call::{CallRecord, Clock, InternalProbe, MetricLabels, ProbeMeta, Resource};
pub use decode::decode_values;
pub use dyntypes::{DynTypes, TypeLookup};
pub use nesting::{Nesting, Origin, SpanIds};
pub use pairing::{Pairing, PairingStats};
pub use value::{DecodeCtx, Value, ValueKind};
