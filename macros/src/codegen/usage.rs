//! Capabilities and NCCL resources a body uses, inferred from the vocabulary it touches (docs/vocabulary.md's
//! "Needs" column), and their encoding into the generated constants.
//!
//! A resource index (barrier, signal, counter, GIN context) is either a constant (`count ≥ max + 1`), a block index
//! (`block_idx_x()`: `count ≥ grid size` along that axis, known only at launch) or something the macro cannot
//! follow, which is an error unless the attribute declares the count.

/// An NCCL device-communicator resource a body can index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Resource {
    LsaBarrier,
    HybridBarrier,
    RailGinBarrier,
    WorldGinBarrier,
    GinSignal,
    GinCounter,
    GinContext,
    LlA2aBlock,
    LlA2aSlot,
}

impl Resource {
    pub(crate) const ALL: [Resource; 9] = [
        Resource::LsaBarrier,
        Resource::HybridBarrier,
        Resource::RailGinBarrier,
        Resource::WorldGinBarrier,
        Resource::GinSignal,
        Resource::GinCounter,
        Resource::GinContext,
        Resource::LlA2aBlock,
        Resource::LlA2aSlot,
    ];

    pub(crate) fn index(self) -> usize {
        Resource::ALL.iter().position(|r| *r == self).unwrap_or(0)
    }

    /// The attribute key that declares its count.
    pub(crate) fn attribute(self) -> &'static str {
        match self {
            Resource::LsaBarrier => "lsa_barriers",
            Resource::HybridBarrier => "hybrid_barriers",
            Resource::RailGinBarrier => "rail_gin_barriers",
            Resource::WorldGinBarrier => "world_gin_barriers",
            Resource::GinSignal => "gin_signals",
            Resource::GinCounter => "gin_counters",
            Resource::GinContext => "gin_contexts",
            Resource::LlA2aBlock => "ll_a2a_blocks",
            Resource::LlA2aSlot => "ll_a2a_slots",
        }
    }

    pub(crate) fn from_attribute(name: &str) -> Option<Resource> {
        Resource::ALL.into_iter().find(|r| r.attribute() == name)
    }

    /// The `weft::host::Requirements` builder method that sets it.
    pub(crate) fn requirement_method(self) -> &'static str {
        self.attribute()
    }

    /// Words for messages: "LSA barriers".
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Resource::LsaBarrier => "LSA barriers",
            Resource::HybridBarrier => "hybrid (world) barriers",
            Resource::RailGinBarrier => "rail GIN barriers",
            Resource::WorldGinBarrier => "world GIN barriers",
            Resource::GinSignal => "GIN signals",
            Resource::GinCounter => "GIN counters",
            Resource::GinContext => "GIN contexts",
            Resource::LlA2aBlock => "LL all-to-all blocks",
            Resource::LlA2aSlot => "LL all-to-all slots",
        }
    }
}

/// A set of capabilities.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Caps {
    pub(crate) lsa: bool,
    pub(crate) gin: bool,
    pub(crate) multimem: bool,
}

impl Caps {
    pub(crate) const NONE: Caps = Caps { lsa: false, gin: false, multimem: false };
    pub(crate) const LSA: Caps = Caps { lsa: true, gin: false, multimem: false };
    pub(crate) const GIN: Caps = Caps { lsa: false, gin: true, multimem: false };
    pub(crate) const MULTIMEM: Caps = Caps { lsa: false, gin: false, multimem: true };
    pub(crate) const LSA_GIN: Caps = Caps { lsa: true, gin: true, multimem: false };
    pub(crate) const LSA_MULTIMEM: Caps = Caps { lsa: true, gin: false, multimem: true };

    pub(crate) fn union(self, other: Caps) -> Caps {
        Caps { lsa: self.lsa || other.lsa, gin: self.gin || other.gin, multimem: self.multimem || other.multimem }
    }

    /// The capability set marker types of `weft_device::caps`.
    pub(crate) fn from_marker(name: &str) -> Option<Caps> {
        Some(match name {
            "Lsa" => Caps::LSA,
            "Gin" | "GinCap" => Caps::GIN,
            "Multimem" => Caps::MULTIMEM,
            "LsaGin" => Caps::LSA_GIN,
            "LsaMultimem" => Caps::LSA_MULTIMEM,
            "LsaGinMultimem" => Caps { lsa: true, gin: true, multimem: true },
            _ => return None,
        })
    }

