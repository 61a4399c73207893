//! Methods and associated functions of the vocabulary, by receiver type: `x.m(…)` is emitted as `x.m(…)` only when
//! `x`'s vocabulary type has `m` (in Rust *and* in weft.cuh). A method that merely shares its name with one of
//! another type (`out.contains(&v)` on a slice, where `contains` is `Team`'s) would otherwise type-check in rustc
//! and fail in nvcc at the first launch. The tables follow `weft-device`'s impl blocks; a unit test keeps them in
//! step (tests/vocabulary.rs).

use crate::codegen::types::{Container, Scalar, Ty, Vocab};

/// What a vocabulary method call is: its result and how its arguments type literals.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Method {
    pub(crate) ret: Ty,
    /// Arguments of a fixed type (resource indices are `u32`, element offsets `usize`).
    pub(crate) fixed: &'static [(usize, Scalar)],
    /// Arguments of the receiver's element type (`mv.store(i, v)`).
    pub(crate) elem_args: &'static [usize],
    /// The method's type parameter appears only in its result, which C++ cannot deduce: the call must name it
    /// (`a2a.recv::<T>(slot)`, `x.load_wide::<T>(p)`); `ret` is then that type.
    pub(crate) needs_turbofish: bool,
}

fn of(ret: Ty, fixed: &'static [(usize, Scalar)]) -> Option<Method> {
    Some(Method { ret, fixed, elem_args: &[], needs_turbofish: false })
}

fn vocab(v: Vocab) -> Ty {
    Ty::Vocab(v, None)
}

fn with_elem(v: Vocab, elem: Option<&Ty>) -> Ty {
    Ty::Vocab(v, elem.map(|e| Box::new(e.clone())))
}

