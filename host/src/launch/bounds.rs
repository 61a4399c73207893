//! The launch-time half of a kernel's bounds (docs/macro.md, "Bounds"): interval arithmetic that a generated
//! `launch` evaluates on this launch's values, and the checks it makes with the result.
//!
//! For each access it can follow (`out[i]` inside `for i in grid_stride(n)`, `x.lsa(peer).load_pack(p)`, …) the
//! `#[weft::kernel]` macro writes the index as arithmetic over the launch's values: scalar parameters, buffer and
//! window lengths, the communicator's team sizes and ranks, the grid and block sizes and the pack width of the element
//! type. The launcher evaluates it with [`Interval`]s, the set of values each expression can take on any thread,
//! modelling the C++ type's width: an operation that may wrap makes its result [`Interval::top`], and an access whose
//! index may be that large cannot be shown in bounds. The `require_*` functions then compare each access's largest
//! index with its buffer's smallest length and refuse the launch, naming the access, if it could fall outside.
//!
//! Intervals are inclusive and hold `u128`s, so no operation of two 64-bit values overflows here; an *empty*
//! interval is the value of a variable of code that does not run (a loop over an empty range, a branch whose
//! condition cannot hold), and every access with an empty index is vacuously in bounds.

use crate::error::{Error, Result};

/// The values an unsigned integer expression of a kernel can take, on any thread, in a launch; or none (the code
/// computing it does not run). See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval(Option<(u128, u128)>);

/// The largest value of an unsigned C++ integer of `bits` bits.
const fn max_of(bits: u32) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

impl Interval {
    /// No value: the code that would compute it does not run.
    pub const EMPTY: Interval = Interval(None);

    /// Exactly `value`.
    pub const fn point(value: u128) -> Interval {
        Interval(Some((value, value)))
    }

    /// Every value from `lo` to `hi` (inclusive); empty if `lo > hi`.
    pub const fn span(lo: u128, hi: u128) -> Interval {
        if lo > hi {
            Interval::EMPTY
        } else {
            Interval(Some((lo, hi)))
        }
    }

    /// `0 .. count` (exclusive): a thread, block or lane index among `count`.
    pub const fn below_count(count: u128) -> Interval {
        if count == 0 {
            Interval::EMPTY
        } else {
            Interval::span(0, count - 1)
        }
    }

    /// Any value of a `bits`-bit unsigned type.
    pub const fn top(bits: u32) -> Interval {
        Interval::span(0, max_of(bits))
    }

    /// The smallest and largest value, if any.
    pub const fn bounds(self) -> Option<(u128, u128)> {
        self.0
    }

    /// Whether no value is possible.
    pub const fn is_empty(self) -> bool {
        self.0.is_none()
    }

    /// The result of `op` on both operands' bounds, or empty if either is; `top(bits)` if `op` finds it may wrap.
    fn both(
        self,
        other: Interval,
        bits: u32,
        op: impl FnOnce((u128, u128), (u128, u128)) -> Option<(u128, u128)>,
    ) -> Interval {
        match (self.0, other.0) {
            (Some(a), Some(b)) => match op(a, b) {
                Some((lo, hi)) if hi <= max_of(bits) => Interval::span(lo, hi),
                _ => Interval::top(bits),
            },
            _ => Interval::EMPTY,
        }
    }

    /// `self + other` in a `bits`-bit type.
    pub fn add(self, other: Interval, bits: u32) -> Interval {
        self.both(other, bits, |(a, b), (c, d)| Some((a.checked_add(c)?, b.checked_add(d)?)))
    }

    /// `self - other` in a `bits`-bit type: [`Interval::top`] unless it can never go below zero.
    pub fn sub(self, other: Interval, bits: u32) -> Interval {
        self.both(other, bits, |(a, b), (c, d)| if a >= d { Some((a - d, b - c)) } else { None })
    }

