//! Which all-reduce protocol to run for a message size and rank count: a table of rules the user can override.
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

    fn parse(name: &str) -> Option<Protocol> {
        [Protocol::Lamport, Protocol::OneShot, Protocol::TwoShot, Protocol::Nccl].into_iter().find(|p| p.name() == name)
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One rule: `protocol` for messages up to `up_to` bytes per rank, at rank counts in `ranks`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// What to run.
    pub protocol: Protocol,
    /// The largest message (bytes per rank) the rule covers; `None`: any.
    pub up_to: Option<usize>,
    /// The rank counts the rule covers (inclusive); `None`: any.
    pub ranks: Option<(usize, usize)>,
}

impl Rule {
    fn matches(&self, bytes: usize, nranks: usize) -> bool {
        self.up_to.is_none_or(|most| bytes <= most) && self.ranks.is_none_or(|(lo, hi)| (lo..=hi).contains(&nranks))
    }
}

/// An ordered list of rules, the last one unconditional (module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    rules: Vec<Rule>,
}

/// The environment variable that replaces the default table.
pub const ENV: &str = "WEFT_ALLREDUCE_PROTOCOLS";

impl Table {
    /// The default rules (module docs say where they come from).
    pub const DEFAULT: &'static str = "one_shot@1, one_shot<=4M@2, one_shot<=1M@3-4, one_shot<=256K, two_shot";

    /// [`Table::DEFAULT`].
    pub fn measured() -> Table {
        Table::parse(Table::DEFAULT).expect("the default table parses")
    }

    /// `WEFT_ALLREDUCE_PROTOCOLS` if set (an error naming the bad rule if it does not parse), else the default.
    pub fn from_env() -> Result<Table, Error> {
        match std::env::var(ENV) {
            Ok(text) => Table::parse(&text).map_err(|problem| Error::InvalidArgument { argument: ENV, problem }),
            Err(_) => Ok(Table::measured()),
        }
    }

    /// Parses comma-separated rules (module docs); the error says which rule and how to write it.
    pub fn parse(text: &str) -> Result<Table, String> {
        let rules = text
            .split(',')
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(parse_rule)
            .collect::<Result<Vec<_>, String>>()?;
        match rules.last() {
            None => Err("no rules: give at least one protocol, e.g. `one_shot<=1M, two_shot`".into()),
            Some(last) if last.up_to.is_some() || last.ranks.is_some() => Err(format!(
                "the last rule `{}` has a condition, so some sizes or rank counts would get no protocol: end with \
                 an unconditional rule, e.g. `, two_shot`",
                show(last)
            )),
            Some(_) => Ok(Table { rules }),
        }
    }

    /// The protocol for `bytes` per rank at `nranks` ranks: the first matching rule's.
    pub fn pick(&self, bytes: usize, nranks: usize) -> Protocol {
        self.rules.iter().find(|rule| rule.matches(bytes, nranks)).map_or(Protocol::Nccl, |rule| rule.protocol)
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rules: Vec<String> = self.rules.iter().map(show).collect();
        f.write_str(&rules.join(", "))
    }
}

fn show(rule: &Rule) -> String {
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

const SYNTAX: &str =
    "write `protocol[<=size][@ranks]`, protocol one of lamport, one_shot, two_shot, nccl; size in bytes \
                      with an optional K, M or G; ranks `n` or `a-b`";

fn parse_rule(text: &str) -> Result<Rule, String> {
    let bad = |why: &str| format!("rule `{text}`: {why}; {SYNTAX}");
    let (head, ranks) = match text.split_once('@') {
        Some((head, ranks)) => (head.trim(), Some(parse_ranks(ranks.trim()).ok_or_else(|| bad("bad rank count"))?)),
        None => (text, None),
    };
    let (name, up_to) = match head.split_once("<=") {
        Some((name, most)) => (name.trim(), Some(parse_size(most.trim()).ok_or_else(|| bad("bad size"))?)),
        None => (head.trim(), None),
    };
    let protocol = Protocol::parse(name).ok_or_else(|| bad(&format!("unknown protocol `{name}`")))?;
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
    fn bad_tables_name_the_rule_and_the_fix() {
        for (text, says) in [
            ("", "no rules"),
            ("one_shot<=1M", "end with an unconditional rule"),
            ("fast<=1M, two_shot", "unknown protocol `fast`"),
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
