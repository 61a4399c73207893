//! Which all-reduce protocol to run for a message size and rank count — and which path the tensor-parallel GEMMs
//! take ([`AgGemmTable`], [`GemmRsTable`]: same rule syntax, the size being the GEMM's m·n·k, overridden by
//! `WEFT_AG_GEMM_PATHS` and `WEFT_GEMM_RS_PATHS`) — as tables of rules the user can override.
//!
//! Fusing is not always faster, and which fused algorithm wins depends on the size and the rank count (the barrier
//! cost of a one-shot, the extra pass of a two-shot, the bandwidth of reading every peer). So the examples and the
//! benchmark ask a [`Table`] instead of hard-coding a guess:
//!
//! ```text
//! one_shot@1, one_shot<=4M@2, one_shot<=1M@3-4, one_shot<=256K, two_shot
//! ```
//!
//! Rules are tried in order and the first that matches wins: `protocol`, then optionally `<=size` (bytes per rank,
//! with `K`/`M`/`G` suffixes, powers of 1024) and `@ranks` (`n` or `a-b`). The last rule must match everything (no
//! condition), so every size and rank count gets an answer. `WEFT_ALLREDUCE_PROTOCOLS` replaces the default table
//! ([`Table::from_env`]); a malformed one is an error that names the rule, never a silent fallback.
//!
//! The default table ([`Table::DEFAULT`]) comes from the fused benchmark on the shared-GPU proxy (one H200, NCCL
//! 2.30.7, 2026-12-03, quick mode; bench/RESULTS.md): all-reduce + bias + residual, one-shot against two-shot at 64 KB,
//! 4 MB and 64 MB per rank. The one-shot wins at every size with one rank, up to 4 MB at two (a tie there), at 64 KB
//! at four and eight (not at 4 MB); example 03 at eight ranks (same day, eager, every protocol interleaved) has the
//! one-shot ahead at 128 KB and 256 KB (50.5 against 56.1 µs, 46.8 against 56.9) and the two-shot from 2 MB (67.4
//! against 95.4). Thresholds between measured points are interpolations. The barrier-free Lamport one-shot and NCCL
//! with a separate epilogue are selectable but in no default rule: the Lamport kernel lost to the one-shot at every
//! size example 03 measured (128 KB and up; the small sizes it is for are the benchmark's next run), and NCCL +
//! epilogue lost to a fused kernel at every measured point.

use std::fmt;

use weft::host::jit::GemmMainloop;
use weft::host::Error;

/// An all-reduce (+ epilogue) protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// One shot without a barrier: data carries its own "written" mark (kernels/allreduce_lamport.rs).
    Lamport,
    /// Every rank reads every peer's data between two LSA barriers (kernels/allreduce_epilogue.rs).
    OneShot,
    /// Reduce-scatter with the epilogue, a barrier, all-gather (kernels/allreduce_epilogue.rs).
    TwoShot,
    /// `ncclAllReduce`, then the epilogue as a separate kernel: the fallback where fusing loses.
    Nccl,
}

impl Protocol {
    /// The name rules use.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Lamport => "lamport",
            Protocol::OneShot => "one_shot",
            Protocol::TwoShot => "two_shot",
            Protocol::Nccl => "nccl",
        }
    }
}

/// What a [`Table`] chooses between: a closed set of named paths.
pub trait Choice: Copy + Eq + fmt::Debug + 'static {
    /// Every choice, in the order error messages list them.
    const ALL: &'static [Self];
    /// What the rules' size measures, for error messages ("bytes per rank").
    const SIZE: &'static str;
    /// The environment variable whose rules replace [`DEFAULT`](Self::DEFAULT).
    const ENV: &'static str;
    /// The measured rules.
    const DEFAULT: &'static str;
    /// The measured rules where the persistent `gemm_tiles` loop runs `cp.async` + `mma.sync` (GPUs without
    /// `wgmma`, or `WEFT_GEMM_MAINLOOP=mma_sync`), if they differ: that loop is about 0.55× cuBLAS where the `wgmma`
    /// one is 0.9×, so the paths built on it win elsewhere ([`Rules::from_env_on`]).
    const DEFAULT_MMA_SYNC: &'static str = Self::DEFAULT;
    /// The name rules use.
    fn name(self) -> &'static str;
}

