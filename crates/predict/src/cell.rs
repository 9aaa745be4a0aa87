//! The duration sub-predictors' training step, written out by hand: the LSTM
//! cell's forward pass, backpropagation through its few time steps, and Adam,
//! on plain `f32` slices.
//!
//! Why not candle's autograd, as everywhere else in this crate: the duration
//! sub-predictors are where training time goes (17 models of 50 hidden units
//! a resource, several Adam steps a period; on real inputs about 48 ms per
//! resource per period, over the 47 ms per vSSD the issue allows). Through
//! autograd one step is some 300 tensor operations, each allocating its output
//! and each computing a gate's sigmoid or tanh one scalar call at a time. Here a
//! step is three small matrix products per time step, kept in registers, and
//! gate functions the compiler vectorises (see `BENCHMARKS.md`, "BlockFlex
//! predictors", for the measured difference). Only the duration models train
//! this way; the level classifiers (4 and 16 hidden units) keep candle.
//!
//! The maths is [`crate::lstm::Lstm::train_group`]'s, exactly: the same cell (gates
//! in the order input, forget, cell, output), the same loss (MSE, or pinball at
//! `q`, over the unmasked samples, divided by the batch size; masked samples add
//! nothing to a gradient, so they are not computed), and candle's `AdamW` with no
//! weight decay. A test trains both side by side and compares the weights.

/// What the loss of a one-output regression head is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Loss {
    /// Squared error.
    Mse,
    /// Pinball loss at this quantile.
    Pinball(f32),
}

/// What one call of [`Cell::train`] trains on, and how.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Job<'a> {
    /// `n` sequences of `t` steps of the cell's features, `[n, t, F]`.
    pub xs: &'a [f32],
    /// Steps per sequence.
    pub t: usize,
    /// One target per sequence (`n = ys.len()`, all of them counted).
    pub ys: &'a [f32],
    /// The divisor of the loss: the masked batch the candle path would use
    /// (`n <= batch`).
    pub batch: usize,
    /// The loss.
    pub loss: Loss,
    /// Adam's learning rate.
    pub lr: f64,
    /// Adam steps.
    pub epochs: usize,
}

/// Adam's settings (candle's `ParamsAdamW` defaults, no weight decay).
const BETA1: f64 = 0.9;
const BETA2: f64 = 0.999;
const EPS: f32 = 1e-8;

/// The shape of one model: its parameters are flattened in the order of the
/// candle variables of a one-model [`crate::lstm::Lstm`] (`wx [F, 4H]`,
/// `wh [H, 4H]`, `b [4H]`, `wo [H, 1]`, `bo [1]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cell {
    /// Inputs per time step.
    pub features: usize,
    /// Hidden units.
    pub hidden: usize,
}

/// Adam's state for one model: first and second moments, steps taken.
#[derive(Debug, Clone, Default)]
pub(crate) struct Adam {
    m: Vec<f32>,
    v: Vec<f32>,
    t: i32,
}

impl Adam {
    /// One step of parameters `p` with gradient `g` (candle's `AdamW`, weight
    /// decay 0).
    #[inline(always)]
    fn step(&mut self, p: &mut [f32], g: &[f32], lr: f64) {
        if self.m.len() != p.len() {
            self.m = vec![0.0; p.len()];
            self.v = vec![0.0; p.len()];
        }
        self.t += 1;
        let sm = (1.0 / (1.0 - BETA1.powi(self.t))) as f32;
        let sv = (1.0 / (1.0 - BETA2.powi(self.t))) as f32;
        let (b1, b2) = (BETA1 as f32, BETA2 as f32);
        let (c1, c2) = ((1.0 - BETA1) as f32, (1.0 - BETA2) as f32);
        let lr = lr as f32;
        for (((p, m), v), &g) in p.iter_mut().zip(&mut self.m).zip(&mut self.v).zip(g) {
            *m = *m * b1 + g * c1;
            *v = *v * b2 + g * g * c2;
            let mh = *m * sm;
            let vh = *v * sv;
            *p -= mh / (vh.sqrt() + EPS) * lr;
        }
    }
}

