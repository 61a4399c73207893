//! What moves the bytes: one engine per RMA context, an ordered queue of copies and signal additions.
//!
//! Everything an engine enqueues runs in the order it was enqueued, so a signal added after a put lands after the
//! put's data (every signal is strong), and a marker completes once everything before it has.

use crate::error::Result;

/// A point in an engine's queue: complete when everything enqueued before it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Marker(pub(crate) usize);

/// An ordered queue of memory operations on addresses of this process.
pub(crate) trait Engine: Send + Sync + std::fmt::Debug {
    /// Copies `bytes` bytes from `source` to `destination`. `source_is_host` says the source is host memory, which
    /// the caller may change once this returns.
    fn copy(&self, destination: u64, source: u64, bytes: usize, source_is_host: bool) -> Result<()>;

    /// Adds `value` to the 64-bit word at `address` (8-byte aligned), exactly, whoever else adds to it through an
    /// engine of this process at the same time.
    fn add(&self, address: u64, value: u64) -> Result<()>;

    /// A marker after everything enqueued so far.
    fn mark(&self) -> Result<Marker>;

    /// Whether everything before `marker` has completed.
    fn is_done(&self, marker: Marker) -> Result<bool>;

    /// Gives a marker back once nobody will ask about it again.
    fn release(&self, marker: Marker);

    /// Waits until everything enqueued has completed.
    fn synchronize(&self) -> Result<()>;
}