impl Choice for Protocol {
    const ALL: &'static [Protocol] = &[Protocol::Lamport, Protocol::OneShot, Protocol::TwoShot, Protocol::Nccl];
    const SIZE: &'static str = "bytes per rank";
    const ENV: &'static str = "WEFT_ALLREDUCE_PROTOCOLS";
    /// Module docs say where they come from.
    const DEFAULT: &'static str = "one_shot@1, one_shot<=4M@2, one_shot<=1M@3-4, one_shot<=256K, two_shot";
    fn name(self) -> &'static str {
        Protocol::name(self)
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The tensor-parallel all-gather + GEMM (example 08, kernels/gemm_tp.rs): which way to run it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AllGatherGemm {
    /// One kernel: each GEMM tile reads its rows from the owner's window over LSA (`allgather_gemm`).
    Fused,
    /// A weft kernel gathers chunk by chunk and raises flags; cuBLAS GEMMs on another stream wait for their chunks
    /// (`allgather_signal` + `stream_wait_at_least`). Needs cuBLAS: without it, [`Fused`](Self::Fused) runs.
    Decoupled,
    /// One kernel on the persistent `gemm_tiles` loop: its producer reads each tile's rows from the owner's window
    /// (`allgather_gemm_tiles`: with TMA through one tensor map per rank, or with `cp.async` in the `mma.sync`
    /// loop). Needs a GPU that runs the loop (`gemm_tiles_config`), `n` a multiple of 256, `k` of 64, and NCCL 2.29+
    /// with several ranks: where it cannot run, the next matching rule's path runs ([`Rules::pick_where`]).
    FusedTiles,
    /// `ncclAllGather`, then one GEMM (cuBLAS where available, else weft's `gemm_tiles`): the fallback.
    Nccl,
}

impl Choice for AllGatherGemm {
    const ALL: &'static [AllGatherGemm] =
        &[AllGatherGemm::Fused, AllGatherGemm::Decoupled, AllGatherGemm::FusedTiles, AllGatherGemm::Nccl];
    const SIZE: &'static str = "multiply-adds m x n x k of the whole GEMM (m: every rank's rows)";
    const ENV: &'static str = "WEFT_AG_GEMM_PATHS";
    /// From example 08's runs (bench/RESULTS.md): on 2026-12-03 (H200, `mma.sync`) the fused kernel won the small
    /// shapes (m·n·k up to 128M measured: 1.1–1.5× NCCL + cuBLAS at 1–2 ranks, up to 5.9× the decoupled path at 8).
    /// On 2026-12-05 (H100, the `wgmma` loops; 1 rank on NCCL 2.28.9, 2–8 sharing the GPU on 2.30.7) the fused
    /// `gemm_tiles` kernel won at 17G at every rank count (1.26×, 1.30×, 1.56× and 1.33× the best other path at 1,
    /// 2, 4 and 8 ranks) and at 69G at 1 and 2 ranks (1.12×, 1.13×); at 69G the decoupled path stayed ahead at 4
    /// ranks (885 against 931 µs) and NCCL + cuBLAS at 8 (1306 against 2176 µs). The thresholds between 128M and
    /// 17G, and between 17G and 69G, are interpolations.
    const DEFAULT: &'static str = "fused<=256M, fused_tiles<=32G, fused_tiles@1-2, decoupled@2-4, nccl";
    /// From example 08 on the `mma.sync` loop (2026-12-06, H100, one run per rank count): the fused `gemm_tiles`
    /// kernel lost to NCCL + cuBLAS at 1 rank (0.78× at 17G, 0.71× at 69G) and at 8 (0.84× at 17G), and at 2 and 4
    /// ranks the decoupled path beat it (at 2 ranks 225 against 267 µs at 17G, 537 against 715 at 69G; at 4 ranks
    /// 409 against 449 and 889 against 1422); NCCL + cuBLAS stayed ahead at 8 ranks.
    const DEFAULT_MMA_SYNC: &'static str = "fused<=256M, decoupled@2-4, nccl";
    fn name(self) -> &'static str {
        match self {
            AllGatherGemm::Fused => "fused",
            AllGatherGemm::Decoupled => "decoupled",
            AllGatherGemm::FusedTiles => "fused_tiles",
            AllGatherGemm::Nccl => "nccl",
        }
    }
}

