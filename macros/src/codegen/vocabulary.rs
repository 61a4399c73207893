//! The vocabulary's value types besides slices, windows, views, shared arrays and the communicator, by their Rust
//! names, and what each kind of name means in a body (unit values, enum variants, tuple-struct constructors,
//! sessions that C++ never copies).

/// The vocabulary types besides slices, windows, views, shared arrays and the communicator (docs/vocabulary.md §2),
/// by their Rust names. A type name that is not one of these (a user's struct) has no C++ counterpart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Vocab {
    Team,
    LsaBarrier,
    GinBarrier,
    HybridBarrier,
    BarrierResult,
    GinSession,
    LlA2a,
    LlA2aHandle,
    MultimemView,
    Pack,
    WidePack,
    /// Tensor-core fragments (mma.rs): the A and B operands (with their element type) and the f32 accumulator.
    MmaA,
    MmaB,
    MmaAcc,
    /// A thread's share of a block's 128 x 128 GEMM tile (gemm.rs).
    GemmTile,
    /// A matrix described for TMA (a kernel parameter, with its element type) and the persistent GEMM loop over
    /// two of them (gemm.rs).
    TmaMatrix,
    /// A matrix sharded by rows over the LSA team, one tensor map per rank (a kernel parameter, gemm.rs).
    TmaShards,
    GemmTiles,
    Thread,
    Warp,
    Cta,
    Lanes,
    WarpSpan,
    /// A type parameter bounded by `Coop` (`fn f<Co: Coop>(coop: Co)` in a device fn).
    AnyCoop,
    Order,
    Scope,
    /// A GIN action (`NoAction`, `SignalInc(s)`, …): an argument of GIN calls, with no methods.
    Action(&'static str),
}

/// GIN actions: (name, fields of the tuple struct; 0 for the unit struct `NoAction`).
pub(crate) const ACTIONS: &[(&str, usize)] = &[
    ("NoAction", 0),
    ("SignalInc", 1),
    ("SignalAdd", 2),
    ("StrongSignalInc", 1),
    ("WeakSignalInc", 1),
    ("StrongSignalAdd", 2),
    ("WeakSignalAdd", 2),
    ("VaSignalInc", 1),
    ("VaSignalAdd", 2),
    ("StrongVaSignalInc", 1),
    ("WeakVaSignalInc", 1),
    ("StrongVaSignalAdd", 2),
    ("WeakVaSignalAdd", 2),
    ("CounterInc", 1),
    ("WeakCounterInc", 1),
];

impl Vocab {
    const NAMED: [Vocab; 26] = [
        Vocab::Team,
        Vocab::LsaBarrier,
        Vocab::GinBarrier,
        Vocab::HybridBarrier,
        Vocab::BarrierResult,
        Vocab::GinSession,
        Vocab::LlA2a,
        Vocab::LlA2aHandle,
        Vocab::MultimemView,
        Vocab::Pack,
        Vocab::WidePack,
        Vocab::MmaA,
        Vocab::MmaB,
        Vocab::MmaAcc,
        Vocab::GemmTile,
        Vocab::TmaMatrix,
        Vocab::TmaShards,
        Vocab::GemmTiles,
        Vocab::Thread,
        Vocab::Warp,
        Vocab::Cta,
        Vocab::Lanes,
        Vocab::WarpSpan,
        Vocab::Order,
        Vocab::Scope,
        Vocab::AnyCoop,
    ];

    /// The vocabulary type of this Rust name.
    pub(crate) fn from_name(name: &str) -> Option<Vocab> {
        if let Some((action, _)) = ACTIONS.iter().find(|(a, _)| *a == name) {
            return Some(Vocab::Action(action));
        }
        Vocab::NAMED.into_iter().find(|v| *v != Vocab::AnyCoop && v.name() == name)
    }

