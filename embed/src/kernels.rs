//! Element-wise kernels of the forward pass (bias, GELU, layer norm, softmax).
//!
//! Each kernel is plain Rust run through `pulp`'s runtime dispatch: the loop bodies are
//! `#[inline(always)]` and end up inside a function compiled for AVX-512 (x86-64-v4) or
//! AVX2+FMA (x86-64-v3) when the CPU has them, so LLVM vectorises them at that width.
//! No `unsafe` here: the workspace forbids it.
//!
//! All matrices are column-major with one column per token (`data[t * rows + i]`).

use pulp::{Arch, Simd, WithSimd};

/// Lanes of the independent accumulators used for reductions: 16 f32 = one AVX-512
/// register (two AVX2 registers); keeping them independent lets LLVM vectorise the
/// sums without reassociating floating-point additions.
const LANES: usize = 16;

#[derive(Clone, Copy, Debug)]
pub(crate) struct Kernels {
    arch: Arch,
}

impl Kernels {
    pub(crate) fn detect() -> Self {
        Self { arch: Arch::new() }
    }

    /// `data[:, t] += bias` for every column.
    pub(crate) fn add_bias(&self, data: &mut [f32], bias: &[f32]) {
        self.arch.dispatch(AddBias { data, bias });
    }

    /// `data[:, t] = gelu(data[:, t] + bias)` (exact-erf GELU, erf to ~4e-7).
    pub(crate) fn bias_gelu(&self, data: &mut [f32], bias: &[f32]) {
        self.arch.dispatch(BiasGelu { data, bias });
    }

    /// `x[:, t] = layer_norm(x[:, t] + y[:, t] + bias)`.
    pub(crate) fn residual_layer_norm(
        &self,
        x: &mut [f32],
        y: &[f32],
        bias: &[f32],
        gamma: &[f32],
        beta: &[f32],
        eps: f32,
    ) {
        self.arch.dispatch(ResidualLayerNorm {
            x,
            y,
            bias,
            gamma,
            beta,
            eps,
        });
    }

    /// `x[:, t] = layer_norm(x[:, t])`.
    pub(crate) fn layer_norm(&self, x: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) {
        self.arch.dispatch(LayerNorm {
            x,
            gamma,
            beta,
            eps,
        });
    }

    /// Softmax of every column of length `rows`, in place.
    pub(crate) fn softmax_columns(&self, data: &mut [f32], rows: usize) {
        self.arch.dispatch(SoftmaxColumns { data, rows });
    }
}

struct AddBias<'a> {
    data: &'a mut [f32],
    bias: &'a [f32],
}

impl WithSimd for AddBias<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        if self.bias.is_empty() {
            return;
        }
        for col in self.data.chunks_exact_mut(self.bias.len()) {
            for (v, b) in col.iter_mut().zip(self.bias) {
                *v += *b;
            }
        }
    }
}

struct BiasGelu<'a> {
    data: &'a mut [f32],
    bias: &'a [f32],
}

impl WithSimd for BiasGelu<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        if self.bias.is_empty() {
            return;
        }
        for col in self.data.chunks_exact_mut(self.bias.len()) {
            for (v, b) in col.iter_mut().zip(self.bias) {
                *v = gelu(*v + *b);
            }
        }
    }
}

/// GELU with the exact (erf) formulation, as BERT's `hidden_act = "gelu"`.
#[inline(always)]
pub(crate) fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// Rational approximation of erf on [-4, 4] (erf is ±1 in f32 beyond), branch-free so
/// that it vectorises; max absolute error ~4e-7 against the exact function.
#[inline(always)]
pub(crate) fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = -2.726_142_3e-10_f32;
    p = p * x2 + 2.770_681_4e-8;
    p = p * x2 + -2.101_024e-6;
    p = p * x2 + -5.692_506_4e-5;
    p = p * x2 + -7.349_906_3e-4;
    p = p * x2 + -2.954_600_1e-3;
    p = p * x2 + -1.609_603_3e-2;
    p *= x;
    let mut q = -1.456_607_2e-5_f32;
    q = q * x2 + -2.133_740_6e-4;
    q = q * x2 + -1.682_827e-3;
    q = q * x2 + -7.373_329e-3;
    q = q * x2 + -1.426_473_9e-2;
    p / q
}