/// The tensor-parallel GEMM + reduce-scatter (example 09, kernels/gemm_tp.rs): which way to run it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GemmReduceScatter {
    /// One kernel: each partial tile goes from registers into its owner's window; owners sum (`gemm_reduce_scatter`).
    Fused,
    /// One kernel on the persistent `gemm_tiles` loop: each partial 128 × 256 tile stored whole into its owner's bf16
    /// slot, the owner's sum 16 bytes at a time (`gemm_tiles_reduce_scatter`). Needs a GPU that runs the loop
    /// (`gemm_tiles_config`), `n` a multiple of 256 and `k` of 64: where it cannot run, the next matching rule's
    /// path runs ([`Rules::pick_where`]).
    FusedTiles,
    /// One GEMM (cuBLAS where available, else weft's `gemm_tiles`), then `ncclReduceScatter`: the fallback.
    Nccl,
}

impl Choice for GemmReduceScatter {
    const ALL: &'static [GemmReduceScatter] =
        &[GemmReduceScatter::Fused, GemmReduceScatter::FusedTiles, GemmReduceScatter::Nccl];
    const SIZE: &'static str = "multiply-adds m x n x k of this rank's GEMM";
    const ENV: &'static str = "WEFT_GEMM_RS_PATHS";
    /// From example 09's runs (bench/RESULTS.md): the `gemm_block` kernel lost at every shape and rank count
    /// (2026-12-03: 0.46–0.96× the same GEMM + `ncclReduceScatter`, 0.24–0.94× cuBLAS + it). The `gemm_tiles` one
    /// (2026-12-05, H100, `wgmma`; 2–8 ranks sharing the GPU on NCCL 2.30.7) wins at 17G and 69G multiply-adds per
    /// rank at 2 ranks (1.35×, 1.73× cuBLAS + `ncclReduceScatter`) and 4 (1.08×, 1.17×), and loses at 1 (0.66×)
    /// and 8 (0.78–0.81×) and at 67M (0.66–0.98×). The threshold between 67M and 17G is an interpolation.
    const DEFAULT: &'static str = "nccl<=1G, fused_tiles@2-4, nccl";
    /// From example 09 on the `mma.sync` loop (2026-12-06, H100, one run per rank count): the `gemm_tiles` kernel
    /// still wins at 2 ranks (1.16× at 8.6G, 1.41× at 34G multiply-adds per rank) but not at 4 (0.91× and 1.01×),
    /// nor at 1 or 8.
    const DEFAULT_MMA_SYNC: &'static str = "nccl<=1G, fused_tiles@2, nccl";
    fn name(self) -> &'static str {
        match self {
            GemmReduceScatter::Fused => "fused",
            GemmReduceScatter::FusedTiles => "fused_tiles",
            GemmReduceScatter::Nccl => "nccl",
        }
    }
}

/// One rule: `protocol` for sizes up to `up_to` (bytes per rank for the all-reduce, [`Choice::SIZE`]), at rank
/// counts in `ranks`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule<P = Protocol> {
    /// What to run.
    pub protocol: P,
    /// The largest size the rule covers; `None`: any.
    pub up_to: Option<usize>,
    /// The rank counts the rule covers (inclusive); `None`: any.
    pub ranks: Option<(usize, usize)>,
}

