//! A small LSTM (one layer, linear head) on candle tensors, with its own Adam.
//!
//! Why not `candle_nn::LSTM`: the predictors need a *batched path across models* —
//! every vSSD has its own online-trained weights, and predicting for 1,000 vSSDs one
//! by one pays candle's per-op overhead 1,000 times. Here every weight carries a
//! leading "model" dimension, so the weights of many models can be stacked with
//! `Tensor::cat` and one forward pass (batched matmuls) serves them all. The maths is
//! still candle's (matmul, sigmoid, tanh, softmax, autograd and `AdamW` with no weight
//! decay, i.e. Adam); only the wiring of the cell is written out.
//!
//! Weights are initialised from a seeded `rng::SplitMix64` stream (uniform in ±1/√hidden, as
//! PyTorch does), so runs are deterministic without relying on the device's RNG.

use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use rng::SplitMix64;

use crate::PredictError;

/// What the head of the network computes and how it is trained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Head {
    /// Softmax over classes, trained with cross-entropy.
    CrossEntropy,
    /// Softmax over classes, trained with MSE against a one-hot target (the artifact's loss).
    SoftmaxMse,
    /// One linear output, trained with MSE (regression).
    Regression,
    /// One linear output, trained with the pinball loss at `Lstm::q` (quantile regression).
    Pinball,
}

/// `models` LSTM models of one shape, stacked (their weights share tensors along a
/// leading dimension, so they train and predict in one pass): input `features` per
/// time step, `hidden` units, `outputs` outputs.
pub(crate) struct Lstm {
    pub models: usize,
    pub features: usize,
    pub hidden: usize,
    pub outputs: usize,
    head: Head,
    /// Quantile of the pinball head.
    pub q: f32,
    /// `[M, F, 4H]`, `[M, H, 4H]`, `[M, 1, 4H]`, `[M, H, O]`, `[M, 1, O]`.
    vars: [Var; 5],
    /// Candle's Adam; `None` for a model trained by hand (`cell.rs`).
    opt: Option<AdamW>,
}

impl std::fmt::Debug for Lstm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lstm")
            .field("features", &self.features)
            .field("hidden", &self.hidden)
            .field("outputs", &self.outputs)
            .field("head", &self.head)
            .finish()
    }
}

/// A variable of `shape` drawn uniform in `[-a, a)` from `rng`.
fn var(rng: &mut SplitMix64, shape: &[usize], a: f32) -> Result<Var, PredictError> {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| (2.0 * rng.next_f32() - 1.0) * a).collect();
    Ok(Var::from_tensor(&Tensor::from_vec(
        v,
        shape,
        &Device::Cpu,
    )?)?)
}

impl Lstm {
    pub fn new(
        features: usize,
        hidden: usize,
        outputs: usize,
        head: Head,
        lr: f64,
        seed: u64,
    ) -> Result<Self, PredictError> {
        Self::stacked(1, features, hidden, outputs, head, lr, seed)
    }

    /// `models` independent models in one set of tensors.
    pub fn stacked(
        models: usize,
        features: usize,
        hidden: usize,
        outputs: usize,
        head: Head,
        lr: f64,
        seed: u64,
    ) -> Result<Self, PredictError> {
        let mut rng = SplitMix64::new(seed);
        let a = 1.0 / (hidden as f32).sqrt();
        let m = models.max(1);
        let vars = [
            var(&mut rng, &[m, features, 4 * hidden], a)?,
            var(&mut rng, &[m, hidden, 4 * hidden], a)?,
            var(&mut rng, &[m, 1, 4 * hidden], a)?,
            var(&mut rng, &[m, hidden, outputs], a)?,
            var(&mut rng, &[m, 1, outputs], a)?,
        ];
        let opt = AdamW::new(
            vars.to_vec(),
            ParamsAdamW {
                lr,
                weight_decay: 0.0,
                ..Default::default()
            },
        )?;
        Ok(Self {
            models: m,
            features,
            hidden,
            outputs,
            head,
            q: 0.5,
            vars,
            opt: Some(opt),
        })
    }

    /// Drops candle's optimizer state (two moments per parameter), for a
    /// model that trains by hand (`cell.rs` keeps its own).
    pub fn drop_optimizer(&mut self) {
        self.opt = None;
    }

