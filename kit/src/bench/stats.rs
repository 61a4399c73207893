//! Numbers: summaries of timings, the relative error against a reference, the inputs' random numbers, and how
//! many input sets defeat the L2 cache.
//!
//! Pure (no GPU); `tests/bench_harness.rs` tests it.

/// Timings of one side at one size, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// The median.
    pub median: f64,
    /// The 10th percentile.
    pub p10: f64,
    /// The 90th percentile: with `p10`, the spread a difference must exceed to be more than noise.
    pub p90: f64,
    /// How many timed runs.
    pub samples: usize,
}

impl Summary {
    /// Summarizes `samples` (NaN everywhere when there are none).
    pub fn of(samples: &[f64]) -> Summary {
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        Summary {
            median: quantile(&sorted, 0.5),
            p10: quantile(&sorted, 0.1),
            p90: quantile(&sorted, 0.9),
            samples: sorted.len(),
        }
    }
}

/// The `q` quantile of sorted samples, linearly interpolated; NaN for none.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        len => {
            let position = q * (len - 1) as f64;
            let below = position.floor() as usize;
            let above = (below + 1).min(len - 1);
            let fraction = position - below as f64;
            sorted[below] + (sorted[above] - sorted[below]) * fraction
        }
    }
}

/// ‖got − want‖₂ / ‖want‖₂ (the absolute norm ‖got − want‖₂ when `want` is all zeros).
///
/// Infinite when any element of `got` is not finite (a poisoned element nothing wrote, or an overflow) or when
/// the lengths differ: those never pass.
pub fn relative_error(got: &[f64], want: &[f64]) -> f64 {
    if got.len() != want.len() {
        return f64::INFINITY;
    }
    let (mut difference, mut norm) = (0.0, 0.0);
    for (g, w) in got.iter().zip(want) {
        if !g.is_finite() {
            return f64::INFINITY;
        }
        difference += (g - w) * (g - w);
        norm += w * w;
    }
    if norm == 0.0 {
        difference.sqrt()
    } else {
        (difference / norm).sqrt()
    }
}

/// A small, fast, seedable generator (xorshift64* seeded through splitmix64) for inputs: every rank can
/// regenerate every other rank's inputs for the host reference without any being sent.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for stream `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(mix(seed) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [-1, 1), on a grid of 2⁻²³ (exact in f32).
    pub fn signed_unit(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// splitmix64's finalizer: nearby seeds give unrelated streams.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The seed of one input stream: the same on every rank for the same `(draw, rank, stream)`, different for any
/// other, so inputs are fresh at every draw and ranks never share a stream by accident.
pub fn seed(draw: u64, rank: usize, stream: u64) -> u64 {
    mix(mix(mix(draw) ^ rank as u64) ^ stream)
}

/// How many independent input sets to rotate through so that a run does not find the previous run's data
/// in the L2 cache: enough for the sets together to span twice the cache, at least 2 while one set fits in
/// it, at most `max_sets` (small messages stay cache-resident regardless, as they do in real use).
pub fn rotation_sets(footprint_bytes: u64, l2_bytes: u64, max_sets: usize) -> usize {
    if footprint_bytes >= l2_bytes {
        return 1;
    }
    let wanted = (2 * l2_bytes).div_ceil(footprint_bytes.max(1));
    usize::try_from(wanted).unwrap_or(usize::MAX).clamp(2, max_sets.max(2))
}