impl Cell {
    /// Number of parameters.
    pub fn len(&self) -> usize {
        (self.features + self.hidden + 1) * 4 * self.hidden + self.hidden + 1
    }

    /// Offsets of `wh`, `b`, `wo`, `bo`.
    fn offsets(&self) -> (usize, usize, usize, usize) {
        let g = 4 * self.hidden;
        let wh = self.features * g;
        let b = wh + self.hidden * g;
        let wo = b + g;
        (wh, b, wo, wo + self.hidden)
    }

    /// The output of the model `p` for each sequence in `xs` (`[n, t, F]`).
    #[cfg(test)]
    pub fn predict(&self, p: &[f32], xs: &[f32], t: usize) -> Vec<f32> {
        let n = xs.len() / (t * self.features).max(1);
        let mut s = Scratch::default();
        self.forward(p, xs, n, t, &mut s);
        s.y
    }

    /// `job.epochs` Adam steps of the model `p` (Adam state `adam`) on the
    /// job's sequences (see [`Job`]).
    pub fn train(&self, p: &mut [f32], adam: &mut Adam, job: &Job<'_>, s: &mut Scratch) {
        assert_eq!(p.len(), self.len(), "parameter count");
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F, checked just above.
            unsafe { self.train_avx512(p, adam, job, s) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, checked just above.
            unsafe { self.train_avx2(p, adam, job, s) };
            return;
        }
        self.train_impl(p, adam, job, s);
    }