    /// The `Has*` bound traits.
    pub(crate) fn from_bound(name: &str) -> Option<Caps> {
        Some(match name {
            "HasLsa" => Caps::LSA,
            "HasGin" => Caps::GIN,
            "HasMultimem" => Caps::MULTIMEM,
            "CapabilitySet" => Caps::NONE,
            _ => return None,
        })
    }

    pub(crate) fn bounds(self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.lsa {
            out.push("HasLsa");
        }
        if self.gin {
            out.push("HasGin");
        }
        if self.multimem {
            out.push("HasMultimem");
        }
        out
    }

    fn bits(self) -> u32 {
        u32::from(self.lsa) | (u32::from(self.gin) << 1) | (u32::from(self.multimem) << 2)
    }
}

/// How a resource index relates to the launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IndexValue {
    Const(u64),
    /// `block_idx_x()` (0), `_y()` (1), `_z()` (2).
    Block(u8),
    Unknown,
}

/// What one resource needs: at least `constant`, and at least the grid size along each axis in `grid_axes`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ResourceUse {
    pub(crate) constant: u32,
    pub(crate) grid_axes: u8,
}

/// Everything the generated constants say about a body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    pub(crate) caps: Caps,
    pub(crate) resources: [ResourceUse; 9],
    /// Some access is checked on the device (docs/macro.md, "Bounds"): the kernel's `launch` runs the form with
    /// checks. Encoded as bit 3 of the capability word, which merging ORs.
    pub(crate) device_checks: bool,
    /// The body (or a device fn it calls) runs `gemm_block`, whose shared-memory stages are laid out for blocks of
    /// exactly 256 threads: the launcher refuses any other block (bit 4 of the capability word).
    pub(crate) block_of_256: bool,
    /// The body (or a device fn it calls) opens `gemm_tiles`, which needs blocks of exactly 384 threads and its
    /// dynamic shared memory: the launcher refuses others (bit 5 of the capability word).
    pub(crate) gemm_tiles: bool,
    /// The body (or a device fn it calls) has a block-wide collective (`sync_threads()`, a `Cta` session, …): a
    /// caller must call it where every thread of the block does (bit 6 of the capability word; docs/macro.md,
    /// "Collectives").
    pub(crate) block_collective: bool,
    /// The body (or a device fn it calls) has a warp-wide collective (`sync_warp()`, shuffles, `mma`, a `Warp`
    /// session, …): a caller must call it where every thread of the warp does, and the launcher refuses blocks of
    /// partial warps (bit 7 of the capability word).
    pub(crate) warp_collective: bool,
}

/// The bit of the capability word that says some access is checked on the device.
pub(crate) const DEVICE_CHECKS_BIT: u32 = 1 << 3;
/// The bit of the capability word that says the kernel needs blocks of exactly 256 threads (`gemm_block`).
pub(crate) const BLOCK_OF_256_BIT: u32 = 1 << 4;
/// The bit of the capability word that says the kernel opens `gemm_tiles` (blocks of 384, its shared memory).
pub(crate) const GEMM_TILES_BIT: u32 = 1 << 5;

/// The bit of the capability word that says the body has a block-wide collective.
pub(crate) const BLOCK_COLLECTIVE_BIT: u32 = 1 << 6;
/// The bit of the capability word that says the body has a warp-wide collective.
pub(crate) const WARP_COLLECTIVE_BIT: u32 = 1 << 7;

/// Version tag of [`Usage::encode`]'s layout, first word of every encoded usage.
pub(crate) const USAGE_FORMAT: u32 = 1;
/// Words in an encoded usage: format, capability bits, then (constant, grid axes) per resource.
pub(crate) const USAGE_WORDS: usize = 2 + 2 * Resource::ALL.len();

impl Usage {
    pub(crate) fn add_index(&mut self, r: Resource, index: IndexValue) {
        let slot = &mut self.resources[r.index()];
        match index {
            IndexValue::Const(n) => {
                slot.constant = slot.constant.max(u32::try_from(n.saturating_add(1)).unwrap_or(u32::MAX))
            }
            IndexValue::Block(axis) => slot.grid_axes |= 1 << axis,
            IndexValue::Unknown => {}
        }
    }

    pub(crate) fn add_count(&mut self, r: Resource, count: u32) {
        let slot = &mut self.resources[r.index()];
        slot.constant = slot.constant.max(count);
    }

    pub(crate) fn add_grid(&mut self, r: Resource) {
        self.resources[r.index()].grid_axes |= 1;
    }