    /// `self - other`, or 0 where `other` is larger (a window's length after `offset(other)`).
    pub fn saturating_sub(self, other: Interval) -> Interval {
        self.both(other, 128, |(a, b), (c, d)| Some((a.saturating_sub(d), b.saturating_sub(c))))
    }

    /// `self * other` in a `bits`-bit type.
    pub fn mul(self, other: Interval, bits: u32) -> Interval {
        self.both(other, bits, |(a, b), (c, d)| Some((a.checked_mul(c)?, b.checked_mul(d)?)))
    }

    /// `self / other` (integer division); [`Interval::top`] if the divisor can be zero (undefined in C++).
    pub fn div(self, other: Interval, bits: u32) -> Interval {
        // `c` is the smallest divisor: zero means some thread may divide by zero.
        self.both(other, bits, |(a, b), (c, d)| Some((a / d.max(1), b.checked_div(c)?)))
    }

    /// `self.div_ceil(other)`; [`Interval::top`] if the divisor can be zero.
    pub fn div_ceil(self, other: Interval, bits: u32) -> Interval {
        self.both(other, bits, |(a, b), (c, d)| if c == 0 { None } else { Some((a.div_ceil(d), b.div_ceil(c))) })
    }

    /// `self % other`; [`Interval::top`] if the divisor can be zero (undefined in C++).
    pub fn rem(self, other: Interval, bits: u32) -> Interval {
        self.both(other, bits, |(a, b), (c, d)| match () {
            _ if c == 0 => None,
            // Known operands give the known result: a condition like `hidden % lanes == 0` is decided at launch.
            _ if a == b && c == d => Some((a % c, a % c)),
            _ if b < c => Some((a, b)),
            _ => Some((0, b.min(d - 1))),
        })
    }

    /// The smaller of the two (`a.min(b)`).
    pub fn min(self, other: Interval) -> Interval {
        self.both(other, 128, |(a, b), (c, d)| Some((a.min(c), b.min(d))))
    }

    /// The larger of the two (`a.max(b)`).
    pub fn max(self, other: Interval) -> Interval {
        self.both(other, 128, |(a, b), (c, d)| Some((a.max(c), b.max(d))))
    }

    /// `self << other` in a `bits`-bit type; [`Interval::top`] if the shift can reach the width (undefined).
    pub fn shl(self, other: Interval, bits: u32) -> Interval {
        self.both(other, bits, |(a, b), (c, d)| {
            if d >= u128::from(bits) {
                return None;
            }
            Some((a.checked_mul(1u128 << c)?, b.checked_mul(1u128 << d)?))
        })
    }

    /// `self >> other` in a `bits`-bit type; [`Interval::top`] if the shift can reach the width (undefined).
    pub fn shr(self, other: Interval, bits: u32) -> Interval {
        self.both(other, bits, |(a, b), (c, d)| if d >= u128::from(bits) { None } else { Some((a >> d, b >> c)) })
    }

    /// `self & other`: at most the smaller operand.
    pub fn bit_and(self, other: Interval) -> Interval {
        self.both(
            other,
            128,
            |(a, b), (c, d)| if a == b && c == d { Some((a & c, a & c)) } else { Some((0, b.min(d))) },
        )
    }

    /// `self | other` or `self ^ other`: below the next power of two above both.
    pub fn bit_or(self, other: Interval) -> Interval {
        self.both(other, 128, |(a, b), (c, d)| {
            if a == b && c == d {
                // `|` and `^` of known operands lie between `a ^ c` and `a | c`.
                return Some((a ^ c, a | c));
            }
            Some((0, (b.max(d) + 1).checked_next_power_of_two()? - 1))
        })
    }

    /// `self as T` for an unsigned `T` of `bits` bits: unchanged if every value fits, else any value of `T`.
    pub fn cast(self, bits: u32) -> Interval {
        match self.0 {
            Some((_, hi)) if hi > max_of(bits) => Interval::top(bits),
            _ => self,
        }
    }