    /// The Rust name (also the C++ name in namespace `weft`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Vocab::Team => "Team",
            Vocab::LsaBarrier => "LsaBarrier",
            Vocab::GinBarrier => "GinBarrier",
            Vocab::HybridBarrier => "HybridBarrier",
            Vocab::BarrierResult => "BarrierResult",
            Vocab::GinSession => "GinSession",
            Vocab::LlA2a => "LlA2a",
            Vocab::LlA2aHandle => "LlA2aHandle",
            Vocab::MultimemView => "MultimemView",
            Vocab::Pack => "Pack",
            Vocab::WidePack => "WidePack",
            Vocab::MmaA => "MmaA",
            Vocab::MmaB => "MmaB",
            Vocab::MmaAcc => "MmaAcc",
            Vocab::GemmTile => "GemmTile",
            Vocab::TmaMatrix => "TmaMatrix",
            Vocab::TmaShards => "TmaShards",
            Vocab::GemmTiles => "GemmTiles",
            Vocab::Thread => "Thread",
            Vocab::Warp => "Warp",
            Vocab::Cta => "Cta",
            Vocab::Lanes => "Lanes",
            Vocab::WarpSpan => "WarpSpan",
            Vocab::AnyCoop => "Coop",
            Vocab::Order => "Order",
            Vocab::Scope => "Scope",
            Vocab::Action(name) => name,
        }
    }

    /// Sessions are neither copyable nor movable in C++ (weft.cuh, like NCCL's): they live where they were opened
    /// and are lent by reference.
    pub(crate) fn is_session(self) -> bool {
        matches!(self, Vocab::LsaBarrier | Vocab::GinBarrier | Vocab::HybridBarrier | Vocab::LlA2a)
    }

    /// Values that stay where they were made: sessions, a `TmaMatrix` (TMA reads its map where the launch put it: a
    /// copy in local memory is no map) and the `GemmTiles` loop state. A `let` may bind one made by a call (C++17
    /// guaranteed elision), and a device fn may borrow one; copying, moving or reassigning one is refused.
    pub(crate) fn is_pinned(self) -> bool {
        self.is_session() || matches!(self, Vocab::TmaMatrix | Vocab::TmaShards | Vocab::GemmTiles)
    }

    /// Why [`is_pinned`](Self::is_pinned) holds, for errors.
    pub(crate) fn why_pinned(self) -> &'static str {
        match self {
            Vocab::TmaMatrix | Vocab::TmaShards => {
                "TMA reads its tensor map where the launch put it, and a copy would be in local memory"
            }
            Vocab::GemmTiles => "the loop's state belongs to its block's pipeline",
            _ => "C++ can neither copy nor move one",
        }
    }

    /// Coops: `thread_rank()`, `size()`, `sync()`.
    pub(crate) fn is_coop(self) -> bool {
        matches!(self, Vocab::Thread | Vocab::Warp | Vocab::Cta | Vocab::Lanes | Vocab::WarpSpan | Vocab::AnyCoop)
    }

    /// Unit structs: a value in Rust, a type in C++ (R6: `Cta` → `weft::Cta{}`).
    pub(crate) fn is_unit_struct(self) -> bool {
        matches!(self, Vocab::Thread | Vocab::Warp | Vocab::Cta | Vocab::Action("NoAction"))
    }

    /// The variants of the vocabulary's enums (R8).
    pub(crate) fn variants(self) -> &'static [&'static str] {
        match self {
            Vocab::Order => &["Relaxed", "Acquire", "Release", "AcqRel", "SeqCst"],
            Vocab::Scope => &["Thread", "Block", "Device", "System"],
            Vocab::BarrierResult => &["Ok", "TimedOut", "Aborted"],
            _ => &[],
        }
    }

    /// Fields of a tuple-struct constructor (R7), `None` for other types.
    pub(crate) fn tuple_fields(self) -> Option<usize> {
        match self {
            Vocab::Action(name) => ACTIONS.iter().find(|(a, _)| *a == name).map(|(_, n)| *n).filter(|n| *n > 0),
            _ => None,
        }
    }
}
