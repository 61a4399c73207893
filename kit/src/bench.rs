//! The fused benchmark's pure parts (no GPU): its options, statistics, report and plot. They live here rather than
//! in the bench target so that `tests/bench_harness.rs` can test them (the bench has no test harness).

pub mod options;
pub mod plot;
pub mod report;
pub mod stats;