impl<P> Rule<P> {
    fn matches(&self, bytes: usize, nranks: usize) -> bool {
        self.up_to.is_none_or(|most| bytes <= most) && self.ranks.is_none_or(|(lo, hi)| (lo..=hi).contains(&nranks))
    }
}

/// An ordered list of rules, the last one unconditional (module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules<P> {
    rules: Vec<Rule<P>>,
    /// The last rule's choice (parsing guarantees there is one, unconditional).
    otherwise: P,
}

/// The all-reduce protocols' rules.
pub type Table = Rules<Protocol>;
/// The all-gather + GEMM paths' rules.
pub type AgGemmTable = Rules<AllGatherGemm>;
/// The GEMM + reduce-scatter paths' rules.
pub type GemmRsTable = Rules<GemmReduceScatter>;

/// The environment variable that replaces the all-reduce protocols' default table.
pub const ENV: &str = Protocol::ENV;

impl<P: Choice> Rules<P> {
    /// The measured rules ([`Choice::DEFAULT`]; module docs and each choice's say where they come from).
    pub const DEFAULT: &'static str = P::DEFAULT;
    /// The environment variable that replaces them ([`Choice::ENV`]).
    pub const ENV: &'static str = P::ENV;

    /// The measured rules where the `gemm_tiles` loop runs `mma.sync` ([`Choice::DEFAULT_MMA_SYNC`]).
    pub const DEFAULT_MMA_SYNC: &'static str = P::DEFAULT_MMA_SYNC;

    /// [`DEFAULT`](Self::DEFAULT), parsed.
    pub fn measured() -> Rules<P> {
        Rules::parse(P::DEFAULT).expect("the default rules parse")
    }

    /// The measured rules for the GEMM mainloop a GPU runs ([`weft::host::jit::gemm_mainloop_on`]): `wgmma`'s
    /// [`DEFAULT`](Self::DEFAULT) or `mma.sync`'s [`DEFAULT_MMA_SYNC`](Self::DEFAULT_MMA_SYNC), parsed.
    pub fn measured_on(mainloop: GemmMainloop) -> Rules<P> {
        let text = match mainloop {
            GemmMainloop::Wgmma => P::DEFAULT,
            GemmMainloop::MmaSync => P::DEFAULT_MMA_SYNC,
        };
        Rules::parse(text).expect("the default rules parse")
    }

    /// The rules in [`ENV`](Self::ENV) if set (an error naming the bad rule if they do not parse), else
    /// [`DEFAULT`](Self::DEFAULT).
    pub fn from_env() -> Result<Rules<P>, Error> {
        Rules::from_env_on(GemmMainloop::Wgmma)
    }

    /// The rules in [`ENV`](Self::ENV) if set (an error naming the bad rule if they do not parse), else the measured
    /// rules for `mainloop` ([`measured_on`](Self::measured_on)).
    pub fn from_env_on(mainloop: GemmMainloop) -> Result<Rules<P>, Error> {
        match std::env::var(P::ENV) {
            Ok(text) => Rules::parse(&text).map_err(|problem| Error::InvalidArgument { argument: P::ENV, problem }),
            Err(_) => Ok(Rules::measured_on(mainloop)),
        }
    }

    /// Parses comma-separated rules (module docs); the error says which rule and how to write it.
    pub fn parse(text: &str) -> Result<Rules<P>, String> {
        let rules = text
            .split(',')
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(parse_rule::<P>)
            .collect::<Result<Vec<_>, String>>()?;
        match rules.last() {
            None => Err(format!("no rules: give at least one of {}, e.g. `{}`", names::<P>(), P::ALL[0].name())),
            Some(last) if last.up_to.is_some() || last.ranks.is_some() => Err(format!(
                "the last rule `{}` has a condition, so some sizes or rank counts would get no choice: end with \
                 an unconditional rule, e.g. `, {}`",
                show(last),
                last.protocol.name()
            )),
            Some(last) => Ok(Rules { otherwise: last.protocol, rules }),
        }
    }

