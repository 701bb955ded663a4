//! Matrix products over `f32` slices: strided views checked against their slices, and
//! [`matmul`] through the kernels faer runs on x86-64 (`private-gemm-x86`, AVX-512 or AVX2 +
//! FMA chosen at run time) or, on other CPUs, the `gemm` crate's.
//!
//! Both take raw pointers and strides; this module is the one place that passes them, after
//! checking that every element a view addresses lies inside its slice. (faer itself, a whole
//! linear algebra library around these kernels, took a tenth of a first release build.)

/// A read-only matrix: element (i, j) at `data[i * rs + j * cs]`.
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
}

/// A matrix written in place: element (i, j) at `data[i + j * cs]`, columns apart
/// (`cs >= rows`).
pub(crate) struct MatMut<'a> {
    data: &'a mut [f32],
    rows: usize,
    cols: usize,
    cs: usize,
}

/// Whether a view of `rows` × `cols` with strides `rs`, `cs` stays within `len` elements.
fn fits(len: usize, rows: usize, cols: usize, rs: usize, cs: usize) -> bool {
    rows == 0
        || cols == 0
        || (rows - 1)
            .checked_mul(rs)
            .zip((cols - 1).checked_mul(cs))
            .and_then(|(a, b)| a.checked_add(b))
            .is_some_and(|last| last < len)
}

impl<'a> Mat<'a> {
    /// The `rows` × `cols` column-major matrix at the start of `data`.
    pub(crate) fn col_major(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self::strided(data, rows, cols, 1, rows)
    }

    fn strided(data: &'a [f32], rows: usize, cols: usize, rs: usize, cs: usize) -> Self {
        assert!(
            fits(data.len(), rows, cols, rs, cs),
            "matrix view outside its slice"
        );
        Self {
            data,
            rows,
            cols,
            rs,
            cs,
        }
    }

    /// The `rows` × `cols` block whose first element is (`row`, `col`).
    pub(crate) fn block(self, row: usize, col: usize, rows: usize, cols: usize) -> Self {
        assert!(
            row + rows <= self.rows && col + cols <= self.cols,
            "block outside the matrix"
        );
        let start = (rows > 0 && cols > 0).then(|| row * self.rs + col * self.cs);
        Self::strided(
            &self.data[start.unwrap_or(0).min(self.data.len())..],
            rows,
            cols,
            self.rs,
            self.cs,
        )
    }

    pub(crate) fn transpose(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }

    pub(crate) fn cols(&self) -> usize {
        self.cols
    }

    #[cfg(test)]
    fn at(&self, row: usize, col: usize) -> f32 {
        self.data[row * self.rs + col * self.cs]
    }
}

impl<'a> MatMut<'a> {
    /// The `rows` × `cols` column-major matrix at the start of `data`.
    pub(crate) fn col_major(data: &'a mut [f32], rows: usize, cols: usize) -> Self {
        Self::with_col_stride(data, rows, cols, rows)
    }

    /// `rows` × `cols` at the start of `data`, its columns `cs` apart.
    pub(crate) fn with_col_stride(
        data: &'a mut [f32],
        rows: usize,
        cols: usize,
        cs: usize,
    ) -> Self {
        assert!(
            cs >= rows && fits(data.len(), rows, cols, 1, cs),
            "matrix view outside its slice"
        );
        Self {
            data,
            rows,
            cols,
            cs,
        }
    }

    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    pub(crate) fn cols(&self) -> usize {
        self.cols
    }

    /// Copies `src` (`rows` × `self.cols`, column-major) into the rows from `row`.
    pub(crate) fn copy_rows_from(&mut self, row: usize, src: &[f32], rows: usize) {
        assert!(row + rows <= self.rows && src.len() >= rows * self.cols);
        for j in 0..self.cols {
            let at = j * self.cs + row;
            self.data[at..at + rows].copy_from_slice(&src[j * rows..(j + 1) * rows]);
        }
    }
}

/// `dst = alpha · lhs · rhs`, on the calling thread.
pub(crate) fn matmul(dst: MatMut<'_>, lhs: Mat<'_>, rhs: Mat<'_>, alpha: f32) {
    #[cfg(target_arch = "x86_64")]
    if let Some(instructions) = x86::instructions() {
        x86::matmul(instructions, dst, lhs, rhs, alpha);
        return;
    }
    portable(dst, lhs, rhs, alpha);
}