    /// [`Cell::train`] compiled for AVX2: the same code, whose loops the
    /// compiler vectorises eight lanes wide instead of SSE2's four. No FMA:
    /// fused multiply-adds would round differently from the other builds
    /// (without them every build computes the same sums in the same order),
    /// and they measured slower here (8.7 ms a period against 7.2: the sums
    /// wait on the add's latency either way).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn train_avx2(&self, p: &mut [f32], adam: &mut Adam, job: &Job<'_>, s: &mut Scratch) {
        self.train_impl(p, adam, job, s);
    }

    /// [`Cell::train`] compiled for AVX-512: sixteen lanes (8% less time
    /// than the AVX2 build in `examples/overhead.rs`).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn train_avx512(&self, p: &mut [f32], adam: &mut Adam, job: &Job<'_>, s: &mut Scratch) {
        self.train_impl(p, adam, job, s);
    }

    #[inline(always)]
    fn train_impl(&self, p: &mut [f32], adam: &mut Adam, job: &Job<'_>, s: &mut Scratch) {
        let Job {
            xs,
            t,
            ys,
            batch,
            loss,
            lr,
            epochs,
        } = *job;
        let n = ys.len();
        let scale = 1.0 / batch.max(1) as f32;
        for _ in 0..epochs {
            if n == 0 {
                // No sample: zero gradients, but Adam still steps (candle's does).
                s.grad.clear();
                s.grad.resize(p.len(), 0.0);
            } else {
                self.forward(p, xs, n, t, s);
                s.dy.clear();
                s.dy.extend(s.y.iter().zip(ys).map(|(&y, &tg)| {
                    let d = tg - y;
                    // d loss / d y, where loss = per(d) / batch and d = tg - y.
                    let dper = match loss {
                        Loss::Mse => 2.0 * d,
                        Loss::Pinball(q) => {
                            if d > 0.0 {
                                q
                            } else if d < 0.0 {
                                q - 1.0
                            } else {
                                // candle splits a tie of `maximum` evenly.
                                q - 0.5
                            }
                        }
                    };
                    -dper * scale
                }));
                self.backward(p, xs, n, t, s);
            }
            adam.step(p, &s.grad, lr);
        }
    }

    /// Forward pass over `n` sequences of `t` steps; keeps what backward needs.
    #[inline(always)]
    fn forward(&self, p: &[f32], xs: &[f32], n: usize, t: usize, s: &mut Scratch) {
        let (f, h) = (self.features, self.hidden);
        let g4 = 4 * h;
        let (o_wh, o_b, o_wo, o_bo) = self.offsets();
        let wx = &p[..o_wh];
        let wh = &p[o_wh..o_b];
        let bias = &p[o_b..o_wo];
        let wo = &p[o_wo..o_bo];
        let bo = p[o_bo];
        // Per step: gates after their functions [n, 4H], c and tanh(c) [n, H],
        // h [n, H] (index 0 is the zero initial state).
        s.gates.clear();
        s.gates.resize(t * n * g4, 0.0);
        s.c.clear();
        s.c.resize((t + 1) * n * h, 0.0);
        s.tc.clear();
        s.tc.resize(t * n * h, 0.0);
        s.h.clear();
        s.h.resize((t + 1) * n * h, 0.0);
        for step in 0..t {
            let (hp, hn) = s.h.split_at_mut((step + 1) * n * h);
            let hprev = &hp[step * n * h..];
            let hnext = &mut hn[..n * h];
            let (cp, cn) = s.c.split_at_mut((step + 1) * n * h);
            let cprev = &cp[step * n * h..];
            let cnext = &mut cn[..n * h];
            let gates = &mut s.gates[step * n * g4..(step + 1) * n * g4];
            let tc = &mut s.tc[step * n * h..(step + 1) * n * h];
            for k in 0..n {
                let g = &mut gates[k * g4..(k + 1) * g4];
                g.copy_from_slice(bias);
                let x = &xs[(k * t + step) * f..(k * t + step + 1) * f];
                lincomb(g, x, 1, wx);
                lincomb(g, &hprev[k * h..(k + 1) * h], 1, wh);
                activate(g, h);
                let (ig, rest) = g.split_at(h);
                let (fg, rest) = rest.split_at(h);
                let (gg, og) = rest.split_at(h);
                let cp = &cprev[k * h..(k + 1) * h];
                let cn = &mut cnext[k * h..(k + 1) * h];
                let tck = &mut tc[k * h..(k + 1) * h];
                let hk = &mut hnext[k * h..(k + 1) * h];
                for j in 0..h {
                    cn[j] = fg[j] * cp[j] + ig[j] * gg[j];
                }
                tanh_into(tck, cn);
                for j in 0..h {
                    hk[j] = og[j] * tck[j];
                }
            }
        }
        s.y.clear();
        let hl = &s.h[t * n * h..(t + 1) * n * h];
        s.y.extend((0..n).map(|k| dot(&hl[k * h..(k + 1) * h], wo) + bo));
    }

    /// Gradients of the loss (given `s.dy`, d loss / d output) into `s.grad`.
    #[inline(always)]
    fn backward(&self, p: &[f32], xs: &[f32], n: usize, t: usize, s: &mut Scratch) {
        let (f, h) = (self.features, self.hidden);
        let g4 = 4 * h;
        let (o_wh, o_b, o_wo, o_bo) = self.offsets();
        let wh = &p[o_wh..o_b];
        let wo = &p[o_wo..o_bo];
        // wh transposed ([4H, H]), so that dh = dg wh^T is a sum of its rows.
        s.wht.clear();
        s.wht.resize(g4 * h, 0.0);
        for i in 0..h {
            for j in 0..g4 {
                s.wht[j * h + i] = wh[i * g4 + j];
            }
        }
        s.grad.clear();
        s.grad.resize(p.len(), 0.0);
        let (gwx, rest) = s.grad.split_at_mut(o_wh);
        let (gwh, rest) = rest.split_at_mut(o_b - o_wh);
        let (gb, rest) = rest.split_at_mut(o_wo - o_b);
        let (gwo, gbo) = rest.split_at_mut(o_bo - o_wo);
        // Head.
        let hl = &s.h[t * n * h..(t + 1) * n * h];
        s.dh.clear();
        s.dh.resize(n * h, 0.0);
        for k in 0..n {
            let dy = s.dy[k];
            gbo[0] += dy;
            let hk = &hl[k * h..(k + 1) * h];
            for j in 0..h {
                gwo[j] += dy * hk[j];
                s.dh[k * h + j] = dy * wo[j];
            }
        }
        s.dc.clear();
        s.dc.resize(n * h, 0.0);
        s.dg.clear();
        s.dg.resize(n * g4, 0.0);
        for step in (0..t).rev() {
            let gates = &s.gates[step * n * g4..(step + 1) * n * g4];
            let cprev = &s.c[step * n * h..(step + 1) * n * h];
            let tc = &s.tc[step * n * h..(step + 1) * n * h];
            for k in 0..n {
                let g = &gates[k * g4..(k + 1) * g4];
                let (ig, rest) = g.split_at(h);
                let (fg, rest) = rest.split_at(h);
                let (gg, og) = rest.split_at(h);
                let dg = &mut s.dg[k * g4..(k + 1) * g4];
                let (dig, rest) = dg.split_at_mut(h);
                let (dfg, rest) = rest.split_at_mut(h);
                let (dgg, dog) = rest.split_at_mut(h);
                let dh = &s.dh[k * h..(k + 1) * h];
                let dc = &mut s.dc[k * h..(k + 1) * h];
                let cp = &cprev[k * h..(k + 1) * h];
                let tck = &tc[k * h..(k + 1) * h];
                for j in 0..h {
                    let dct = dc[j] + dh[j] * og[j] * (1.0 - tck[j] * tck[j]);
                    dog[j] = dh[j] * tck[j] * og[j] * (1.0 - og[j]);
                    dig[j] = dct * gg[j] * ig[j] * (1.0 - ig[j]);
                    dgg[j] = dct * ig[j] * (1.0 - gg[j] * gg[j]);
                    dfg[j] = dct * cp[j] * fg[j] * (1.0 - fg[j]);
                    dc[j] = dct * fg[j];
                }
            }
            // Weight gradients of this step: wx += x^T dg, wh += h_prev^T dg, b += sum dg.
            let hprev = &s.h[step * n * h..(step + 1) * n * h];
            for k in 0..n {
                let dg = &s.dg[k * g4..(k + 1) * g4];
                for (a, &d) in gb.iter_mut().zip(dg) {
                    *a += d;
                }
            }
            for i in 0..f {
                let row = &mut gwx[i * g4..(i + 1) * g4];
                // x[k, step, i] for k in 0..n, stride t * f.
                lincomb(row, &xs[step * f + i..], t * f, &s.dg[..n * g4]);
            }
            for i in 0..h {
                let row = &mut gwh[i * g4..(i + 1) * g4];
                lincomb(row, &hprev[i..], h, &s.dg[..n * g4]);
            }
            // dh for the step before: dg wh^T.
            if step > 0 {
                for k in 0..n {
                    let dh = &mut s.dh[k * h..(k + 1) * h];
                    dh.fill(0.0);
                    lincomb(dh, &s.dg[k * g4..(k + 1) * g4], 1, &s.wht);
                }
            }
        }
    }
}

