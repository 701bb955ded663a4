//! Maximal marginal relevance: pick `k` of the candidates, balancing relevance to the query
//! against similarity to what was already picked.
//!
//! score(d) = λ · sim(query, d) − (1 − λ) · max over picked p of sim(d, p)
//!
//! λ = 1 is relevance only, λ = 0 maximum diversity. The picked candidates are returned in
//! distance order (the interface: "MMR returns selected fragments in distance order").

/// Similarity used between vectors (higher is more similar).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Similarity {
    /// Cosine similarity.
    Cosine,
    /// Inner product.
    Dot,
    /// Negative Euclidean distance.
    Euclidean,
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn norm(a: &[f32]) -> f32 {
    dot(a, a).sqrt()
}

impl Similarity {
    /// Similarity of two vectors.
    pub fn between(self, a: &[f32], b: &[f32]) -> f32 {
        match self {
            Self::Cosine => {
                let denominator = norm(a) * norm(b);
                if denominator == 0.0 {
                    0.0
                } else {
                    dot(a, b) / denominator
                }
            }
            Self::Dot => dot(a, b),
            Self::Euclidean => -a
                .iter()
                .zip(b)
                .map(|(x, y)| (x - y) * (x - y))
                .sum::<f32>()
                .sqrt(),
        }
    }
}

/// Similarity of two vectors whose norms are already known (cosine needs them; computing
/// them once per vector instead of once per pair is most of MMR's cost).
fn similarity_with_norms(kind: Similarity, a: &[f32], a_norm: f32, b: &[f32], b_norm: f32) -> f32 {
    match kind {
        Similarity::Cosine => {
            let denominator = a_norm * b_norm;
            if denominator == 0.0 {
                0.0
            } else {
                dot(a, b) / denominator
            }
        }
        other => other.between(a, b),
    }
}

/// Selects up to `k` candidate indexes. `candidates` are in ascending distance order (the
/// order the database returned them); the result keeps that order.
pub fn select(
    query: &[f32],
    candidates: &[&[f32]],
    k: usize,
    lambda: f64,
    similarity: Similarity,
) -> Vec<usize> {
    let k = k.min(candidates.len());
    if k == candidates.len() {
        // Every candidate is picked, whatever the order of the picks.
        return (0..k).collect();
    }
    let lambda = lambda as f32;
    let query_norm = norm(query);
    let norms: Vec<f32> = candidates.iter().map(|c| norm(c)).collect();
    let relevance: Vec<f32> = candidates
        .iter()
        .zip(&norms)
        .map(|(c, n)| similarity_with_norms(similarity, query, query_norm, c, *n))
        .collect();
    // Highest similarity of each candidate to any picked one; starts at "nothing picked".
    let mut redundancy = vec![f32::NEG_INFINITY; candidates.len()];
    let mut picked = vec![false; candidates.len()];
    let mut order = Vec::with_capacity(k);
    for _ in 0..k {
        let mut best: Option<(usize, f32)> = None;
        for (i, &rel) in relevance.iter().enumerate() {
            if picked[i] {
                continue;
            }
            let penalty = if redundancy[i] == f32::NEG_INFINITY {
                0.0
            } else {
                redundancy[i]
            };
            let score = lambda * rel - (1.0 - lambda) * penalty;
            // Ties go to the closer candidate (lower index), so the choice is deterministic.
            if best.is_none_or(|(_, s)| score > s) {
                best = Some((i, score));
            }
        }
        let Some((chosen, _)) = best else { break };
        picked[chosen] = true;
        order.push(chosen);
        for (i, candidate) in candidates.iter().enumerate() {
            if !picked[i] {
                let s = similarity_with_norms(
                    similarity,
                    candidate,
                    norms[i],
                    candidates[chosen],
                    norms[chosen],
                );
                if s > redundancy[i] {
                    redundancy[i] = s;
                }
            }
        }
    }
    order.sort_unstable();
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_candidate_is_picked_when_k_covers_them() {
        let q = [1.0, 0.0];
        let c: Vec<&[f32]> = vec![&[1.0, 0.0], &[0.99, 0.1], &[0.0, 1.0]];
        assert_eq!(select(&q, &c, 3, 0.0, Similarity::Cosine), vec![0, 1, 2]);
        assert_eq!(
            select(&q, &c, 10, 0.5, Similarity::Euclidean),
            vec![0, 1, 2]
        );
        assert!(select(&q, &[], 10, 0.5, Similarity::Dot).is_empty());
    }

    #[test]
    fn lambda_one_is_relevance_only() {
        let q = [1.0, 0.0];
        let c: Vec<&[f32]> = vec![&[1.0, 0.0], &[0.99, 0.1], &[0.98, 0.2], &[0.0, 1.0]];
        assert_eq!(select(&q, &c, 2, 1.0, Similarity::Cosine), vec![0, 1]);
    }

    #[test]
    fn low_lambda_prefers_diversity() {
        let q = [1.0, 0.0];
        // 0 and 1 are near-duplicates; 2 is different but still relevant.
        let c: Vec<&[f32]> = vec![&[1.0, 0.0], &[0.999, 0.01], &[0.7, 0.7]];
        assert_eq!(select(&q, &c, 2, 0.3, Similarity::Cosine), vec![0, 2]);
    }

    #[test]
    fn k_is_bounded_by_candidates_and_zero_selects_nothing() {
        let q = [1.0];
        let c: Vec<&[f32]> = vec![&[1.0], &[0.5]];
        assert_eq!(select(&q, &c, 10, 0.5, Similarity::Dot), vec![0, 1]);
        assert!(select(&q, &c, 0, 0.5, Similarity::Dot).is_empty());
    }
}