    /// Either value (an `if` whose condition weft cannot decide).
    pub fn join(self, other: Interval) -> Interval {
        match (self.0, other.0) {
            (Some((a, b)), Some((c, d))) => Interval::span(a.min(c), b.max(d)),
            (Some(_), None) => self,
            (None, _) => other,
        }
    }

    /// `if condition { self } else { other }` with the condition decided at launch, or either if it is not.
    pub fn pick(condition: Option<bool>, then: Interval, otherwise: Interval) -> Interval {
        match condition {
            Some(true) => then,
            Some(false) => otherwise,
            None => then.join(otherwise),
        }
    }

    /// The values of `start .. end` (`inclusive`: `start ..= end`), a `for` loop's variable.
    pub fn range(start: Interval, end: Interval, inclusive: bool) -> Interval {
        match (start.0, end.0) {
            (Some((lo, _)), Some((_, hi))) if inclusive => Interval::span(lo, hi),
            (Some((lo, _)), Some((_, hi))) if hi > 0 => Interval::span(lo, hi - 1),
            _ => Interval::EMPTY,
        }
    }

    /// The values of `self` for which `self < bound` can hold.
    pub fn below(self, bound: Interval) -> Interval {
        match (self.0, bound.0) {
            (Some((lo, hi)), Some((_, b))) if b > 0 => Interval::span(lo, hi.min(b - 1)),
            _ => Interval::EMPTY,
        }
    }

    /// The values of `self` for which `self <= bound` can hold.
    pub fn at_most(self, bound: Interval) -> Interval {
        match (self.0, bound.0) {
            (Some((lo, hi)), Some((_, b))) => Interval::span(lo, hi.min(b)),
            _ => Interval::EMPTY,
        }
    }

    /// The values of `self` for which `self > bound` can hold.
    pub fn above(self, bound: Interval) -> Interval {
        match (self.0, bound.0) {
            (Some((lo, hi)), Some((b, _))) => Interval::span(lo.max(b.saturating_add(1)), hi),
            _ => Interval::EMPTY,
        }
    }

    /// The values of `self` for which `self >= bound` can hold.
    pub fn at_least(self, bound: Interval) -> Interval {
        match (self.0, bound.0) {
            (Some((lo, hi)), Some((b, _))) => Interval::span(lo.max(b), hi),
            _ => Interval::EMPTY,
        }
    }

    /// The values of `self` for which `self == other` can hold.
    pub fn equal(self, other: Interval) -> Interval {
        self.at_least(other).at_most(other)
    }

    /// `self < other`, when it is the same for every value (else `None`).
    pub fn lt(self, other: Interval) -> Option<bool> {
        let ((a, b), (c, d)) = (self.0?, other.0?);
        if b < c {
            Some(true)
        } else if a >= d {
            Some(false)
        } else {
            None
        }
    }

    /// `self <= other`, when it is the same for every value.
    pub fn le(self, other: Interval) -> Option<bool> {
        other.lt(self).map(|x| !x)
    }

    /// `self == other`, when it is the same for every value.
    pub fn eq(self, other: Interval) -> Option<bool> {
        let ((a, b), (c, d)) = (self.0?, other.0?);
        if a == b && c == d {
            Some(a == c)
        } else if b < c || d < a {
            Some(false)
        } else {
            None
        }
    }
}

/// `a && b` of conditions decided at launch (`None`: not decided).
pub fn and(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(false), _) | (_, Some(false)) => Some(false),
        (Some(true), Some(true)) => Some(true),
        _ => None,
    }
}

/// `a || b` of conditions decided at launch.
pub fn or(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(true), _) | (_, Some(true)) => Some(true),
        (Some(false), Some(false)) => Some(false),
        _ => None,
    }
}

/// `!a` of a condition decided at launch.
pub fn not(a: Option<bool>) -> Option<bool> {
    a.map(|x| !x)
}