/// The method `name` with `arity` arguments of a receiver of type `recv`; `type_arg` is the turbofish's type, if
/// any. `None` when the receiver's type has no such method (scalar methods, R10, are resolved before this).
pub(crate) fn method(recv: &Ty, name: &str, arity: usize, type_arg: Option<&Ty>) -> Option<Method> {
    use Scalar::*;
    let unit = Ty::Unit;
    let u32_ = Ty::Scalar(U32);
    let usize_ = Ty::Scalar(Usize);
    let bool_ = Ty::Scalar(Bool);
    let turbofish = |fixed: &'static [(usize, Scalar)]| {
        Some(Method { ret: type_arg.cloned().unwrap_or(Ty::Unknown), fixed, elem_args: &[], needs_turbofish: true })
    };
    match recv {
        Ty::DevComm => match (name, arity) {
            ("rank" | "nranks" | "lsa_rank" | "lsa_size", 0) => of(u32_, &[]),
            ("world" | "lsa" | "rail", 0) => of(vocab(Vocab::Team), &[]),
            ("team_rank_to_world" | "team_rank_to_lsa", 2) => of(u32_, &[(1, U32)]),
            ("lsa_barrier" | "lsa_multimem_barrier", 2) => of(vocab(Vocab::LsaBarrier), &[(1, U32)]),
            (
                "lsa_reduce_sum"
                | "lsa_copy"
                | "lsa_reduce_sum_copy"
                | "multimem_reduce_sum"
                | "multimem_copy"
                | "multimem_reduce_sum_copy",
                4,
            ) => of(unit, &[(3, Usize)]),
            ("gin", 1) => of(vocab(Vocab::GinSession), &[(0, U32)]),
            ("hybrid_barrier", 3) => of(vocab(Vocab::HybridBarrier), &[(2, U32)]),
            ("ll_a2a", 4) => of(vocab(Vocab::LlA2a), &[(2, U32), (3, U32)]),
            // The element type is the window argument's; the caller fills it in.
            ("lsa_multimem", 1) => of(vocab(Vocab::MultimemView), &[]),
            _ => None,
        },
        Ty::Window(e) => match (name, arity) {
            ("len", 0) => of(usize_, &[]),
            ("is_empty", 0) => of(bool_, &[]),
            ("offset", 1) => of(Ty::Window(e.clone()), &[(0, Usize)]),
            ("local", 0) => of(Ty::Indexable(Container::View, e.clone()), &[]),
            ("lsa", 1) => of(Ty::Indexable(Container::View, e.clone()), &[(0, U32)]),
            ("peer", 2) => of(Ty::Indexable(Container::View, e.clone()), &[(1, U32)]),
            _ => None,
        },
        Ty::Indexable(container, e) => match (container, name, arity) {
            (_, "len", 0) => of(usize_, &[]),
            (_, "is_empty", 0) => of(bool_, &[]),
            (Container::Slice | Container::SliceMut | Container::View, "load_pack", 1) => {
                of(with_elem(Vocab::Pack, Some(e)), &[(0, Usize)])
            }
            (Container::SliceMut | Container::View, "store_pack", 2) => of(unit, &[(0, Usize)]),
            // Lamport packs: on window views only (the polled memory is a peer's, or ours written by peers).
            (Container::View, "lamport_store_pack", 2) => of(unit, &[(0, Usize)]),
            (Container::View, "lamport_clear_pack", 1) => of(unit, &[(0, Usize)]),
            (Container::View, "lamport_wait_pack", 2) => of(with_elem(Vocab::Pack, Some(e)), &[(0, Usize), (1, U64)]),
            // Tensor-core fragments (mma.rs): tiles of a row-major matrix, `(row, column, ld)`.
            (_, "mma_load_a", 3) => of(with_elem(Vocab::MmaA, Some(e)), &[(0, Usize), (1, Usize), (2, Usize)]),
            (_, "mma_load_b", 3) => of(with_elem(Vocab::MmaB, Some(e)), &[(0, Usize), (1, Usize), (2, Usize)]),
            (Container::Shared, "mma_ldmatrix_a", 3) => {
                of(with_elem(Vocab::MmaA, Some(e)), &[(0, Usize), (1, Usize), (2, Usize)])
            }
            (Container::Shared, "mma_ldmatrix_b", 3) => {
                of(with_elem(Vocab::MmaB, Some(e)), &[(0, Usize), (1, Usize), (2, Usize)])
            }
            // The block GEMM mainloop (gemm.rs): `a.gemm_block(row0, lda, b, col0, ldb, k)`.
            (Container::Slice | Container::SliceMut | Container::View, "gemm_block", 6) => {
                of(vocab(Vocab::GemmTile), &[(0, Usize), (1, Usize), (3, Usize), (4, Usize), (5, Usize)])
            }
            (Container::SliceMut | Container::View | Container::Shared, "mma_store", 4) => {
                of(unit, &[(1, Usize), (2, Usize), (3, Usize)])
            }
            // `out.gemm_store(&gemm, row0, col0, ld)`: a `GemmTiles` tile into a row-major matrix (gemm.rs).
            (Container::SliceMut | Container::View, "gemm_store", 4) => of(unit, &[(1, Usize), (2, Usize), (3, Usize)]),
            (Container::Slice | Container::SliceMut, "load_wide", 1) => Some(Method {
                ret: with_elem(Vocab::WidePack, type_arg),
                fixed: &[(0, Usize)],
                elem_args: &[],
                needs_turbofish: true,
            }),
            (Container::SliceMut, "store_wide", 2) => of(unit, &[(0, Usize)]),
            (Container::Shared, "as_slice", 0) => of(Ty::Indexable(Container::Slice, e.clone()), &[]),
            (Container::Shared, "as_mut_slice", 0) => of(Ty::Indexable(Container::SliceMut, e.clone()), &[]),
            _ => None,
        },
        Ty::Vocab(v, e) => vocab_method(*v, e.as_deref(), name, arity, turbofish),
        _ => None,
    }
}