    fn optimizer(&mut self) -> Result<&mut AdamW, PredictError> {
        self.opt.as_mut().ok_or_else(|| {
            PredictError::Config("this model trains by hand, not through candle".into())
        })
    }

    /// Parameters (weights and biases) of all the stacked models.
    pub fn params(&self) -> usize {
        let (f, h, o) = (self.features, self.hidden, self.outputs);
        self.models * (f * 4 * h + h * 4 * h + 4 * h + h * o + o)
    }

    /// Bytes the model holds: f32 parameters plus Adam's two moments per parameter.
    pub fn bytes(&self) -> usize {
        3 * 4 * self.params()
    }

    /// Forward pass of `M` models stacked along dimension 0 (`w` as from
    /// [`Lstm::stack`]) over `x: [M, B, T, F]`; returns raw outputs `[M, B, O]`.
    fn forward(w: &[Tensor; 5], x: &Tensor) -> Result<Tensor, PredictError> {
        let (m, b, t, f) = x.dims4()?;
        let h4 = w[1].dim(2)?;
        let h = h4 / 4;
        // Input projections of every time step at once: [M, B*T, F] x [M, F, 4H].
        let xp = x
            .reshape((m, b * t, f))?
            .matmul(&w[0])?
            .broadcast_add(&w[2])?
            .reshape((m, b, t, h4))?;
        let mut hs = Tensor::zeros((m, b, h), DType::F32, &Device::Cpu)?;
        let mut cs = hs.clone();
        for step in 0..t {
            let g = xp.narrow(2, step, 1)?.squeeze(2)?.add(&hs.matmul(&w[1])?)?;
            let i = candle_nn::ops::sigmoid(&g.narrow(2, 0, h)?)?;
            let fg = candle_nn::ops::sigmoid(&g.narrow(2, h, h)?)?;
            let gg = g.narrow(2, 2 * h, h)?.tanh()?;
            let o = candle_nn::ops::sigmoid(&g.narrow(2, 3 * h, h)?)?;
            cs = fg.mul(&cs)?.add(&i.mul(&gg)?)?;
            hs = o.mul(&cs.tanh()?)?;
        }
        Ok(hs.matmul(&w[3])?.broadcast_add(&w[4])?)
    }

    fn own(&self) -> [Tensor; 5] {
        std::array::from_fn(|k| self.vars[k].as_tensor().clone())
    }

    /// The weights of several (stack, index) models of one shape, stacked along the
    /// model dimension.
    fn stack(models: &[(&Lstm, usize)]) -> Result<[Tensor; 5], PredictError> {
        let mut out: Vec<Tensor> = Vec::with_capacity(5);
        for k in 0..5 {
            let ts = models
                .iter()
                .map(|(m, i)| m.vars[k].as_tensor().narrow(0, *i, 1))
                .collect::<Result<Vec<Tensor>, _>>()?;
            out.push(Tensor::cat(&ts, 0)?.detach());
        }
        Ok(out.try_into().expect("five weights"))
    }

    fn input(&self, m: usize, b: usize, t: usize, xs: Vec<f32>) -> Result<Tensor, PredictError> {
        Ok(Tensor::from_vec(
            xs,
            (m, b, t, self.features),
            &Device::Cpu,
        )?)
    }

    /// One Adam step on a batch: `xs` holds `B` sequences of `t` steps of `features`
    /// values each (flattened), `targets` one class (as f32) or value per sequence.
    /// Returns the loss before the step.
    pub fn train(&mut self, xs: &[f32], t: usize, targets: &[f32]) -> Result<f32, PredictError> {
        let b = targets.len();
        if b == 0 {
            return Ok(0.0);
        }
        if self.models > 1 {
            return self.train_stacked(xs, t, b / self.models, targets, &vec![1.0; b]);
        }
        let x = self.input(1, b, t, xs.to_vec())?;
        let out = Self::forward(&self.own(), &x)?.squeeze(0)?; // [B, O]
        let loss = match self.head {
            Head::CrossEntropy => {
                let tg: Vec<u32> = targets.iter().map(|&c| c as u32).collect();
                let tg = Tensor::from_vec(tg, b, &Device::Cpu)?;
                candle_nn::loss::cross_entropy(&out, &tg)?
            }
            Head::SoftmaxMse => {
                let mut oh = vec![0f32; b * self.outputs];
                for (i, &c) in targets.iter().enumerate() {
                    oh[i * self.outputs + c as usize] = 1.0;
                }
                let oh = Tensor::from_vec(oh, (b, self.outputs), &Device::Cpu)?;
                candle_nn::loss::mse(&candle_nn::ops::softmax_last_dim(&out)?, &oh)?
            }
            Head::Regression => {
                let tg = Tensor::from_vec(targets.to_vec(), (b, 1), &Device::Cpu)?;
                candle_nn::loss::mse(&out, &tg)?
            }
            Head::Pinball => {
                let tg = Tensor::from_vec(targets.to_vec(), (b, 1), &Device::Cpu)?;
                let d = tg.sub(&out)?;
                let q = self.q as f64;
                d.affine(q, 0.0)?
                    .maximum(&d.affine(q - 1.0, 0.0)?)?
                    .mean_all()?
            }
        };
        self.optimizer()?.backward_step(&loss)?;
        Ok(loss.to_scalar::<f32>()?)
    }