/// One step of a `#[kernel(len(…))]` rule's arithmetic: `op(a, b)`, or `None` when an operand is missing or the
/// operation overflows, underflows or divides by zero (the rule then fails).
pub fn rule(a: Option<u128>, b: Option<u128>, op: fn(u128, u128) -> Option<u128>) -> Option<u128> {
    op(a?, b?)
}

/// Whether code under `condition` can run (it runs unless the condition is decided false).
pub fn reachable(condition: Option<bool>) -> bool {
    condition != Some(false)
}

/// One access of a kernel, for the error that refuses a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Site {
    /// The buffer, window or shared array accessed, or the parameter a view or sub-slice of it comes from.
    pub parameter: &'static str,
    /// The access, as written.
    pub access: &'static str,
    /// Its line in the kernel's source file.
    pub line: u32,
}

fn refuse(kernel: &'static str, site: &Site, problem: String) -> Error {
    Error::OutOfBounds { kernel, parameter: site.parameter, access: site.access, line: site.line, problem }
}

/// The smallest length, or the reason none can be counted on.
fn least_length(kernel: &'static str, site: &Site, len: Interval) -> Result<Option<u128>> {
    match len.0 {
        Some((lo, _)) => Ok(Some(lo)),
        None => Err(refuse(kernel, site, "weft cannot tell its length".into())),
    }
}

fn cannot_bound(kernel: &'static str, site: &Site, what: &str) -> Error {
    refuse(
        kernel,
        site,
        format!("weft cannot bound the {what} at this launch (a value computing it may wrap): pass smaller sizes"),
    )
}

/// `buffer[index]` (or a view, shared array, multimem view): every index below `len`.
pub fn require_index(kernel: &'static str, site: &Site, index: Interval, len: Interval) -> Result<()> {
    let Some((_, hi)) = index.0 else { return Ok(()) };
    if hi >= max_of(64) {
        return Err(cannot_bound(kernel, site, "index"));
    }
    match least_length(kernel, site, len)? {
        Some(len) if hi < len => Ok(()),
        len => Err(refuse(
            kernel,
            site,
            format!(
                "the index reaches {hi}, but `{}` has {} elements: pass a longer `{0}` or smaller sizes",
                site.parameter,
                len.unwrap_or(0)
            ),
        )),
    }
}

/// `buffer.load_pack(p)` / `store_pack` / `load_wide` / `store_wide`: pack `p` covers elements `p·lanes ..
/// (p + 1)·lanes`, all below `len`.
pub fn require_pack(kernel: &'static str, site: &Site, pack: Interval, lanes: Interval, len: Interval) -> Result<()> {
    let Some((_, hi)) = pack.0 else { return Ok(()) };
    let Some((_, lanes)) = lanes.0 else { return Err(cannot_bound(kernel, site, "pack width")) };
    let end = hi.checked_add(1).and_then(|p| p.checked_mul(lanes)).filter(|&end| end <= max_of(64));
    let Some(end) = end else { return Err(cannot_bound(kernel, site, "pack index")) };
    match least_length(kernel, site, len)? {
        Some(len) if end <= len => Ok(()),
        len => Err(refuse(
            kernel,
            site,
            format!(
                "the pack index reaches {hi} ({lanes} elements each: elements up to {}), but `{}` has {} elements: pass \
                 a longer `{1}` or smaller sizes",
                end - 1,
                site.parameter,
                len.unwrap_or(0)
            ),
        )),
    }
}

/// `&buffer[start..end]`: `start <= end <= len`.
pub fn require_range(kernel: &'static str, site: &Site, start: Interval, end: Interval, len: Interval) -> Result<()> {
    let (Some((_, start_hi)), Some((end_lo, end_hi))) = (start.0, end.0) else { return Ok(()) };
    if start_hi >= max_of(64) || end_hi >= max_of(64) {
        return Err(cannot_bound(kernel, site, "range"));
    }
    if start_hi > end_lo {
        return Err(refuse(
            kernel,
            site,
            format!("the range's start can reach {start_hi}, past its end ({end_lo}): pass a start before the end"),
        ));
    }
    match least_length(kernel, site, len)? {
        Some(len) if end_hi <= len => Ok(()),
        len => Err(refuse(
            kernel,
            site,
            format!(
                "the range's end reaches {end_hi}, but `{}` has {} elements: pass a longer `{0}` or smaller sizes",
                site.parameter,
                len.unwrap_or(0)
            ),
        )),
    }
}