/// Reusable buffers of a training step.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    gates: Vec<f32>,
    c: Vec<f32>,
    tc: Vec<f32>,
    h: Vec<f32>,
    y: Vec<f32>,
    dy: Vec<f32>,
    dh: Vec<f32>,
    dc: Vec<f32>,
    dg: Vec<f32>,
    wht: Vec<f32>,
    grad: Vec<f32>,
}

/// `dst += sum over r of coef[r * stride] * src[r]`, `src` being rows of
/// `dst.len()` values (`coef` has a value every `stride` for each row).
#[inline(always)]
fn lincomb(dst: &mut [f32], coef: &[f32], stride: usize, src: &[f32]) {
    // Blocks of `dst` stay in registers over all the rows (64 lanes are
    // eight AVX2 registers), instead of being loaded and stored once a row;
    // the rest in smaller blocks.
    let mut c0 = 0;
    c0 = lincomb_blocks::<64>(dst, coef, stride, src, c0);
    c0 = lincomb_blocks::<32>(dst, coef, stride, src, c0);
    c0 = lincomb_blocks::<16>(dst, coef, stride, src, c0);
    c0 = lincomb_blocks::<8>(dst, coef, stride, src, c0);
    lincomb_blocks::<1>(dst, coef, stride, src, c0);
}

