//! The vocabulary's free functions, and the few signatures the lowering uses to type literals
//! (`atomic_add(&mut x[i], 1, …)` makes `1` the element type). Methods are `methods`'s.

use crate::codegen::types::{Scalar, Ty};

/// How a free function's argument and result types relate.
pub(crate) enum FreeFn {
    /// Fixed result type; `args` gives fixed argument types where known.
    Returns(Ty, &'static [(usize, Scalar)]),
    /// Arguments `0..n` share one type, which is also the result (`min`, `fma`, `sqrt`).
    SameAsArgs(usize),
    /// The result is the first argument's type; the listed arguments have fixed types (`shfl(v, lane: u32)`).
    FirstArg(&'static [(usize, Scalar)]),
    /// `atomic_*(&mut p, v…)`: arguments `0..n` share the element type; `result` says whether it is returned.
    Atomic { shared: usize, returns: bool },
}

pub(crate) fn free_fn(name: &str) -> Option<FreeFn> {
    use Scalar::*;
    Some(match name {
        "thread_idx_x" | "thread_idx_y" | "thread_idx_z" | "block_idx_x" | "block_idx_y" | "block_idx_z"
        | "block_dim_x" | "block_dim_y" | "block_dim_z" | "grid_dim_x" | "grid_dim_y" | "grid_dim_z" | "lane_id"
        | "warp_id" => FreeFn::Returns(Ty::Scalar(U32), &[]),
        "index_1d" | "grid_size_1d" => FreeFn::Returns(Ty::Scalar(Usize), &[]),
        "global_timer_ns" => FreeFn::Returns(Ty::Scalar(U64), &[]),
        "mma" => FreeFn::Returns(Ty::Vocab(crate::codegen::vocabulary::Vocab::MmaAcc, None), &[]),
        "pack_lanes" => FreeFn::Returns(Ty::Scalar(Usize), &[]),
        "pdl_wait"
        | "pdl_launch_dependents"
        | "sync_threads"
        | "sync_warp"
        | "threadfence"
        | "threadfence_block"
        | "threadfence_system"
        | "atomic_fence" => FreeFn::Returns(Ty::Unit, &[]),
        "sqrt" | "rsqrt" | "exp" | "log" | "tanh" | "abs" => FreeFn::SameAsArgs(1),
        "min" | "max" => FreeFn::SameAsArgs(2),
        "fma" => FreeFn::SameAsArgs(3),
        "shfl" | "shfl_xor" | "shfl_down" | "shfl_up" => FreeFn::FirstArg(&[(1, U32)]),
        "ballot" => FreeFn::Returns(Ty::Scalar(U32), &[(0, Bool)]),
        "match_any" => FreeFn::Returns(Ty::Scalar(U32), &[(0, U32)]),
        "warp_reduce_sum" | "warp_reduce_max" | "warp_reduce_min" | "block_reduce_sum" | "block_reduce_max"
        | "block_reduce_min" => FreeFn::FirstArg(&[]),
        "atomic_add" | "atomic_max" | "atomic_min" | "atomic_exch" => FreeFn::Atomic { shared: 2, returns: true },
        "atomic_cas" => FreeFn::Atomic { shared: 3, returns: true },
        "atomic_load" => FreeFn::Atomic { shared: 1, returns: true },
        "atomic_store" => FreeFn::Atomic { shared: 2, returns: false },
        _ => return None,
    })
}

/// Scalar methods that become free functions with the receiver first (vocabulary rule R10); the method names are
/// reserved for this.
pub(crate) const SCALAR_METHODS: &[&str] =
    &["to_f32", "count_ones", "div_ceil", "sqrt", "rsqrt", "exp", "ln", "tanh", "abs", "min", "max", "mul_add"];

/// The name of every method of a vocabulary type (the `pub fn`s of `weft-device`'s impl blocks; a test keeps the
/// list in step), besides the scalar methods of [`SCALAR_METHODS`]. Which type has which is `methods`'s table; this
/// list only tells a method of another vocabulary type from one of Rust's standard library in messages.
pub(crate) const VOCABULARY_METHODS: &[&str] = &[
    "arrive",
    "as_mut_slice",
    "as_slice",
    "broadcast",
    "coalesced",
    "col",
    "col0",
    "cols",
    "contains",
    "end",
    "end_epoch",
    "first_warp",
    "flush",
    "from_mask",
    "from_warps",
    "gemm_block",
    "gemm_store",
    "gemm_tiles",
    "get",
    "gin",
    "hybrid_barrier",
    "id",
    "includes",
    "increase_signal_shadow",
    "inner_factor",
    "is_aborted",
    "is_empty",
    "is_ok",
    "is_timed_out",
    "lamport_clear_pack",
    "lamport_ready",
    "lamport_store_pack",
    "lamport_wait_pack",
    "lane",
    "lane_sum",
    "len",
    "ll_a2a",
    "load_pack",
    "load_reduce_sum",
    "load_wide",
    "local",
    "lsa",
    "lsa_barrier",
    "lsa_copy",
    "lsa_multimem",
    "lsa_multimem_barrier",
    "lsa_rank",
    "lsa_reduce_sum",
    "lsa_reduce_sum_copy",
    "lsa_size",
    "marker_name",
    "mask",
    "missing_from",
    "mma_ldmatrix_a",
    "mma_ldmatrix_b",
    "mma_load_a",
    "mma_load_b",
    "mma_store",
    "multimem_copy",
    "multimem_reduce_sum",
    "multimem_reduce_sum_copy",
    "narrow",
    "next_tile",
    "nranks",
    "of",
    "offset",
    "outer_factor",
    "peer",
    "put",
    "put_value",
    "rail",
    "rail_barrier",
    "rank",
    "rank_from",
    "read_counter",
    "read_signal",
    "read_va_signal",
    "recv",
    "reduce_add",
    "reset_counter",
    "reset_signal",
    "reset_va_signal",
    "row",
    "row0",
    "rows",
    "send",
    "set_value",
    "signal",
    "signal_shadow",
    "size",
    "store",
    "store_pack",
    "store_wide",
    "sync",
    "sync_timeout",
    "team_rank_to_lsa",
    "team_rank_to_world",
    "thread_rank",
    "union",
    "value",
    "wait",
    "wait_counter",
    "wait_counter_timeout",
    "wait_signal",
    "wait_signal_meet_shadow",
    "wait_signal_timeout",
    "wait_timeout",
    "wait_va_signal",
    "warp_count",
    "widen",
    "world",
    "world_barrier",
    "zero",
];

/// The vocabulary's free functions (docs/vocabulary.md §3). Calls to them need no device-fn source; any other
/// free function a body calls must be a `#[weft::device_fn]` (its companion module holds its C++).
const VOCABULARY_FUNCTIONS: &[&str] = &[
    "thread_idx_x",
    "thread_idx_y",
    "thread_idx_z",
    "block_idx_x",
    "block_idx_y",
    "block_idx_z",
    "block_dim_x",
    "block_dim_y",
    "block_dim_z",
    "grid_dim_x",
    "grid_dim_y",
    "grid_dim_z",
    "index_1d",
    "grid_size_1d",
    "grid_stride",
    "sync_threads",
    "sync_warp",
    "pdl_wait",
    "pdl_launch_dependents",
    "mma",
    "lane_id",
    "warp_id",
    "shfl",
    "shfl_xor",
    "shfl_down",
    "shfl_up",
    "ballot",
    "match_any",
    "warp_reduce_sum",
    "warp_reduce_max",
    "warp_reduce_min",
    "block_reduce_sum",
    "block_reduce_max",
    "block_reduce_min",
    "threadfence",
    "threadfence_block",
    "threadfence_system",
    "atomic_fence",
    "global_timer_ns",
    "pack_lanes",
    "atomic_add",
    "atomic_max",
    "atomic_min",
    "atomic_exch",
    "atomic_cas",
    "atomic_load",
    "atomic_store",
    "sqrt",
    "rsqrt",
    "exp",
    "log",
    "tanh",
    "fma",
    "abs",
    "min",
    "max",
    "local_reduce_sum",
    "local_copy",
    "local_reduce_sum_copy",
    "device_only",
];

pub(crate) fn is_vocabulary_function(name: &str) -> bool {
    VOCABULARY_FUNCTIONS.contains(&name)
}