/// exp(x) for x ≤ 0 (softmax after subtracting the maximum): Cephes-style range
/// reduction and polynomial, relative error ~2e-7; inputs below -87 give ~0.
#[inline(always)]
pub(crate) fn exp_neg(x: f32) -> f32 {
    let x = x.max(-87.0);
    let fx = (x * std::f32::consts::LOG2_E + 0.5).floor();
    let r = x - fx * 0.693_359_4 - fx * -2.121_944_4e-4;
    let mut y = 1.987_569_1e-4_f32;
    y = y * r + 1.398_2e-3;
    y = y * r + 8.333_452e-3;
    y = y * r + 4.166_579_6e-2;
    y = y * r + 0.166_666_65;
    y = y * r + 0.5;
    y = y * r * r + r + 1.0;
    // fx is in [-126, 1]: a normal power of two.
    let pow2 = f32::from_bits((((fx as i32) + 127) as u32) << 23);
    y * pow2
}

#[inline(always)]
fn sum(v: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = v.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..LANES {
            acc[i] += c[i];
        }
    }
    let mut s = 0f32;
    for r in rest {
        s += *r;
    }
    for a in acc {
        s += a;
    }
    s
}

#[inline(always)]
fn sum_sq_dev(v: &[f32], mean: f32) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = v.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..LANES {
            let d = c[i] - mean;
            acc[i] += d * d;
        }
    }
    let mut s = 0f32;
    for r in rest {
        let d = *r - mean;
        s += d * d;
    }
    for a in acc {
        s += a;
    }
    s
}

#[inline(always)]
fn max(v: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = v.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..LANES {
            acc[i] = if c[i] > acc[i] { c[i] } else { acc[i] };
        }
    }
    let mut m = f32::NEG_INFINITY;
    for r in rest {
        m = if *r > m { *r } else { m };
    }
    for a in acc {
        m = if a > m { a } else { m };
    }
    m
}

#[inline(always)]
fn normalize(col: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) {
    let n = col.len() as f32;
    let mean = sum(col) / n;
    let var = sum_sq_dev(col, mean) / n;
    let inv = 1.0 / (var + eps).sqrt();
    for ((v, g), b) in col.iter_mut().zip(gamma).zip(beta) {
        *v = (*v - mean) * inv * *g + *b;
    }
}

struct ResidualLayerNorm<'a> {
    x: &'a mut [f32],
    y: &'a [f32],
    bias: &'a [f32],
    gamma: &'a [f32],
    beta: &'a [f32],
    eps: f32,
}

impl WithSimd for ResidualLayerNorm<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let h = self.gamma.len();
        if h == 0 {
            return;
        }
        for (xc, yc) in self.x.chunks_exact_mut(h).zip(self.y.chunks_exact(h)) {
            for ((x, y), b) in xc.iter_mut().zip(yc).zip(self.bias) {
                *x += *y + *b;
            }
            normalize(xc, self.gamma, self.beta, self.eps);
        }
    }
}

struct LayerNorm<'a> {
    x: &'a mut [f32],
    gamma: &'a [f32],
    beta: &'a [f32],
    eps: f32,
}

impl WithSimd for LayerNorm<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let h = self.gamma.len();
        if h == 0 {
            return;
        }
        for xc in self.x.chunks_exact_mut(h) {
            normalize(xc, self.gamma, self.beta, self.eps);
        }
    }
}

struct SoftmaxColumns<'a> {
    data: &'a mut [f32],
    rows: usize,
}