/// [`lincomb`] on the columns from `c0` in blocks of `B`, as many as fit;
/// returns the first column left.
#[inline(always)]
fn lincomb_blocks<const B: usize>(
    dst: &mut [f32],
    coef: &[f32],
    stride: usize,
    src: &[f32],
    mut c0: usize,
) -> usize {
    let w = dst.len();
    let rows = src.len() / w;
    while c0 + B <= w {
        let mut acc = [0f32; B];
        acc.copy_from_slice(&dst[c0..c0 + B]);
        for r in 0..rows {
            let a = coef[r * stride];
            let s: &[f32; B] = src[r * w + c0..r * w + c0 + B].try_into().expect("a block");
            for k in 0..B {
                acc[k] += a * s[k];
            }
        }
        dst[c0..c0 + B].copy_from_slice(&acc);
        c0 += B;
    }
    c0
}

/// The dot product of two slices of one length.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight partial sums, so that the compiler can keep them in one vector
    // (a single running sum is a chain it may not reorder).
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    let mut sum = acc.iter().sum::<f32>();
    for (x, y) in ra.iter().zip(rb) {
        sum += x * y;
    }
    sum
}

/// Applies the gate functions to a row of `4 * h` pre-activations: sigmoid to
/// the input, forget and output gates, tanh to the cell gate.
#[inline(always)]
fn activate(g: &mut [f32], h: usize) {
    let (ifg, rest) = g.split_at_mut(2 * h);
    let (gg, og) = rest.split_at_mut(h);
    for x in ifg.iter_mut() {
        *x = sigmoid(*x);
    }
    for x in og.iter_mut() {
        *x = sigmoid(*x);
    }
    for x in gg {
        *x = tanh(*x);
    }
}