    /// The words of the `__WEFT_USAGE` constant (a private format between expansions of this macro).
    pub(crate) fn encode(&self) -> Vec<u32> {
        let checks = if self.device_checks { DEVICE_CHECKS_BIT } else { 0 };
        let block = if self.block_of_256 { BLOCK_OF_256_BIT } else { 0 };
        let tiles = if self.gemm_tiles { GEMM_TILES_BIT } else { 0 };
        let block_collective = if self.block_collective { BLOCK_COLLECTIVE_BIT } else { 0 };
        let warp_collective = if self.warp_collective { WARP_COLLECTIVE_BIT } else { 0 };
        let mut words =
            vec![USAGE_FORMAT, self.caps.bits() | checks | block | tiles | block_collective | warp_collective];
        for r in &self.resources {
            words.push(r.constant);
            words.push(u32::from(r.grid_axes));
        }
        words
    }
}

/// What using one vocabulary item implies.
pub(crate) struct Rule {
    pub(crate) caps: Caps,
    /// The resource it indexes and which argument is the index.
    pub(crate) resource: Option<(Resource, usize)>,
}

/// Method calls (any receiver: the names are unique to the vocabulary type that has them).
pub(crate) fn method_rule(name: &str, arity: usize) -> Option<Rule> {
    use Resource::*;
    let rule = |caps, resource| Some(Rule { caps, resource });
    match (name, arity) {
        ("lsa_barrier", _) => rule(Caps::LSA, Some((LsaBarrier, 1))),
        ("lsa_multimem_barrier", _) => rule(Caps::LSA_MULTIMEM, Some((LsaBarrier, 1))),
        // `dev.lsa()` is the LSA team (no capability); `w.lsa(peer)` reads a peer's memory.
        ("lsa", 1) | ("peer", 2) => rule(Caps::LSA, None),
        ("lsa_reduce_sum" | "lsa_copy" | "lsa_reduce_sum_copy", _) => rule(Caps::LSA, None),
        ("ll_a2a", 4) => rule(Caps::LSA, Some((LlA2aBlock, 2))),
        ("send", 3) => rule(Caps::NONE, Some((LlA2aSlot, 1))),
        ("broadcast", 2) | ("recv", 1) => rule(Caps::NONE, Some((LlA2aSlot, 0))),
        ("gin", 1) => rule(Caps::GIN, Some((GinContext, 0))),
        ("read_signal" | "reset_signal" | "signal_shadow" | "increase_signal_shadow", _) => {
            rule(Caps::GIN, Some((GinSignal, 0)))
        }
        ("wait_signal" | "wait_signal_timeout" | "wait_signal_meet_shadow", _) => rule(Caps::GIN, Some((GinSignal, 1))),
        ("read_counter" | "reset_counter", _) => rule(Caps::GIN, Some((GinCounter, 0))),
        ("wait_counter" | "wait_counter_timeout", _) => rule(Caps::GIN, Some((GinCounter, 1))),
        (
            "put" | "put_value" | "signal" | "get" | "flush" | "read_va_signal" | "wait_va_signal" | "reset_va_signal",
            _,
        ) => rule(Caps::GIN, None),
        ("rail_barrier", _) => rule(Caps::GIN, Some((RailGinBarrier, 1))),
        ("world_barrier", _) => rule(Caps::GIN, Some((WorldGinBarrier, 1))),
        ("hybrid_barrier", _) => rule(Caps::LSA_GIN, Some((HybridBarrier, 2))),
        ("lsa_multimem" | "multimem_reduce_sum" | "multimem_copy" | "multimem_reduce_sum_copy", _) => {
            rule(Caps::MULTIMEM, None)
        }
        _ => None,
    }
}

/// Constructor calls of the GIN actions (`SignalInc(s)`, `CounterInc(c)`).
pub(crate) fn constructor_rule(name: &str) -> Option<Rule> {
    use Resource::*;
    let rule = |caps, resource| Some(Rule { caps, resource });
    match name {
        "SignalInc" | "SignalAdd" | "StrongSignalInc" | "WeakSignalInc" | "StrongSignalAdd" | "WeakSignalAdd" => {
            rule(Caps::GIN, Some((GinSignal, 0)))
        }
        "CounterInc" | "WeakCounterInc" => rule(Caps::GIN, Some((GinCounter, 0))),
        "VaSignalInc" | "VaSignalAdd" | "StrongVaSignalInc" | "WeakVaSignalInc" | "StrongVaSignalAdd"
        | "WeakVaSignalAdd" => rule(Caps::GIN, None),
        _ => None,
    }
}