    /// One Adam step of every stacked regression model at once: `xs` holds `B`
    /// sequences per model (model-major), `targets` and `mask` one value per
    /// sequence; masked-out (0) sequences do not count. Returns the summed loss.
    pub fn train_stacked(
        &mut self,
        xs: &[f32],
        t: usize,
        b: usize,
        targets: &[f32],
        mask: &[f32],
    ) -> Result<f32, PredictError> {
        let m = self.models;
        let x = self.input(m, b, t, xs.to_vec())?;
        let out = Self::forward(&self.own(), &x)?; // [M, B, 1]
        let tg = Tensor::from_vec(targets.to_vec(), (m, b, 1), &Device::Cpu)?;
        let mk = Tensor::from_vec(mask.to_vec(), (m, b, 1), &Device::Cpu)?;
        let d = tg.sub(&out)?;
        let per = match self.head {
            Head::Pinball => {
                let q = self.q as f64;
                d.affine(q, 0.0)?.maximum(&d.affine(q - 1.0, 0.0)?)?
            }
            _ => d.sqr()?,
        };
        // Sum over models of each model's mean loss: the models' gradients stay apart.
        let loss = per.mul(&mk)?.sum_all()?.affine(1.0 / b as f64, 0.0)?;
        self.optimizer()?.backward_step(&loss)?;
        Ok(loss.to_scalar::<f32>()?)
    }

    /// One Adam step of several single regression models of one shape in one pass:
    /// their weights are concatenated (differentiably) along the model dimension, so
    /// one forward and one backward pass give every model its own gradients, and each
    /// model's own Adam then steps. Inputs as in [`Lstm::train_stacked`], `B` per model.
    pub fn train_group(
        models: &mut [&mut Lstm],
        xs: &[f32],
        t: usize,
        b: usize,
        targets: &[f32],
        mask: &[f32],
    ) -> Result<(), PredictError> {
        let Some(first) = models.first() else {
            return Ok(());
        };
        let (m, head, q, f) = (models.len(), first.head, first.q as f64, first.features);
        let w: Vec<Tensor> = (0..5)
            .map(|k| {
                let ts: Vec<&Tensor> = models.iter().map(|l| l.vars[k].as_tensor()).collect();
                Tensor::cat(&ts, 0)
            })
            .collect::<Result<_, _>>()?;
        let w: [Tensor; 5] = w.try_into().expect("five weights");
        let x = Tensor::from_vec(xs.to_vec(), (m, b, t, f), &Device::Cpu)?;
        let out = Self::forward(&w, &x)?;
        let tg = Tensor::from_vec(targets.to_vec(), (m, b, 1), &Device::Cpu)?;
        let mk = Tensor::from_vec(mask.to_vec(), (m, b, 1), &Device::Cpu)?;
        let d = tg.sub(&out)?;
        let per = match head {
            Head::Pinball => d.affine(q, 0.0)?.maximum(&d.affine(q - 1.0, 0.0)?)?,
            _ => d.sqr()?,
        };
        let loss = per.mul(&mk)?.sum_all()?.affine(1.0 / b as f64, 0.0)?;
        let grads = loss.backward()?;
        for l in models.iter_mut() {
            l.optimizer()?.step(&grads)?;
        }
        Ok(())
    }