impl WithSimd for SoftmaxColumns<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        if self.rows == 0 {
            return;
        }
        for col in self.data.chunks_exact_mut(self.rows) {
            let m = max(col);
            for v in col.iter_mut() {
                *v = exp_neg(*v - m);
            }
            let inv = 1.0 / sum(col);
            for v in col.iter_mut() {
                *v *= inv;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_is_accurate() {
        let mut worst = 0f64;
        for i in -60_000..=60_000 {
            let x = i as f32 / 10_000.0;
            let err = (f64::from(erf(x)) - libm::erf(f64::from(x))).abs();
            worst = worst.max(err);
        }
        assert!(worst < 1e-6, "max erf error {worst}");
    }

    #[test]
    fn exp_is_accurate() {
        let mut worst = 0f64;
        for i in 0..=870_000 {
            let x = -(i as f32) / 10_000.0;
            let exact = f64::from(x).exp();
            let rel = (f64::from(exp_neg(x)) - exact).abs() / exact;
            worst = worst.max(rel);
        }
        assert!(worst < 1e-6, "max exp relative error {worst}");
    }

    /// The detected instruction set and every one below it that this CPU has.
    fn all_kernels() -> Vec<Kernels> {
        let mut out = vec![Kernels::detect(), Kernels { arch: Arch::Scalar }];
        #[cfg(target_arch = "x86_64")]
        if let Some(v3) = pulp::x86::V3::try_new() {
            out.push(Kernels { arch: Arch::V3(v3) });
        }
        out
    }

    #[test]
    fn dispatched_kernels_match_scalar_formulas() {
        for k in all_kernels() {
            check_kernels(k);
        }
    }

    fn check_kernels(k: Kernels) {
        let rows = 37;
        let mut data: Vec<f32> = (0..rows * 3)
            .map(|i| (i as f32 * 0.37).sin() * 5.0)
            .collect();
        let orig = data.clone();
        k.softmax_columns(&mut data, rows);
        for c in 0..3 {
            let col = &orig[c * rows..(c + 1) * rows];
            let m = col.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let s: f64 = col.iter().map(|v| f64::from(*v - m).exp()).sum();
            for r in 0..rows {
                let want = f64::from(col[r] - m).exp() / s;
                assert!((f64::from(data[c * rows + r]) - want).abs() < 1e-6);
            }
        }
        let bias: Vec<f32> = (0..rows).map(|i| i as f32 * 0.01).collect();
        let mut g = orig.clone();
        k.bias_gelu(&mut g, &bias);
        for (i, v) in g.iter().enumerate() {
            let x = f64::from(orig[i] + bias[i % rows]);
            let want = 0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2));
            assert!((f64::from(*v) - want).abs() < 2e-6, "{v} vs {want}");
        }
        let gamma: Vec<f32> = (0..rows).map(|i| 1.0 + i as f32 * 0.02).collect();
        let beta: Vec<f32> = (0..rows).map(|i| i as f32 * -0.01).collect();
        let mut x = orig.clone();
        let y: Vec<f32> = orig.iter().map(|v| v * 0.5).collect();
        k.residual_layer_norm(&mut x, &y, &bias, &gamma, &beta, 1e-12);
        for c in 0..3 {
            let v: Vec<f64> = (0..rows)
                .map(|r| {
                    f64::from(orig[c * rows + r]) + f64::from(y[c * rows + r]) + f64::from(bias[r])
                })
                .collect();
            let mean = v.iter().sum::<f64>() / rows as f64;
            let var = v.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / rows as f64;
            for r in 0..rows {
                let want =
                    (v[r] - mean) / (var + 1e-12).sqrt() * f64::from(gamma[r]) + f64::from(beta[r]);
                assert!(
                    (f64::from(x[c * rows + r]) - want).abs() < 1e-5,
                    "{} vs {want}",
                    x[c * rows + r]
                );
            }
        }
    }
}