    /// The choice for `size` at `nranks` ranks: the first matching rule's.
    pub fn pick(&self, size: usize, nranks: usize) -> P {
        self.pick_where(size, nranks, |_| true)
    }

    /// The choice for `size` at `nranks` ranks among those that `runs` here: the first matching rule whose choice
    /// runs, so a rule for a path this GPU, this NCCL or this shape cannot take falls through to the next one (the
    /// last rule is taken whatever `runs` says: keep it a path that always runs, such as `nccl`).
    pub fn pick_where(&self, size: usize, nranks: usize, runs: impl Fn(P) -> bool) -> P {
        self.rules
            .iter()
            .find(|rule| rule.matches(size, nranks) && runs(rule.protocol))
            .map_or(self.otherwise, |rule| rule.protocol)
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[Rule<P>] {
        &self.rules
    }
}

impl<P: Choice> fmt::Display for Rules<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rules: Vec<String> = self.rules.iter().map(show).collect();
        f.write_str(&rules.join(", "))
    }
}

fn show<P: Choice>(rule: &Rule<P>) -> String {
    let mut text = rule.protocol.name().to_string();
    if let Some(most) = rule.up_to {
        text.push_str(&format!("<={}", size(most)));
    }
    match rule.ranks {
        Some((lo, hi)) if lo == hi => text.push_str(&format!("@{lo}")),
        Some((lo, hi)) => text.push_str(&format!("@{lo}-{hi}")),
        None => {}
    }
    text
}

