//! The workspace's one seeded pseudo-random generator.
//!
//! Experiments (the Regulator §6.1 placement comparison, the fleet simulator),
//! the LSTM predictors' weight initialisation and the SLA-curve probes must be
//! exactly reproducible from a seed on any platform and any future version of
//! the dependencies, so the workspace carries its own generator instead of
//! relying on a library whose streams may change between releases. SplitMix64
//! (Steele, Lea and Flood, OOPSLA 2014; the reference C code by Sebastiano
//! Vigna) is tiny, passes BigCrush, and is more than good enough to draw
//! workloads, initialise weights and break ties; it is not for cryptography.
//!
//! The stream is pinned by a test against the reference C output: changing it
//! would move every golden result that depends on a seed.

/// The SplitMix64 generator: a 64-bit counter advanced by the golden-ratio
/// increment and passed through a bijective mixer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose stream is fully determined by `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// A generator for one labelled sub-experiment: the stream depends on the
    /// master `seed` and on every element of `path` (e.g. trial, group,
    /// percentile), so sub-experiments do not share random numbers and adding
    /// one does not shift the others.
    pub fn derive(seed: u64, path: &[u64]) -> Self {
        let mut s = SplitMix64::new(seed);
        for &p in path {
            let mixed = s.next_u64() ^ p.wrapping_mul(0xD605_BBB5_8C8A_BBBB);
            s = SplitMix64::new(mixed);
        }
        s
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform float in `[0, 1)` (53 random bits).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform `f32` in `[0, 1)` (24 random bits, the top of one draw).
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// A uniform float in `(0, 1)`: 53 random bits, centred in their cell,
    /// so it is never 0 (safe under `ln`) and never 1.
    pub fn next_f64_open(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// An exponentially distributed float with mean `mean` (inverse
    /// transform of [`next_f64_open`](Self::next_f64_open)): Poisson gaps.
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * self.next_f64_open().ln()
    }

    /// A uniform float in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }

    /// A float whose logarithm is uniform in `[ln lo, ln hi)` (both > 0).
    pub fn log_uniform(&mut self, lo: f64, hi: f64) -> f64 {
        (lo.ln() + (hi.ln() - lo.ln()) * self.next_f64()).exp()
    }

    /// A uniform index in `0..n` (`n > 0`), by Lemire's multiply-shift. The
    /// bias is below `n / 2^64`, far under anything the experiments resolve.
    pub fn below(&mut self, n: usize) -> usize {
        assert!(n > 0, "below(0)");
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// Fisher–Yates shuffle.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_stream() {
        // First outputs of Vigna's splitmix64.c seeded with 1234567.
        let mut r = SplitMix64::new(1234567);
        let got: Vec<u64> = (0..5).map(|_| r.next_u64()).collect();
        assert_eq!(
            got,
            [
                6457827717110365317,
                3203168211198807973,
                9817491932198370423,
                4593380528125082431,
                16408922859458223821
            ]
        );
    }

    #[test]
    fn ranges_and_shuffle() {
        let mut r = SplitMix64::new(7);
        let mut seen = [0usize; 5];
        for _ in 0..5000 {
            let x = r.next_f64();
            assert!((0.0..1.0).contains(&x));
            let y = r.log_uniform(2.0, 50.0);
            assert!((2.0..50.0).contains(&y), "{y}");
            seen[r.below(5)] += 1;
        }
        // Every bucket gets roughly a fifth.
        assert!(seen.iter().all(|&c| (850..1150).contains(&c)), "{seen:?}");
        let mut v: Vec<u32> = (0..20).collect();
        r.shuffle(&mut v);
        assert_ne!(v, (0..20).collect::<Vec<_>>());
        v.sort_unstable();
        assert_eq!(v, (0..20).collect::<Vec<_>>());
    }

    #[test]
    fn f32_and_open_interval_and_exponential() {
        let mut r = SplitMix64::new(11);
        let mut sum = 0.0;
        for _ in 0..20_000 {
            let x = r.next_f32();
            assert!((0.0..1.0).contains(&x));
            let o = r.next_f64_open();
            assert!(o > 0.0 && o < 1.0);
            sum += r.exponential(2.0);
        }
        let mean = sum / 20_000.0;
        assert!((1.9..2.1).contains(&mean), "{mean}");
        // next_f32 is the top 24 bits of one draw.
        let mut a = SplitMix64::new(5);
        let mut b = SplitMix64::new(5);
        assert_eq!(
            a.next_f32(),
            (b.next_u64() >> 40) as f32 / (1u64 << 24) as f32
        );
    }

    #[test]
    fn derived_streams_differ_and_repeat() {
        let a = SplitMix64::derive(1, &[0, 2]).next_u64();
        let b = SplitMix64::derive(1, &[0, 3]).next_u64();
        let c = SplitMix64::derive(1, &[0, 2]).next_u64();
        let d = SplitMix64::derive(2, &[0, 2]).next_u64();
        assert_ne!(a, b);
        assert_ne!(a, d);
        assert_eq!(a, c);
    }
}
