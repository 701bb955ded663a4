//! Exact nearest neighbours in process and recall@k against them.

use std::collections::HashMap;

use uuid::Uuid;

pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = a
        .chunks_exact(8)
        .remainder()
        .iter()
        .zip(b.chunks_exact(8).remainder())
        .map(|(x, y)| x * y)
        .sum();
    acc.iter().sum::<f32>() + tail
}

pub fn norm(v: &[f32]) -> f32 {
    v.iter().map(|x| x * x).sum::<f32>().sqrt()
}

/// Stored vectors, back to back, with their norms and ids.
pub struct Vectors {
    dim: usize,
    values: Vec<f32>,
    norms: Vec<f32>,
    index_of: HashMap<Uuid, u32>,
}

impl Vectors {
    pub fn with_capacity(dim: usize, n: usize) -> Self {
        Self {
            dim,
            values: Vec::with_capacity(n * dim),
            norms: Vec::with_capacity(n),
            index_of: HashMap::with_capacity(n),
        }
    }

    /// Adds a vector; its index is the count before.
    pub fn push(&mut self, id: Uuid, vector: &[f32]) -> u32 {
        let index = self.norms.len() as u32;
        self.norms.push(norm(vector));
        self.values.extend_from_slice(vector);
        self.index_of.insert(id, index);
        index
    }

    pub fn len(&self) -> usize {
        self.norms.len()
    }

    pub fn vector(&self, index: u32) -> &[f32] {
        let i = index as usize * self.dim;
        &self.values[i..i + self.dim]
    }

    pub fn index_of(&self, id: &Uuid) -> Option<u32> {
        self.index_of.get(id).copied()
    }

    /// Cosine distance of the vector at `index` to `query` (whose norm is `query_norm`).
    pub fn distance(&self, query: &[f32], query_norm: f32, index: u32) -> f64 {
        let dot = dot(query, self.vector(index));
        1.0 - f64::from(dot) / (f64::from(query_norm) * f64::from(self.norms[index as usize]))
    }
}

/// The `k` closest (distance, vector index), ascending.
#[derive(Clone)]
pub struct TopK {
    k: usize,
    pub items: Vec<(f64, u32)>,
}

impl TopK {
    pub fn new(k: usize) -> Self {
        Self {
            k,
            items: Vec::with_capacity(k + 1),
        }
    }

    /// The first `k` of these (the exact top-`k` when these are the exact top of more).
    pub fn first(&self, k: usize) -> Self {
        Self {
            k,
            items: self.items.iter().take(k).copied().collect(),
        }
    }

    pub fn push(&mut self, distance: f64, index: u32) {
        if self.items.len() == self.k && distance >= self.items[self.k - 1].0 {
            return;
        }
        let at = self.items.partition_point(|(d, _)| *d <= distance);
        self.items.insert(at, (distance, index));
        self.items.truncate(self.k);
    }
}

/// A query of an exact search: its vector and the vectors it may find (every one when `None`).
pub type ExactQuery<'a> = (&'a [f32], Option<&'a [u32]>);

/// Exact top-k of every query, on two threads (queries over every vector in blocks of 8, so
/// each stored vector is read once per block).
pub fn exact_top(vectors: &Vectors, queries: &[ExactQuery<'_>], k: usize) -> Vec<TopK> {
    let mut out = vec![TopK::new(k); queries.len()];
    let half = queries.len().div_ceil(2).max(1);
    std::thread::scope(|scope| {
        for (qs, tops) in queries.chunks(half).zip(out.chunks_mut(half)) {
            scope.spawn(move || {
                for (block, tops) in qs.chunks(8).zip(tops.chunks_mut(8)) {
                    exact_block(vectors, block, tops);
                }
            });
        }
    });
    out
}

fn exact_block(vectors: &Vectors, block: &[ExactQuery<'_>], tops: &mut [TopK]) {
    if block.iter().all(|(_, scope)| scope.is_none()) {
        let norms: Vec<f32> = block.iter().map(|(q, _)| norm(q)).collect();
        for i in 0..vectors.len() as u32 {
            for (((q, _), top), n) in block.iter().zip(tops.iter_mut()).zip(&norms) {
                top.push(vectors.distance(q, *n, i), i);
            }
        }
        return;
    }
    for ((q, scope), top) in block.iter().zip(tops.iter_mut()) {
        let n = norm(q);
        match scope {
            Some(candidates) => {
                for &i in *candidates {
                    top.push(vectors.distance(q, n, i), i);
                }
            }
            None => {
                for i in 0..vectors.len() as u32 {
                    top.push(vectors.distance(q, n, i), i);
                }
            }
        }
    }
}

/// Recall of `found` against the exact top-k: (results whose exact distance is within the k-th
/// exact distance, so that ties at the boundary are all correct answers; exact ids found;
/// results wanted, the size of the exact top-k).
pub fn recall(
    vectors: &Vectors,
    query: &[f32],
    exact: &TopK,
    found: &[Uuid],
) -> (usize, usize, usize) {
    let wanted = exact.items.len();
    let Some(&(kth, _)) = exact.items.last() else {
        return (0, 0, 0);
    };
    let qn = norm(query);
    let mut tie_aware = 0;
    let mut ids = 0;
    for id in found.iter().take(exact.k) {
        let Some(index) = vectors.index_of(id) else {
            continue;
        };
        if vectors.distance(query, qn, index) <= kth + 1e-6 {
            tie_aware += 1;
        }
        if exact.items.iter().any(|(_, i)| *i == index) {
            ids += 1;
        }
    }
    (tie_aware, ids, wanted)
}
