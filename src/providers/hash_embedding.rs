//! The `hash` embedding (addendum §9.4), fixed forever so that stored vectors stay comparable:
//! lower-case the text; tokens are maximal runs of Unicode alphanumerics; for each token,
//! h = FNV-1a-64 of its UTF-8 bytes and v[h mod d] += 1 when the top bit of h is clear, −1
//! otherwise; a zero vector becomes e₀; the result is divided by its L2 norm.

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(FNV_PRIME)
    })
}

/// Embeds one text into `dimensions` (≥ 1) dimensions.
pub fn hash_embedding(text: &str, dimensions: usize) -> Vec<f32> {
    debug_assert!(
        dimensions >= 1,
        "dimensions are validated at model creation"
    );
    let dimensions = dimensions.max(1);
    let mut v = vec![0f32; dimensions];
    let lower = text.to_lowercase();
    let mut token = String::new();
    let flush = |token: &mut String, v: &mut Vec<f32>| {
        if token.is_empty() {
            return;
        }
        let h = fnv1a64(token.as_bytes());
        // `dimensions` fits in u64 and the remainder is below it, so both casts are lossless.
        let index = (h % dimensions as u64) as usize;
        v[index] += if h >> 63 == 0 { 1.0 } else { -1.0 };
        token.clear();
    };
    for c in lower.chars() {
        if c.is_alphanumeric() {
            token.push(c);
        } else {
            flush(&mut token, &mut v);
        }
    }
    flush(&mut token, &mut v);
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm == 0.0 {
        v[0] = 1.0;
        return v;
    }
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_reference_values() {
        // Published FNV-1a 64-bit test vectors.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn normalised_deterministic_and_case_insensitive() {
        let a = hash_embedding("Hello, World! héllo", 384);
        let b = hash_embedding("hello world HÉLLO", 384);
        assert_eq!(a, b);
        let norm: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-6);
    }

    #[test]
    fn empty_text_is_the_first_basis_vector() {
        let v = hash_embedding("  ,.; ", 8);
        assert_eq!(v, vec![1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    }
}