fn vocab_method(
    v: Vocab,
    elem: Option<&Ty>,
    name: &str,
    arity: usize,
    turbofish: impl Fn(&'static [(usize, Scalar)]) -> Option<Method>,
) -> Option<Method> {
    use Scalar::*;
    let unit = Ty::Unit;
    let u32_ = Ty::Scalar(U32);
    let u64_ = Ty::Scalar(U64);
    let result = vocab(Vocab::BarrierResult);
    let elem_ty = elem.cloned().unwrap_or(Ty::Unknown);
    if v.is_coop() {
        match (name, arity) {
            ("thread_rank" | "size", 0) => return of(u32_, &[]),
            ("sync", 0) => return of(unit, &[]),
            _ => {}
        }
    }
    match (v, name, arity) {
        (Vocab::Team, "contains", 2) => of(Ty::Scalar(Bool), &[(1, U32)]),
        (Vocab::Team, "rank_from", 2) => of(u32_, &[(1, U32)]),
        (Vocab::Team, "inner_factor" | "outer_factor", 1) => of(vocab(Vocab::Team), &[(0, U32)]),

        (Vocab::LsaBarrier, "arrive" | "wait" | "sync", 2) => of(unit, &[]),
        (Vocab::LsaBarrier, "wait_timeout" | "sync_timeout", 3) => of(result, &[(2, U64)]),
        (Vocab::LsaBarrier | Vocab::GinBarrier | Vocab::HybridBarrier, "end", 0) => of(unit, &[]),
        (Vocab::GinBarrier | Vocab::HybridBarrier, "sync", 2) => of(unit, &[]),
        (Vocab::GinBarrier, "sync_timeout", 3) => of(result, &[(2, U64)]),

        (Vocab::BarrierResult, "is_ok" | "is_timed_out" | "is_aborted", 0) => of(Ty::Scalar(Bool), &[]),

        (Vocab::GinSession, "put", 8) => of(unit, &[(1, U32), (4, Usize)]),
        (Vocab::GinSession, "put_value", 6) => of(unit, &[(1, U32)]),
        (Vocab::GinSession, "signal", 4) => of(unit, &[(1, U32)]),
        (Vocab::GinSession, "get", 6) => of(unit, &[(1, U32), (4, Usize)]),
        (Vocab::GinSession, "flush", 2) => of(unit, &[]),
        (Vocab::GinSession, "read_signal" | "signal_shadow" | "read_counter", 1) => of(u64_, &[(0, U32)]),
        (Vocab::GinSession, "reset_signal" | "reset_counter", 1) => of(unit, &[(0, U32)]),
        (Vocab::GinSession, "wait_signal" | "wait_counter", 3) => of(unit, &[(1, U32), (2, U64)]),
        (Vocab::GinSession, "wait_signal_timeout" | "wait_counter_timeout", 4) => {
            of(result, &[(1, U32), (2, U64), (3, U64)])
        }
        (Vocab::GinSession, "increase_signal_shadow", 2) => of(unit, &[(0, U32), (1, U64)]),
        (Vocab::GinSession, "wait_signal_meet_shadow", 2) => of(unit, &[(1, U32)]),
        (Vocab::GinSession, "read_va_signal", 1) => of(u64_, &[]),
        (Vocab::GinSession, "wait_va_signal", 3) => of(unit, &[(2, U64)]),
        (Vocab::GinSession, "reset_va_signal", 1) => of(unit, &[]),
        (Vocab::GinSession, "rail_barrier" | "world_barrier", 2) => of(vocab(Vocab::GinBarrier), &[(1, U32)]),

        (Vocab::LlA2a, "send", 3) => of(unit, &[(0, U32), (1, U32)]),
        (Vocab::LlA2a, "broadcast", 2) => of(unit, &[(0, U32)]),
        (Vocab::LlA2a, "recv", 1) => turbofish(&[(0, U32)]),
        (Vocab::LlA2a, "end_epoch", 1) => of(unit, &[]),
        (Vocab::LlA2a, "end", 0) => of(unit, &[]),
        (Vocab::LlA2aHandle, "buffer" | "slots", 0) => of(u32_, &[]),

        (Vocab::MultimemView, "len", 0) => of(Ty::Scalar(Usize), &[]),
        (Vocab::MultimemView, "is_empty", 0) => of(Ty::Scalar(Bool), &[]),
        (Vocab::MultimemView, "load_reduce_sum", 1) => of(elem_ty, &[(0, Usize)]),
        (Vocab::MultimemView, "reduce_add" | "store", 2) => {
            Some(Method { ret: unit, fixed: &[(0, Usize)], elem_args: &[1], needs_turbofish: false })
        }

        (Vocab::Pack, "lane", 1) => of(elem_ty, &[(0, Usize)]),
        (Vocab::Pack, "widen", 0) => of(with_elem(Vocab::WidePack, elem), &[]),
        (Vocab::Pack, "lamport_ready", 0) => of(Ty::Scalar(Bool), &[]),
        (Vocab::WidePack, "narrow", 0) => of(with_elem(Vocab::Pack, elem), &[]),
        (Vocab::WidePack, "lane", 1) => of(Ty::Scalar(F32), &[(0, Usize)]),
        (Vocab::WidePack, "lane_sum", 0) => of(Ty::Scalar(F32), &[]),
        // Lowered by R10 (`weft::sqrt(w)`, which has `WidePack` overloads) before this table is consulted.
        (Vocab::WidePack, "sqrt" | "rsqrt", 0) => of(with_elem(Vocab::WidePack, elem), &[]),
        (Vocab::WidePack, "mul_add", 2) => of(with_elem(Vocab::WidePack, elem), &[]),

        (Vocab::GemmTile, "len", 0) => of(Ty::Scalar(Usize), &[]),
        (Vocab::GemmTile, "is_empty", 0) => of(Ty::Scalar(Bool), &[]),
        (Vocab::GemmTile, "row" | "col", 1) => of(Ty::Scalar(Usize), &[(0, Usize)]),
        (Vocab::GemmTile, "value", 1) => of(Ty::Scalar(F32), &[(0, Usize)]),

        (Vocab::TmaMatrix, "rows" | "cols", 0) => of(Ty::Scalar(Usize), &[]),
        (Vocab::TmaMatrix, "gemm_tiles", 1) => of(vocab(Vocab::GemmTiles), &[]),
        (Vocab::TmaShards, "rows" | "cols" | "shard_rows", 0) => of(Ty::Scalar(Usize), &[]),
        (Vocab::TmaShards, "gemm_tiles", 1) => of(vocab(Vocab::GemmTiles), &[]),
        (Vocab::GemmTiles, "next_tile" | "is_empty", 0) => of(Ty::Scalar(Bool), &[]),
        (Vocab::GemmTiles, "row0" | "col0" | "len", 0) => of(Ty::Scalar(Usize), &[]),
        (Vocab::GemmTiles, "row" | "col", 1) => of(Ty::Scalar(Usize), &[(0, Usize)]),
        (Vocab::GemmTiles, "value", 1) => of(Ty::Scalar(F32), &[(0, Usize)]),
        (Vocab::GemmTiles, "set_value", 2) => of(unit, &[(0, Usize), (1, F32)]),
        (Vocab::GemmTiles, "tiles", 0) => of(Ty::Scalar(Usize), &[]),
        (Vocab::GemmTiles, "tile_row0" | "tile_col0", 1) => of(Ty::Scalar(Usize), &[(0, Usize)]),

        (Vocab::Lanes, "mask", 0) => of(u32_, &[]),
        (Vocab::WarpSpan, "first_warp" | "warp_count" | "id", 0) => of(u32_, &[]),
        _ => None,
    }
}

/// An associated function of a vocabulary type (`Lanes::from_mask(m)`), with the same meaning as [`Method`].
pub(crate) fn associated_fn(v: Vocab, name: &str, arity: usize) -> Option<Method> {
    use Scalar::*;
    match (v, name, arity) {
        (Vocab::Lanes, "from_mask", 1) => of(vocab(Vocab::Lanes), &[(0, U32)]),
        (Vocab::Lanes, "coalesced", 0) => of(vocab(Vocab::Lanes), &[]),
        (Vocab::WarpSpan, "from_warps", 3) => of(vocab(Vocab::WarpSpan), &[(0, U32), (1, U32), (2, U32)]),
        // The element type comes from the type arguments (`Pack::<T>::splat(v)`) or, for `Pack`, the value.
        (Vocab::Pack, "splat", 1) => of(vocab(Vocab::Pack), &[]),
        (Vocab::WidePack, "splat", 1) => of(vocab(Vocab::WidePack), &[(0, F32)]),
        (Vocab::MmaAcc, "zero", 0) => of(vocab(Vocab::MmaAcc), &[]),
        _ => None,
    }
}

/// How a type is named in messages.
pub(crate) fn describe(ty: &Ty) -> String {
    match ty {
        Ty::Scalar(s) => format!("`{}`", s.rust()),
        Ty::Param(p) => format!("`{p}`"),
        Ty::Tuple(_) => "a tuple".into(),
        Ty::Indexable(Container::Slice, _) => "a slice (`&[T]`)".into(),
        Ty::Indexable(Container::SliceMut, _) => "a slice (`&mut [T]`)".into(),
        Ty::Indexable(Container::View, _) => "`WindowView`".into(),
        Ty::Indexable(Container::Shared, _) => "`SharedArray`".into(),
        Ty::Window(_) => "`Window`".into(),
        Ty::DevComm => "`DevComm`".into(),
        Ty::Vocab(Vocab::AnyCoop, _) => "a `Coop`".into(),
        Ty::Vocab(v, _) => format!("`{}`", v.name()),
        Ty::Ref(inner) => describe(inner),
        Ty::Unit => "`()`".into(),
        Ty::Var(_) => "a number".into(),
        Ty::Local(_) | Ty::Unknown | Ty::Error => "a value of unknown type".into(),
    }
}