/// `e^x` to within about 2 ulp for x in [-87.3, 88] (clamped there: finite) (Cephes' `expf`: `x = n ln 2 + r`, a degree-6
/// polynomial for `e^r`, `2^n` put into the exponent bits). Branch-free, so
/// loops over it vectorise, where `f32::exp` is a call per value.
#[inline(always)]
fn exp(x: f32) -> f32 {
    let x = x.clamp(-87.3, 88.0);
    let n = (x * std::f32::consts::LOG2_E).round();
    // ln 2 in two parts, so that `n ln 2` is subtracted exactly.
    let r = x - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let p = 1.987_569_1e-4;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 5e-1;
    let er = p * r * r + r + 1.0;
    er * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

#[inline(always)]
fn tanh(x: f32) -> f32 {
    1.0 - 2.0 / (exp(2.0 * x) + 1.0)
}

/// `dst = tanh(src)`.
#[inline(always)]
fn tanh_into(dst: &mut [f32], src: &[f32]) {
    for (d, &x) in dst.iter_mut().zip(src) {
        *d = tanh(x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lstm::{Head, Lstm};
    use rng::SplitMix64;

    /// Trains a candle model with `train_group` (masked batch of `b`) and the
    /// same model by hand on the `n` unmasked samples, `steps` steps; returns
    /// the largest difference of a parameter.
    fn compare(
        head: Head,
        q: f32,
        hidden: usize,
        t: usize,
        n: usize,
        b: usize,
        steps: usize,
    ) -> f32 {
        let mut a = Lstm::new(2, hidden, 1, head, 0.01, 5).unwrap();
        a.q = q;
        let cell = a.cell();
        let mut p = a.flat().unwrap();
        let mut adam = Adam::default();
        let mut rng = SplitMix64::new(3);
        let xs: Vec<f32> = (0..b * t * 2).map(|_| rng.next_f32()).collect();
        let ys: Vec<f32> = (0..b).map(|_| rng.next_f32()).collect();
        let mask: Vec<f32> = (0..b).map(|k| if k < n { 1.0 } else { 0.0 }).collect();
        for _ in 0..steps {
            Lstm::train_group(&mut [&mut a], &xs, t, b, &ys, &mask).unwrap();
        }
        let loss = match head {
            Head::Pinball => Loss::Pinball(q),
            _ => Loss::Mse,
        };
        let mut s = Scratch::default();
        let job = Job {
            xs: &xs[..n * t * 2],
            t,
            ys: &ys[..n],
            batch: b,
            loss,
            lr: 0.01,
            epochs: steps,
        };
        cell.train(&mut p, &mut adam, &job, &mut s);
        let want = a.flat().unwrap();
        p.iter()
            .zip(&want)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    }

    #[test]
    fn training_by_hand_matches_candle_autograd() {
        // MSE, a full batch and a masked one; pinball; one step and several.
        for (head, q, n, steps) in [
            (Head::Regression, 0.5, 8, 1),
            (Head::Regression, 0.5, 5, 5),
            (Head::Pinball, 0.2, 8, 5),
        ] {
            let d = compare(head, q, 7, 4, n, 8, steps);
            // Adam moves each parameter by about lr a step; the two differ
            // only in the order of sums.
            assert!(d < 2e-5, "{head:?} n={n} steps={steps}: differs by {d}");
        }
    }

    #[test]
    fn the_forward_pass_matches_candle() {
        let a = Lstm::new(2, 5, 1, Head::Regression, 0.01, 9).unwrap();
        let x = vec![0.3f32, 0.7, 0.1, 0.9, 0.5, 0.5];
        let want = a.predict(x.clone(), 3).unwrap();
        let got = a.cell().predict(&a.flat().unwrap(), &x, 3)[0];
        assert!((want - got).abs() < 1e-6, "{want} vs {got}");
    }

    #[test]
    fn the_gate_functions_are_accurate() {
        let mut worst = (0f32, 0f32, 0f32);
        for i in -4000..=4000 {
            let x = i as f32 / 100.0;
            let e = (exp(x) - x.exp()).abs() / x.exp();
            let sg = (sigmoid(x) - 1.0 / (1.0 + (-x).exp())).abs();
            let th = (tanh(x) - x.tanh()).abs();
            worst = (worst.0.max(e), worst.1.max(sg), worst.2.max(th));
        }
        assert!(worst.0 < 4e-7, "exp relative error {}", worst.0);
        assert!(
            worst.1 < 2e-7 && worst.2 < 4e-7,
            "sigmoid {} tanh {}",
            worst.1,
            worst.2
        );
        // Saturation, not overflow or NaN, far out.
        assert!(sigmoid(-1e4) < 1e-30 && sigmoid(1e4) == 1.0);
        assert_eq!(tanh(1e4), 1.0);
        assert_eq!(tanh(-1e4), -1.0);
    }

    #[test]
    fn flat_parameters_round_trip() {
        let mut a = Lstm::new(2, 3, 1, Head::Regression, 0.01, 1).unwrap();
        let p: Vec<f32> = (0..a.cell().len()).map(|i| i as f32 / 100.0).collect();
        a.set_flat(&p).unwrap();
        assert_eq!(a.flat().unwrap(), p);
        assert!(a.set_flat(&p[1..]).is_err());
    }
}