fn size(bytes: usize) -> String {
    for (unit, shift) in [("G", 30), ("M", 20), ("K", 10)] {
        if bytes >= 1 << shift && bytes % (1 << shift) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

fn names<P: Choice>() -> String {
    P::ALL.iter().map(|p| p.name()).collect::<Vec<_>>().join(", ")
}

fn parse_rule<P: Choice>(text: &str) -> Result<Rule<P>, String> {
    let bad = |why: &str| {
        format!(
            "rule `{text}`: {why}; write `choice[<=size][@ranks]`, choice one of {}; size ({}) with an optional K, M \
             or G; ranks `n` or `a-b`",
            names::<P>(),
            P::SIZE
        )
    };
    let (head, ranks) = match text.split_once('@') {
        Some((head, ranks)) => (head.trim(), Some(parse_ranks(ranks.trim()).ok_or_else(|| bad("bad rank count"))?)),
        None => (text, None),
    };
    let (name, up_to) = match head.split_once("<=") {
        Some((name, most)) => (name.trim(), Some(parse_size(most.trim()).ok_or_else(|| bad("bad size"))?)),
        None => (head.trim(), None),
    };
    let protocol =
        P::ALL.iter().copied().find(|p| p.name() == name).ok_or_else(|| bad(&format!("unknown choice `{name}`")))?;
    Ok(Rule { protocol, up_to, ranks })
}

fn parse_ranks(text: &str) -> Option<(usize, usize)> {
    let (lo, hi) = match text.split_once('-') {
        Some((lo, hi)) => (lo.trim().parse().ok()?, hi.trim().parse().ok()?),
        None => {
            let n = text.parse().ok()?;
            (n, n)
        }
    };
    (1..=hi).contains(&lo).then_some((lo, hi))
}

fn parse_size(text: &str) -> Option<usize> {
    let (digits, shift) = match text.chars().last()? {
        'K' | 'k' => (&text[..text.len() - 1], 10),
        'M' | 'm' => (&text[..text.len() - 1], 20),
        'G' | 'g' => (&text[..text.len() - 1], 30),
        _ => (text, 0),
    };
    digits.trim().parse::<usize>().ok()?.checked_mul(1 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_table_follows_the_measurements() {
        let table = Table::measured();
        assert_eq!(table.to_string(), Table::DEFAULT);
        // One rank: one-shot at any size.
        assert_eq!(table.pick(64 << 20, 1), Protocol::OneShot);
        // Two ranks: one-shot up to 4 MB, two-shot above.
        assert_eq!(table.pick(4 << 20, 2), Protocol::OneShot);
        assert_eq!(table.pick((4 << 20) + 1, 2), Protocol::TwoShot);
        // Four ranks: one-shot up to 1 MB; eight: up to 256 KB (example 03 at 8 ranks).
        assert_eq!(table.pick(1 << 20, 4), Protocol::OneShot);
        assert_eq!(table.pick(4 << 20, 4), Protocol::TwoShot);
        assert_eq!(table.pick(256 << 10, 8), Protocol::OneShot);
        assert_eq!(table.pick((256 << 10) + 1, 8), Protocol::TwoShot);
        assert_eq!(table.pick(2 << 20, 8), Protocol::TwoShot);
    }

    #[test]
    fn rules_are_tried_in_order_and_round_trip() {
        let table = Table::parse(" lamport<=64K@2-8 ,nccl@1, one_shot<=1m,two_shot").unwrap();
        assert_eq!(table.to_string(), "lamport<=64K@2-8, nccl@1, one_shot<=1M, two_shot");
        assert_eq!(table.pick(4096, 4), Protocol::Lamport);
        assert_eq!(table.pick(4096, 1), Protocol::Nccl);
        assert_eq!(table.pick(1 << 20, 16), Protocol::OneShot);
        assert_eq!(table.pick(2 << 20, 16), Protocol::TwoShot);
        assert_eq!(Table::parse(&table.to_string()).unwrap(), table);
        assert_eq!(Table::parse("nccl").unwrap().pick(usize::MAX, usize::MAX), Protocol::Nccl);
    }

    #[test]
    fn the_gemm_tables_follow_example_08_and_09() {
        let ag = AgGemmTable::parse(AgGemmTable::DEFAULT).unwrap();
        assert_eq!(ag.to_string(), AgGemmTable::DEFAULT);
        let (small, mid, large) = (2048 * 128 * 512, 4096 * 1024 * 4096, 8192 * 2048 * 4096);
        assert_eq!(ag.pick(small, 8), AllGatherGemm::Fused);
        for ranks in [1, 2, 4, 8] {
            assert_eq!(ag.pick(mid, ranks), AllGatherGemm::FusedTiles, "{ranks} ranks");
        }
        assert_eq!(ag.pick(large, 1), AllGatherGemm::FusedTiles);
        assert_eq!(ag.pick(large, 2), AllGatherGemm::FusedTiles);
        assert_eq!(ag.pick(large, 4), AllGatherGemm::Decoupled);
        assert_eq!(ag.pick(large, 8), AllGatherGemm::Nccl);
        // Where the gemm_tiles kernel cannot run, the next matching rule's path does.
        let no_tiles = |p| p != AllGatherGemm::FusedTiles;
        assert_eq!(ag.pick_where(mid, 2, no_tiles), AllGatherGemm::Decoupled);
        assert_eq!(ag.pick_where(large, 1, no_tiles), AllGatherGemm::Nccl);
        assert_eq!(ag.pick_where(small, 2, no_tiles), AllGatherGemm::Fused);
        let rs = GemmRsTable::parse(GemmRsTable::DEFAULT).unwrap();
        assert_eq!(rs.to_string(), GemmRsTable::DEFAULT);
        assert_eq!(rs.pick(1, 1), GemmReduceScatter::Nccl);
        assert_eq!(rs.pick(4096 * 4096 * 1024, 2), GemmReduceScatter::FusedTiles);
        assert_eq!(rs.pick(8192 * 8192 * 1024, 4), GemmReduceScatter::FusedTiles);
        assert_eq!(rs.pick(8192 * 8192 * 1024, 1), GemmReduceScatter::Nccl);
        assert_eq!(rs.pick(8192 * 8192 * 1024, 8), GemmReduceScatter::Nccl);
        assert_eq!(rs.pick(1024 * 256 * 256, 2), GemmReduceScatter::Nccl);
        assert_eq!(
            rs.pick_where(8192 * 8192 * 1024, 2, |p| p != GemmReduceScatter::FusedTiles),
            GemmReduceScatter::Nccl
        );
        // On the mma.sync loop (about 0.55x cuBLAS) the same shapes go elsewhere (example 08 and 09, 2026-12-06).
        let ag = AgGemmTable::measured_on(GemmMainloop::MmaSync);
        assert_eq!(ag.to_string(), AgGemmTable::DEFAULT_MMA_SYNC);
        assert_eq!(AgGemmTable::measured_on(GemmMainloop::Wgmma).to_string(), AgGemmTable::DEFAULT);
        assert_eq!(ag.pick(small, 8), AllGatherGemm::Fused);
        for (ranks, path) in [
            (1, AllGatherGemm::Nccl),
            (2, AllGatherGemm::Decoupled),
            (4, AllGatherGemm::Decoupled),
            (8, AllGatherGemm::Nccl),
        ] {
            assert_eq!(ag.pick(mid, ranks), path, "{ranks} ranks");
            assert_eq!(ag.pick(large, ranks), path, "{ranks} ranks");
        }
        let rs = GemmRsTable::measured_on(GemmMainloop::MmaSync);
        assert_eq!(rs.to_string(), GemmRsTable::DEFAULT_MMA_SYNC);
        assert_eq!(rs.pick(2048 * 4096 * 1024, 2), GemmReduceScatter::FusedTiles);
        assert_eq!(rs.pick(4096 * 8192 * 1024, 2), GemmReduceScatter::FusedTiles);
        for ranks in [1, 4, 8] {
            assert_eq!(rs.pick(4096 * 8192 * 1024, ranks), GemmReduceScatter::Nccl, "{ranks} ranks");
        }
        // The all-reduce protocols do not depend on the mainloop.
        assert_eq!(Table::DEFAULT_MMA_SYNC, Table::DEFAULT);
        let forced = GemmRsTable::parse("fused<=1G@2-8, nccl").unwrap();
        assert_eq!(forced.pick(1 << 30, 8), GemmReduceScatter::Fused);
        assert_eq!(forced.pick(1 << 30, 1), GemmReduceScatter::Nccl);
        // The last rule stands even where `runs` refuses it.
        assert_eq!(AgGemmTable::parse("fused_tiles").unwrap().pick_where(1, 1, |_| false), AllGatherGemm::FusedTiles);
        // A protocol of another table is not a choice here, and the message lists the ones that are.
        let error = AgGemmTable::parse("one_shot, nccl").unwrap_err();
        assert!(
            error.contains("unknown choice `one_shot`") && error.contains("fused, decoupled, fused_tiles, nccl"),
            "{error}"
        );
    }

    #[test]
    fn bad_tables_name_the_rule_and_the_fix() {
        for (text, says) in [
            ("", "no rules"),
            ("one_shot<=1M", "end with an unconditional rule"),
            ("fast<=1M, two_shot", "unknown choice `fast`"),
            ("one_shot<=lots, two_shot", "rule `one_shot<=lots`: bad size"),
            ("one_shot@0, two_shot", "bad rank count"),
            ("one_shot@4-2, two_shot", "bad rank count"),
            ("one_shot<=99999999999G, two_shot", "bad size"),
        ] {
            let error = Table::parse(text).unwrap_err();
            assert!(error.contains(says), "{text:?}: {error}");
        }
    }
}