    /// Outputs of several models at once: `xs` holds one sequence per model
    /// (`models.len()` sequences of `t` steps). Classification heads give the argmax
    /// class (as f32), regression heads the value.
    pub fn predict_many(
        models: &[(&Lstm, usize)],
        xs: Vec<f32>,
        t: usize,
    ) -> Result<Vec<f32>, PredictError> {
        let Some(&(first, _)) = models.first() else {
            return Ok(Vec::new());
        };
        let m = models.len();
        let x = first.input(m, 1, t, xs)?;
        let w = if m == 1 && first.models == 1 {
            first.own()
        } else {
            Self::stack(models)?
        };
        let out = Self::forward(&w, &x)?.reshape((m, first.outputs))?;
        Ok(match first.head {
            Head::Regression | Head::Pinball => out.flatten_all()?.to_vec1::<f32>()?,
            _ => out
                .argmax(D::Minus1)?
                .to_vec1::<u32>()?
                .into_iter()
                .map(|c| c as f32)
                .collect(),
        })
    }

    /// The output of (the first) model for one sequence of `t` steps.
    pub fn predict(&self, xs: Vec<f32>, t: usize) -> Result<f32, PredictError> {
        self.predict_one(0, xs, t)
    }

    /// The output of stacked model `i` for one sequence of `t` steps.
    pub fn predict_one(&self, i: usize, xs: Vec<f32>, t: usize) -> Result<f32, PredictError> {
        Ok(Self::predict_many(&[(self, i)], xs, t)?[0])
    }

    /// The parameters of a one-model, one-output LSTM, flattened in the order of
    /// [`crate::cell::Cell`].
    pub fn flat(&self) -> Result<Vec<f32>, PredictError> {
        let mut out = Vec::with_capacity(self.params());
        for v in &self.vars {
            out.extend(v.as_tensor().flatten_all()?.to_vec1::<f32>()?);
        }
        Ok(out)
    }

    /// Sets the parameters from [`Lstm::flat`]'s order.
    pub fn set_flat(&mut self, p: &[f32]) -> Result<(), PredictError> {
        if p.len() != self.params() {
            return Err(PredictError::Config(format!(
                "{} parameters for a model of {}",
                p.len(),
                self.params()
            )));
        }
        let mut at = 0;
        for v in &self.vars {
            let shape = v.as_tensor().shape().clone();
            let n = shape.elem_count();
            v.set(&Tensor::from_slice(&p[at..at + n], shape, &Device::Cpu)?)?;
            at += n;
        }
        Ok(())
    }

    /// The cell of a one-model, one-output LSTM, for [`crate::cell`].
    pub fn cell(&self) -> crate::cell::Cell {
        crate::cell::Cell {
            features: self.features,
            hidden: self.hidden,
        }
    }

