//! Memory orders and scopes, as NCCL's device API and libcu++ take them.

/// The memory order of a synchronising operation (barrier arrive/wait, flush, atomic load/store).
/// C++ `weft::Order` (`enum class`), passed to NCCL as `cuda::memory_order_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Order {
    /// No ordering beyond the operation itself (`cuda::memory_order_relaxed`).
    Relaxed,
    /// Later reads and writes stay after it (`cuda::memory_order_acquire`).
    Acquire,
    /// Earlier reads and writes stay before it (`cuda::memory_order_release`).
    Release,
    /// Both acquire and release (`cuda::memory_order_acq_rel`).
    AcqRel,
    /// Acquire-release plus a single total order (`cuda::memory_order_seq_cst`).
    SeqCst,
}

/// The set of threads an atomic or fence synchronises with. C++ `weft::Scope` (`enum class`), passed on as
/// `cuda::thread_scope_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// This thread only (`cuda::thread_scope_thread`).
    Thread,
    /// The threads of this block (`cuda::thread_scope_block`).
    Block,
    /// The threads of this GPU (`cuda::thread_scope_device`).
    Device,
    /// Every thread of the system, other GPUs and the CPU included (`cuda::thread_scope_system`); what memory
    /// shared with peers over NVLink needs.
    System,
}