/// A count of elements an operation reads or writes (`lsa_copy(…, count)`, a GIN `put`): at most `len`.
pub fn require_count(kernel: &'static str, site: &Site, count: Interval, len: Interval) -> Result<()> {
    let Some((_, hi)) = count.0 else { return Ok(()) };
    if hi >= max_of(64) {
        return Err(cannot_bound(kernel, site, "count"));
    }
    match least_length(kernel, site, len)? {
        Some(len) if hi <= len => Ok(()),
        len => Err(refuse(
            kernel,
            site,
            format!(
                "the count reaches {hi}, but `{}` has {} elements: pass a longer `{0}` or a smaller count",
                site.parameter,
                len.unwrap_or(0)
            ),
        )),
    }
}

/// `window.lsa(peer)` / `window.peer(team, peer)`: `peer` below the team's size.
pub fn require_peer(kernel: &'static str, site: &Site, peer: Interval, team_size: Interval) -> Result<()> {
    let Some((_, hi)) = peer.0 else { return Ok(()) };
    match team_size.0 {
        Some((size, _)) if hi < size => Ok(()),
        size => Err(refuse(
            kernel,
            site,
            format!(
                "the peer index reaches {hi}, but the team has {} ranks: pass values that keep the peer in the team",
                size.map_or(0, |s| s.0)
            ),
        )),
    }
}

/// The size and this rank's index of a team, as [`Interval`] points (`dev.lsa_size()` and `dev.lsa_rank()`, …).
pub fn team(team: crate::devcomm::Team) -> Result<(Interval, Interval)> {
    let size = u128::try_from(team.nranks).map_err(|_| Error::invalid("dev", "NCCL reported a negative team size"))?;
    let rank = u128::try_from(team.rank).map_err(|_| Error::invalid("dev", "NCCL reported a negative team rank"))?;
    Ok((Interval::point(size), Interval::point(rank)))
}

/// The LSA team of a device communicator (the sizes of `dev.lsa_size()` and `dev.lsa_rank()`).
pub fn lsa_team<C: weft_device::caps::CapabilitySet, M: crate::Mode>(
    dev: &crate::DevComm<'_, C, M>,
) -> Result<(Interval, Interval)> {
    team(dev.communicator().team_lsa()?)
}

/// Every rank of a device communicator's communicator (`dev.nranks()`, `dev.rank()`).
pub fn world_team<C: weft_device::caps::CapabilitySet, M: crate::Mode>(
    dev: &crate::DevComm<'_, C, M>,
) -> Result<(Interval, Interval)> {
    let comm = dev.communicator();
    Ok((Interval::point(comm.nranks() as u128), Interval::point(comm.rank() as u128)))
}

/// The rail team of a device communicator (`dev.rail()`).
pub fn rail_team<C: weft_device::caps::CapabilitySet, M: crate::Mode>(
    dev: &crate::DevComm<'_, C, M>,
) -> Result<(Interval, Interval)> {
    team(dev.communicator().team_rail()?)
}