    /// Whether two models can be stacked into one forward pass.
    pub fn same_shape(&self, o: &Lstm) -> bool {
        (self.features, self.hidden, self.outputs, self.head)
            == (o.features, o.hidden, o.outputs, o.head)
            && self.q == o.q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_a_periodic_series() {
        // Classes cycle 0,1,2,3,0,...; from the last 3 values (scaled) predict the next.
        let mut m = Lstm::new(1, 16, 4, Head::CrossEntropy, 0.02, 7).unwrap();
        let series: Vec<usize> = (0..64).map(|i| i % 4).collect();
        let mut xs = Vec::new();
        let mut ys = Vec::new();
        for i in 0..series.len() - 3 {
            xs.extend(series[i..i + 3].iter().map(|&v| v as f32 / 3.0));
            ys.push(series[i + 3] as f32);
        }
        let first = m.train(&xs, 3, &ys).unwrap();
        let mut last = first;
        for _ in 0..150 {
            last = m.train(&xs, 3, &ys).unwrap();
        }
        assert!(last < first / 4.0, "loss {first} -> {last}");
        for i in 0..4 {
            let x: Vec<f32> = (0..3).map(|k| ((i + k) % 4) as f32 / 3.0).collect();
            assert_eq!(m.predict(x, 3).unwrap() as usize, (i + 3) % 4);
        }
    }

    #[test]
    fn regression_fits_a_constant_and_stacking_matches_single() {
        let mut a = Lstm::new(2, 8, 1, Head::Regression, 0.05, 1).unwrap();
        let b = Lstm::new(2, 8, 1, Head::Regression, 0.05, 2).unwrap();
        let xs = vec![0.1f32, 0.2, 0.3, 0.4];
        for _ in 0..200 {
            a.train(&xs, 2, &[0.7]).unwrap();
        }
        assert!((a.predict(xs.clone(), 2).unwrap() - 0.7).abs() < 0.05);
        let both =
            Lstm::predict_many(&[(&a, 0), (&b, 0)], [xs.clone(), xs.clone()].concat(), 2).unwrap();
        assert!((both[0] - a.predict(xs.clone(), 2).unwrap()).abs() < 1e-5);
        assert!((both[1] - b.predict(xs, 2).unwrap()).abs() < 1e-5);
    }

    #[test]
    fn pinball_predicts_a_low_quantile() {
        // Targets 0.1..=1.0 for the same input: the 20% quantile is about 0.2-0.3,
        // the MSE fit about 0.55.
        let mut m = Lstm::new(1, 8, 1, Head::Pinball, 0.05, 4).unwrap();
        m.q = 0.2;
        let ys: Vec<f32> = (1..=10).map(|k| k as f32 / 10.0).collect();
        let xs = vec![0.5f32; 10 * 2];
        for _ in 0..300 {
            m.train(&xs, 2, &ys).unwrap();
        }
        let p = m.predict(vec![0.5, 0.5], 2).unwrap();
        assert!((0.1..0.35).contains(&p), "{p}");
    }

    #[test]
    fn stacked_models_train_apart() {
        // Two stacked regressors with different targets; the second sees only masked
        // samples at first and must not move.
        let mut s = Lstm::stacked(2, 1, 8, 1, Head::Regression, 0.05, 3).unwrap();
        let before = s.predict_one(1, vec![0.5, 0.5], 2).unwrap();
        let xs = vec![0.5f32; 2 * 2];
        for _ in 0..100 {
            s.train_stacked(&xs, 2, 1, &[0.9, 0.0], &[1.0, 0.0])
                .unwrap();
        }
        assert!((s.predict_one(0, vec![0.5, 0.5], 2).unwrap() - 0.9).abs() < 0.05);
        assert_eq!(s.predict_one(1, vec![0.5, 0.5], 2).unwrap(), before);
        for _ in 0..200 {
            s.train_stacked(&xs, 2, 1, &[0.9, 0.2], &[1.0, 1.0])
                .unwrap();
        }
        assert!((s.predict_one(1, vec![0.5, 0.5], 2).unwrap() - 0.2).abs() < 0.05);
    }

    #[test]
    fn group_training_equals_separate_training() {
        let mk = || {
            (
                Lstm::new(2, 6, 1, Head::Regression, 0.02, 11).unwrap(),
                Lstm::new(2, 6, 1, Head::Regression, 0.02, 12).unwrap(),
            )
        };
        let (mut a1, mut b1) = mk();
        let (mut a2, mut b2) = mk();
        let xa = vec![0.1f32, 0.2, 0.3, 0.4];
        let xb = vec![0.9f32, 0.8, 0.7, 0.6];
        for _ in 0..20 {
            a1.train(&xa, 2, &[0.3]).unwrap();
            b1.train(&xb, 2, &[0.6]).unwrap();
            Lstm::train_group(
                &mut [&mut a2, &mut b2],
                &[xa.clone(), xb.clone()].concat(),
                2,
                1,
                &[0.3, 0.6],
                &[1.0, 1.0],
            )
            .unwrap();
        }
        for (p, q, x) in [(&a1, &a2, &xa), (&b1, &b2, &xb)] {
            let (u, v) = (
                p.predict(x.clone(), 2).unwrap(),
                q.predict(x.clone(), 2).unwrap(),
            );
            assert!((u - v).abs() < 1e-4, "{u} vs {v}");
        }
    }

    #[test]
    fn seeded_init_is_deterministic() {
        let a = Lstm::new(3, 4, 5, Head::SoftmaxMse, 0.01, 9).unwrap();
        let b = Lstm::new(3, 4, 5, Head::SoftmaxMse, 0.01, 9).unwrap();
        let x = vec![0.5f32; 6];
        assert_eq!(a.predict(x.clone(), 2).unwrap(), b.predict(x, 2).unwrap());
        assert_eq!(a.params(), 3 * 16 + 4 * 16 + 16 + 4 * 5 + 5);
    }
}