/// What every kernel call below starts with: the shapes must agree, and a product with a
/// dimension of 0 is done here (nothing to write, or zeros for an empty inner dimension).
/// Returns whether the kernel has work left. With the views checked as they were made (every
/// element they address lies inside their slice) and `dst` borrowed mutably (aliasing neither
/// operand, its columns apart), this is what makes the kernels' raw-pointer calls sound.
fn prepare(dst: &mut MatMut<'_>, lhs: &Mat<'_>, rhs: &Mat<'_>) -> bool {
    assert!(
        lhs.rows == dst.rows && rhs.cols == dst.cols && lhs.cols == rhs.rows,
        "matrix product of mismatched shapes"
    );
    if dst.rows == 0 || dst.cols == 0 {
        return false;
    }
    if lhs.cols == 0 {
        for j in 0..dst.cols {
            dst.data[j * dst.cs..j * dst.cs + dst.rows].fill(0.0);
        }
        return false;
    }
    true
}

/// A stride as the kernels take it. A stride beyond `isize` belongs to a dimension of 1
/// ([`fits`]), where it is never applied.
fn stride(s: usize) -> isize {
    isize::try_from(s).unwrap_or(isize::MAX)
}

/// Through `gemm`: any CPU.
#[allow(unsafe_code)]
fn portable(mut dst: MatMut<'_>, lhs: Mat<'_>, rhs: Mat<'_>, alpha: f32) {
    if !prepare(&mut dst, &lhs, &rhs) {
        return;
    }
    // SAFETY: see `prepare`; one thread, `dst` not read.
    unsafe {
        gemm::gemm(
            dst.rows,
            dst.cols,
            lhs.cols,
            dst.data.as_mut_ptr(),
            stride(dst.cs),
            1,
            false,
            lhs.data.as_ptr(),
            stride(lhs.cs),
            stride(lhs.rs),
            rhs.data.as_ptr(),
            stride(rhs.cs),
            stride(rhs.rs),
            0.0,
            alpha,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// The x86-64 kernels faer uses on AVX2 + FMA and AVX-512 (faster than `gemm` on the narrow
/// products of short texts: 80 against 50 GFLOP/s at 1,152 × 384 × 44 here).
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Mat, MatMut, prepare, stride};
    use private_gemm_x86::{Accum, DType, DstKind, IType, InstrSet};

    /// Whether this CPU has the instructions of `set`.
    pub(super) fn available(set: InstrSet) -> bool {
        match set {
            InstrSet::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            InstrSet::Avx256 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
        }
    }

    /// The widest set this CPU has, if any.
    pub(super) fn instructions() -> Option<InstrSet> {
        [InstrSet::Avx512, InstrSet::Avx256]
            .into_iter()
            .find(|&set| available(set))
    }

    #[allow(unsafe_code)]
    pub(super) fn matmul(
        instructions: InstrSet,
        mut dst: MatMut<'_>,
        lhs: Mat<'_>,
        rhs: Mat<'_>,
        alpha: f32,
    ) {
        assert!(
            available(instructions),
            "{instructions:?} kernels on a CPU without them"
        );
        if !prepare(&mut dst, &lhs, &rhs) {
            return;
        }
        // SAFETY: see `prepare`; the elements are `f32` as `DType::F32` says, `alpha` outlives
        // the call, the CPU has the instructions named (checked above), and the product runs
        // on this thread.
        unsafe {
            private_gemm_x86::gemm(
                DType::F32,
                IType::U64,
                instructions,
                dst.rows,
                dst.cols,
                lhs.cols,
                dst.data.as_mut_ptr().cast(),
                1,
                stride(dst.cs),
                std::ptr::null(),
                std::ptr::null(),
                DstKind::Full,
                Accum::Replace,
                lhs.data.as_ptr().cast(),
                stride(lhs.rs),
                stride(lhs.cs),
                false,
                std::ptr::null(),
                0,
                rhs.data.as_ptr().cast(),
                stride(rhs.rs),
                stride(rhs.cs),
                false,
                std::ptr::from_ref(&alpha).cast(),
                1,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (x >> 8) as f32 / 16_777_216.0 - 0.5
            })
            .collect()
    }

    /// The product by its definition.
    fn direct(dst: MatMut<'_>, lhs: Mat<'_>, rhs: Mat<'_>, alpha: f32) {
        for j in 0..dst.cols {
            for i in 0..dst.rows {
                let sum: f32 = (0..lhs.cols).map(|p| lhs.at(i, p) * rhs.at(p, j)).sum();
                dst.data[i + j * dst.cs] = alpha * sum;
            }
        }
    }

    type Kernel = fn(MatMut<'_>, Mat<'_>, Mat<'_>, f32);

    /// Every kernel this CPU can run, whichever `matmul` would choose.
    fn kernels() -> Vec<Kernel> {
        #[allow(unused_mut)]
        let mut kernels: Vec<Kernel> = vec![portable];
        #[cfg(target_arch = "x86_64")]
        {
            use private_gemm_x86::InstrSet;
            if x86::available(InstrSet::Avx256) {
                kernels.push(|d, l, r, a| x86::matmul(InstrSet::Avx256, d, l, r, a));
            }
            if x86::available(InstrSet::Avx512) {
                kernels.push(|d, l, r, a| x86::matmul(InstrSet::Avx512, d, l, r, a));
            }
        }
        kernels
    }

    #[test]
    fn products_of_blocks_and_transposes_match_the_definition() {
        let a = values(40 * 30, 1);
        let b = values(30 * 20, 2);
        let big = Mat::col_major(&a, 40, 30);
        let cases = [
            (
                big.block(3, 2, 7, 11),
                Mat::col_major(&b, 30, 20).block(4, 1, 11, 9),
            ),
            (
                big.block(0, 5, 9, 17).transpose().block(1, 0, 12, 9),
                Mat::col_major(&b, 9, 20),
            ),
            (Mat::col_major(&a, 40, 30), Mat::col_major(&b, 30, 20)),
        ];
        for (lhs, rhs) in cases {
            let mut expected = vec![0f32; lhs.rows * rhs.cols];
            direct(
                MatMut::col_major(&mut expected, lhs.rows, rhs.cols),
                lhs,
                rhs,
                0.5,
            );
            for kernel in kernels() {
                let mut got = vec![f32::NAN; lhs.rows * rhs.cols];
                kernel(
                    MatMut::col_major(&mut got, lhs.rows, rhs.cols),
                    lhs,
                    rhs,
                    0.5,
                );
                for (g, e) in got.iter().zip(&expected) {
                    assert!((g - e).abs() < 1e-4, "{g} against {e}");
                }
            }
        }
    }

    #[test]
    fn a_strided_destination_leaves_the_rows_between_alone() {
        let (a, b) = (values(4 * 3, 3), values(3 * 5, 4));
        let (lhs, rhs) = (Mat::col_major(&a, 4, 3), Mat::col_major(&b, 3, 5));
        let mut expected = [0f32; 4 * 5];
        direct(MatMut::col_major(&mut expected, 4, 5), lhs, rhs, 1.0);
        for kernel in kernels() {
            let mut dst = [7f32; 10 * 5];
            kernel(
                MatMut::with_col_stride(&mut dst[2..], 4, 5, 10),
                lhs,
                rhs,
                1.0,
            );
            for j in 0..5 {
                for i in 0..10 {
                    let v = dst[i + j * 10];
                    if (2..6).contains(&i) {
                        assert!((v - expected[(i - 2) + j * 4]).abs() < 1e-5);
                    } else {
                        assert_eq!(v, 7.0);
                    }
                }
            }
        }
    }

    #[test]
    fn an_empty_inner_dimension_gives_zeros() {
        let mut dst = vec![1f32; 6];
        matmul(
            MatMut::col_major(&mut dst, 2, 3),
            Mat::col_major(&[], 2, 0),
            Mat::col_major(&[], 0, 3),
            1.0,
        );
        assert_eq!(dst, vec![0.0; 6]);
    }

    #[test]
    fn every_kernel_refuses_mismatched_shapes() {
        let (a, b) = (values(4 * 3, 5), values(2 * 5, 6));
        for kernel in kernels() {
            let refused = std::panic::catch_unwind(|| {
                let mut dst = [0f32; 4 * 5];
                let dst = MatMut::col_major(&mut dst, 4, 5);
                kernel(dst, Mat::col_major(&a, 4, 3), Mat::col_major(&b, 2, 5), 1.0);
            });
            assert!(refused.is_err());
        }
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn a_view_beyond_its_slice_is_refused() {
        let a = [0f32; 11];
        let _ = Mat::col_major(&a, 3, 4);
    }
}