/// The LSA team of a window's communicator, for a kernel that reaches peers' windows without a device communicator.
pub fn window_lsa_team<T>(window: &impl super::KernelWindow<T>) -> Result<(Interval, Interval)> {
    team(super::buffers::sealed::SymmetricWindow::lsa_team(window)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SITE: Site = Site { parameter: "out", access: "out[i]", line: 7 };

    fn iv(lo: u128, hi: u128) -> Interval {
        Interval::span(lo, hi)
    }

    #[test]
    fn arithmetic_follows_the_cpp_type_and_goes_to_top_where_it_may_wrap() {
        assert_eq!(iv(1, 3).add(iv(10, 20), 64), iv(11, 23));
        assert_eq!(iv(0, u32::MAX as u128).add(Interval::point(1), 32), Interval::top(32));
        assert_eq!(iv(10, 20).sub(iv(1, 3), 64), iv(7, 19));
        assert_eq!(iv(2, 20).sub(iv(1, 3), 64), Interval::top(64), "2 - 3 wraps");
        assert_eq!(iv(2, 3).mul(iv(4, 5), 32), iv(8, 15));
        assert_eq!(Interval::point(1 << 40).mul(Interval::point(1 << 30), 64), Interval::top(64));
        assert_eq!(iv(10, 20).div(iv(2, 5), 64), iv(2, 10));
        assert_eq!(iv(10, 20).div(iv(0, 5), 64), Interval::top(64), "division by zero is undefined");
        assert_eq!(iv(10, 20).div_ceil(iv(3, 4), 64), iv(3, 7));
        assert_eq!(iv(3, 20).saturating_sub(iv(5, 6)), iv(0, 15));
        assert_eq!(iv(0, 100).rem(Interval::point(8), 64), iv(0, 7));
        assert_eq!(iv(3, 5).rem(Interval::point(8), 64), iv(3, 5));
        assert_eq!(iv(3, 5).rem(iv(0, 8), 64), Interval::top(64));
        assert_eq!(iv(1, 2).shl(Interval::point(3), 64), iv(8, 16));
        assert_eq!(iv(1, 2).shl(Interval::point(64), 64), Interval::top(64));
        assert_eq!(iv(8, 16).shr(Interval::point(3), 64), iv(1, 2));
        assert_eq!(iv(0, 300).bit_and(Interval::point(31)), iv(0, 31));
        assert_eq!(iv(0, 5).bit_or(iv(0, 9)), iv(0, 15));
        assert_eq!(iv(0, 1 << 40).cast(32), Interval::top(32));
        assert_eq!(iv(0, 9).cast(32), iv(0, 9));
        assert_eq!(iv(0, 9).min(Interval::point(4)), iv(0, 4));
        assert_eq!(iv(0, 9).max(Interval::point(4)), iv(4, 9));
        // Known operands stay known, so a condition over them (`hidden % lanes == 0`) is decided at launch.
        let p = Interval::point;
        assert_eq!(p(4096).rem(p(8), 64), p(0));
        assert_eq!(p(4100).rem(p(8), 64), p(4));
        assert_eq!(p(4096).rem(p(8), 64).eq(p(0)), Some(true));
        assert_eq!(p(12).bit_and(p(10)), p(8));
        assert_eq!(p(12).bit_or(p(10)), iv(6, 14), "`|` or `^`: between 12 ^ 10 and 12 | 10");
    }

    #[test]
    fn empty_values_stay_empty() {
        let e = Interval::EMPTY;
        assert!(e.add(Interval::point(1), 64).is_empty());
        assert!(Interval::point(1).mul(e, 64).is_empty());
        assert!(Interval::range(Interval::point(0), Interval::point(0), false).is_empty(), "0..0 never runs");
        assert!(Interval::below_count(0).is_empty());
        assert_eq!(Interval::below_count(4), iv(0, 3));
        assert_eq!(e.join(iv(1, 2)), iv(1, 2));
    }

    #[test]
    fn ranges_and_refinements() {
        let (zero, n) = (Interval::point(0), Interval::point(10));
        assert_eq!(Interval::range(zero, n, false), iv(0, 9));
        assert_eq!(Interval::range(zero, n, true), iv(0, 10));
        assert_eq!(iv(0, 100).below(n), iv(0, 9));
        assert!(iv(0, 100).below(zero).is_empty(), "nothing is below 0");
        assert_eq!(iv(0, 100).at_most(n), iv(0, 10));
        assert_eq!(iv(0, 100).above(n), iv(11, 100));
        assert_eq!(iv(0, 100).at_least(n), iv(10, 100));
        assert_eq!(iv(0, 100).equal(Interval::point(5)), iv(5, 5));
        assert!(iv(0, 4).equal(Interval::point(5)).is_empty());
    }

    #[test]
    fn comparisons_are_decided_only_when_every_value_agrees() {
        assert_eq!(iv(0, 3).lt(iv(4, 9)), Some(true));
        assert_eq!(iv(4, 9).lt(iv(0, 4)), Some(false));
        assert_eq!(iv(0, 5).lt(iv(4, 9)), None);
        assert_eq!(Interval::point(3).eq(Interval::point(3)), Some(true));
        assert_eq!(iv(0, 3).eq(iv(5, 6)), Some(false));
        assert_eq!(Interval::point(3).le(Interval::point(3)), Some(true));
        assert_eq!(and(Some(true), None), None);
        assert_eq!(and(Some(false), None), Some(false));
        assert_eq!(or(None, Some(true)), Some(true));
        assert_eq!(not(Some(true)), Some(false));
        assert_eq!(Interval::pick(Some(false), iv(0, 1), iv(5, 6)), iv(5, 6));
        assert_eq!(Interval::pick(None, iv(0, 1), iv(5, 6)), iv(0, 6));
        assert!(reachable(None) && reachable(Some(true)) && !reachable(Some(false)));
        assert_eq!(rule(Some(3), Some(4), u128::checked_mul), Some(12));
        assert_eq!(rule(Some(3), Some(4), u128::checked_sub), None, "a rule whose arithmetic underflows fails");
        assert_eq!(rule(None, Some(4), u128::checked_add), None);
    }

    #[test]
    fn index_checks() {
        require_index("k", &SITE, iv(0, 9), Interval::point(10)).unwrap();
        require_index("k", &SITE, Interval::EMPTY, Interval::point(0)).unwrap();
        let text = require_index("k", &SITE, iv(0, 10), Interval::point(10)).unwrap_err().to_string();
        assert!(text.contains("`k`") && text.contains("`out[i]` (line 7)"), "{text}");
        assert!(text.contains("the index reaches 10, but `out` has 10 elements"), "{text}");
        let text = require_index("k", &SITE, Interval::top(64), Interval::point(10)).unwrap_err().to_string();
        assert!(text.contains("cannot bound the index"), "{text}");
        // A sub-slice's length is an interval: its smallest value counts.
        assert!(require_index("k", &SITE, iv(0, 5), iv(5, 100)).is_err());
    }

    #[test]
    fn pack_range_count_and_peer_checks() {
        let four = Interval::point(4);
        require_pack("k", &SITE, iv(0, 2), four, Interval::point(12)).unwrap();
        let text = require_pack("k", &SITE, iv(0, 2), four, Interval::point(11)).unwrap_err().to_string();
        assert!(text.contains("pack index reaches 2 (4 elements each: elements up to 11)"), "{text}");
        require_range("k", &SITE, Interval::point(2), Interval::point(10), Interval::point(10)).unwrap();
        assert!(require_range("k", &SITE, Interval::point(2), Interval::point(11), Interval::point(10)).is_err());
        let text = require_range("k", &SITE, iv(0, 5), iv(3, 4), Interval::point(10)).unwrap_err().to_string();
        assert!(text.contains("start can reach 5, past its end (3)"), "{text}");
        require_count("k", &SITE, Interval::point(10), Interval::point(10)).unwrap();
        assert!(require_count("k", &SITE, Interval::point(11), Interval::point(10)).is_err());
        require_peer("k", &SITE, iv(0, 3), Interval::point(4)).unwrap();
        let text = require_peer("k", &SITE, iv(0, 4), Interval::point(4)).unwrap_err().to_string();
        assert!(text.contains("peer index reaches 4, but the team has 4 ranks"), "{text}");
    }
}
