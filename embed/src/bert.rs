//! A BERT encoder forward pass over safetensors weights, for inference only.
//!
//! Sequences are packed without padding: the dense layers run on exactly the tokens of
//! the sequences (one column per token), and attention runs per sequence and head at the
//! sequence's own length, so no work is spent on padding and no mask is needed. The
//! result is the same as a padded, masked forward pass (masked scores get weight 0).

use std::path::Path;

use crate::matmul::{Mat, MatMut, matmul};
use rayon::prelude::*;
use safetensors::{Dtype, SafeTensors};
use serde::Deserialize;

use crate::kernels::Kernels;

/// The fields of a Hugging Face `config.json` this forward pass uses.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct BertConfig {
    #[serde(default)]
    pub model_type: Option<String>,
    pub hidden_size: usize,
    pub num_attention_heads: usize,
    pub num_hidden_layers: usize,
    pub intermediate_size: usize,
    pub vocab_size: usize,
    pub max_position_embeddings: usize,
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "default_act")]
    pub hidden_act: String,
    #[serde(default)]
    pub position_embedding_type: Option<String>,
}

fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn default_act() -> String {
    "gelu".to_owned()
}

impl BertConfig {
    fn check(&self) -> Result<(), String> {
        if let Some(t) = &self.model_type
            && t != "bert"
        {
            return Err(format!(
                "unsupported model type {t:?} (only BERT encoders are supported)"
            ));
        }
        if self.hidden_act != "gelu" {
            return Err(format!("unsupported hidden_act {:?}", self.hidden_act));
        }
        if let Some(p) = &self.position_embedding_type
            && p != "absolute"
        {
            return Err(format!("unsupported position_embedding_type {p:?}"));
        }
        if self.num_attention_heads == 0
            || self.hidden_size == 0
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return Err("hidden_size must be a multiple of num_attention_heads".to_owned());
        }
        if self.type_vocab_size == 0 || self.max_position_embeddings == 0 {
            return Err("type_vocab_size and max_position_embeddings must be positive".to_owned());
        }
        Ok(())
    }
}

struct Layer {
    /// Query, key and value weights stacked into one [3H, H] matrix. All weight matrices
    /// are stored column-major ([out, in] as the matrix products read it without packing).
    qkv_w: Vec<f32>,
    qkv_b: Vec<f32>,
    attn_out_w: Vec<f32>,
    attn_out_b: Vec<f32>,
    ln1_g: Vec<f32>,
    ln1_b: Vec<f32>,
    inter_w: Vec<f32>,
    inter_b: Vec<f32>,
    out_w: Vec<f32>,
    out_b: Vec<f32>,
    ln2_g: Vec<f32>,
    ln2_b: Vec<f32>,
}

pub(crate) struct Bert {
    cfg: BertConfig,
    word: Vec<f32>,
    pos: Vec<f32>,
    token_type0: Vec<f32>,
    emb_ln_g: Vec<f32>,
    emb_ln_b: Vec<f32>,
    layers: Vec<Layer>,
    kernels: Kernels,
}

struct Tensors<'a> {
    st: SafeTensors<'a>,
    prefix: &'static str,
}

impl Tensors<'_> {
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, String> {
        let full = format!("{}{name}", self.prefix);
        let view = self
            .st
            .tensor(&full)
            .map_err(|e| format!("model.safetensors: tensor {full}: {e}"))?;
        if view.shape() != shape {
            return Err(format!(
                "model.safetensors: tensor {full} has shape {:?}, expected {shape:?}",
                view.shape()
            ));
        }
        let data = view.data();
        let out: Vec<f32> = match view.dtype() {
            Dtype::F32 => data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::F16 => data
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            Dtype::BF16 => data
                .chunks_exact(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            other => {
                return Err(format!(
                    "model.safetensors: tensor {full} has unsupported dtype {other:?}"
                ));
            }
        };
        if out.len() != shape.iter().product::<usize>() {
            return Err(format!(
                "model.safetensors: tensor {full} has a truncated payload"
            ));
        }
        Ok(out)
    }
}

impl Bert {
    pub(crate) fn load(dir: &Path, cfg: BertConfig) -> Result<Self, String> {
        cfg.check()?;
        let path = dir.join("model.safetensors");
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let st =
            SafeTensors::deserialize(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        let prefix = if st.tensor("embeddings.word_embeddings.weight").is_ok() {
            ""
        } else {
            "bert."
        };
        let t = Tensors { st, prefix };
        let h = cfg.hidden_size;
        let i = cfg.intermediate_size;
        let word = t.get("embeddings.word_embeddings.weight", &[cfg.vocab_size, h])?;
        let pos = t.get(
            "embeddings.position_embeddings.weight",
            &[cfg.max_position_embeddings, h],
        )?;
        let mut token_type0 = t.get(
            "embeddings.token_type_embeddings.weight",
            &[cfg.type_vocab_size, h],
        )?;
        token_type0.truncate(h);
        let emb_ln_g = t.get("embeddings.LayerNorm.weight", &[h])?;
        let emb_ln_b = t.get("embeddings.LayerNorm.bias", &[h])?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for l in 0..cfg.num_hidden_layers {
            let p = format!("encoder.layer.{l}.");
            let mut qkv_w = t.get(&format!("{p}attention.self.query.weight"), &[h, h])?;
            qkv_w.extend(t.get(&format!("{p}attention.self.key.weight"), &[h, h])?);
            qkv_w.extend(t.get(&format!("{p}attention.self.value.weight"), &[h, h])?);
            let mut qkv_b = t.get(&format!("{p}attention.self.query.bias"), &[h])?;
            qkv_b.extend(t.get(&format!("{p}attention.self.key.bias"), &[h])?);
            qkv_b.extend(t.get(&format!("{p}attention.self.value.bias"), &[h])?);
            layers.push(Layer {
                qkv_w,
                qkv_b,
                attn_out_w: t.get(&format!("{p}attention.output.dense.weight"), &[h, h])?,
                attn_out_b: t.get(&format!("{p}attention.output.dense.bias"), &[h])?,
                ln1_g: t.get(&format!("{p}attention.output.LayerNorm.weight"), &[h])?,
                ln1_b: t.get(&format!("{p}attention.output.LayerNorm.bias"), &[h])?,
                inter_w: t.get(&format!("{p}intermediate.dense.weight"), &[i, h])?,
                inter_b: t.get(&format!("{p}intermediate.dense.bias"), &[i])?,
                out_w: t.get(&format!("{p}output.dense.weight"), &[h, i])?,
                out_b: t.get(&format!("{p}output.dense.bias"), &[h])?,
                ln2_g: t.get(&format!("{p}output.LayerNorm.weight"), &[h])?,
                ln2_b: t.get(&format!("{p}output.LayerNorm.bias"), &[h])?,
            });
        }
        // Column-major weights: the matrix kernels then read them without repacking.
        for l in &mut layers {
            l.qkv_w = transpose(&l.qkv_w, 3 * h, h);
            l.attn_out_w = transpose(&l.attn_out_w, h, h);
            l.inter_w = transpose(&l.inter_w, i, h);
            l.out_w = transpose(&l.out_w, h, i);
        }
        Ok(Self {
            cfg,
            word,
            pos,
            token_type0,
            emb_ln_g,
            emb_ln_b,
            layers,
            kernels: Kernels::detect(),
        })
    }

    pub(crate) fn hidden_size(&self) -> usize {
        self.cfg.hidden_size
    }

    /// Mean-pooled, L2-normalised embeddings of token-id sequences (each at most
    /// `max_position_embeddings` long), in input order. Must run inside the caller's rayon pool;
    /// `threads` is that pool's size.
    pub(crate) fn embed(&self, seqs: &[Vec<u32>], threads: usize) -> Result<Vec<Vec<f32>>, String> {
        for s in seqs {
            if s.len() > self.cfg.max_position_embeddings {
                return Err(format!(
                    "sequence of {} tokens exceeds the model's {} positions",
                    s.len(),
                    self.cfg.max_position_embeddings
                ));
            }
            if let Some(id) = s.iter().find(|&&id| id as usize >= self.cfg.vocab_size) {
                return Err(format!("token id {id} outside the vocabulary"));
            }
        }
        let total: usize = seqs.iter().map(|s| s.len()).sum();
        let threads = threads.max(1);
        let (groups, parts) = if seqs.len() < threads {
            // Fewer texts than threads (a query, a short batch): one group whose matrix
            // products are split over the threads.
            (vec![(0..seqs.len()).collect::<Vec<_>>()], threads)
        } else {
            // Groups of whole texts of about `GROUP_TOKENS` tokens, as many as a multiple
            // of the thread count, filled longest text first into the group with the
            // fewest tokens so that the threads get equal work; each runs on one thread.
            let rounds = (total as f64 / (threads * GROUP_TOKENS) as f64)
                .round()
                .max(1.0) as usize;
            (balanced_groups(seqs, (threads * rounds).min(seqs.len())), 1)
        };
        let results: Vec<Vec<Vec<f32>>> = groups
            .par_iter()
            .map(|g| {
                let members: Vec<&[u32]> = g.iter().map(|&i| seqs[i].as_slice()).collect();
                self.forward(&members, parts)
            })
            .collect();
        let mut out = vec![Vec::new(); seqs.len()];
        for (g, r) in groups.iter().zip(results) {
            for (&i, e) in g.iter().zip(r) {
                out[i] = e;
            }
        }
        Ok(out)
    }

    /// Runs the encoder on packed sequences and returns their pooled embeddings.
    fn forward(&self, seqs: &[&[u32]], parts: usize) -> Vec<Vec<f32>> {
        let h = self.cfg.hidden_size;
        let inter = self.cfg.intermediate_size;
        let heads = self.cfg.num_attention_heads;
        let dh = h / heads;
        let eps = self.cfg.layer_norm_eps as f32;
        let scale = 1.0 / (dh as f32).sqrt();
        let k = &self.kernels;

        let total: usize = seqs.iter().map(|s| s.len()).sum();
        let max_len = seqs.iter().map(|s| s.len()).max().unwrap_or(0);

        // Embeddings.
        let mut x = vec![0f32; h * total];
        let mut t = 0;
        for s in seqs {
            for (p, &id) in s.iter().enumerate() {
                let col = &mut x[t * h..(t + 1) * h];
                let w = &self.word[id as usize * h..(id as usize + 1) * h];
                let pe = &self.pos[p * h..(p + 1) * h];
                for (((c, w), p), ty) in col.iter_mut().zip(w).zip(pe).zip(&self.token_type0) {
                    *c = w + p + ty;
                }
                t += 1;
            }
        }
        k.layer_norm(&mut x, &self.emb_ln_g, &self.emb_ln_b, eps);

        let mut qkv = vec![0f32; 3 * h * total];
        let mut ctx = vec![0f32; h * total];
        let mut tmp = vec![0f32; h * total];
        let mut mid = vec![0f32; inter * total];
        let mut scores = vec![0f32; max_len * max_len];
        // Where a split product's shares are written before they take their place.
        let scratch_len = if parts > 1 {
            inter.max(3 * h) * total
        } else {
            0
        };
        let mut scratch = vec![0f32; scratch_len];

        for layer in &self.layers {
            // Q, K, V for all tokens: [3H, T] = W_qkv [3H, H] · X [H, T].
            dense(
                MatMut::col_major(&mut qkv, 3 * h, total),
                Mat::col_major(&layer.qkv_w, 3 * h, h),
                Mat::col_major(&x, h, total),
                parts,
                &mut scratch,
            );
            k.add_bias(&mut qkv, &layer.qkv_b);

            // Attention per sequence and head.
            let qkv_m = Mat::col_major(&qkv, 3 * h, total);
            let mut off = 0;
            for s in seqs {
                let len = s.len();
                let ctx_seq = &mut ctx[off * h..(off + len) * h];
                for head in 0..heads {
                    let qt = qkv_m.block(head * dh, off, dh, len);
                    let kt = qkv_m.block(h + head * dh, off, dh, len);
                    let vt = qkv_m.block(2 * h + head * dh, off, dh, len);
                    let sc = &mut scores[..len * len];
                    // Scores transposed: column j holds query j against every key.
                    matmul(MatMut::col_major(sc, len, len), kt.transpose(), qt, scale);
                    k.softmax_columns(sc, len);
                    // Context transposed: [dh, len] = V^T [dh, len] · P^T [len, len], into
                    // the head's rows of the sequence's columns.
                    matmul(
                        MatMut::with_col_stride(&mut ctx_seq[head * dh..], dh, len, h),
                        vt,
                        Mat::col_major(sc, len, len),
                        1.0,
                    );
                }
                off += len;
            }

            dense(
                MatMut::col_major(&mut tmp, h, total),
                Mat::col_major(&layer.attn_out_w, h, h),
                Mat::col_major(&ctx, h, total),
                parts,
                &mut scratch,
            );
            k.residual_layer_norm(
                &mut x,
                &tmp,
                &layer.attn_out_b,
                &layer.ln1_g,
                &layer.ln1_b,
                eps,
            );

            dense(
                MatMut::col_major(&mut mid, inter, total),
                Mat::col_major(&layer.inter_w, inter, h),
                Mat::col_major(&x, h, total),
                parts,
                &mut scratch,
            );
            k.bias_gelu(&mut mid, &layer.inter_b);

            dense(
                MatMut::col_major(&mut tmp, h, total),
                Mat::col_major(&layer.out_w, h, inter),
                Mat::col_major(&mid, inter, total),
                parts,
                &mut scratch,
            );
            k.residual_layer_norm(&mut x, &tmp, &layer.out_b, &layer.ln2_g, &layer.ln2_b, eps);
        }

        // Mean pooling over each sequence's tokens, then L2 normalisation.
        let mut out = Vec::with_capacity(seqs.len());
        let mut off = 0;
        for s in seqs {
            let len = s.len();
            let mut e = vec![0f64; h];
            for col in x[off * h..(off + len) * h].chunks_exact(h) {
                for (a, v) in e.iter_mut().zip(col) {
                    *a += f64::from(*v);
                }
            }
            off += len;
            let n = len.max(1) as f64;
            let norm = e.iter().map(|v| (v / n) * (v / n)).sum::<f64>().sqrt();
            let inv = if norm > 0.0 { 1.0 / (norm * n) } else { 0.0 };
            out.push(e.iter().map(|v| (v * inv) as f32).collect());
        }
        out
    }
}

/// Target size in tokens of a group of texts that one thread runs through the whole
/// encoder: large enough for efficient matrix products, small enough to stay in the
/// core's cache (measured: 256–512 best on a 2 MB L2).
const GROUP_TOKENS: usize = 256;

/// Splits the texts into `n` groups of about equal token counts (longest first into the
/// lightest group).
fn balanced_groups(seqs: &[Vec<u32>], n: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..seqs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(seqs[i].len()));
    let mut groups: Vec<(usize, Vec<usize>)> = vec![(0, Vec::new()); n.max(1)];
    for i in order {
        if let Some(g) = groups.iter_mut().min_by_key(|g| g.0) {
            g.0 += seqs[i].len();
            g.1.push(i);
        }
    }
    groups
        .into_iter()
        .map(|g| g.1)
        .filter(|g| !g.is_empty())
        .collect()
}

/// `dst = w · x`, the rows of `dst` (and `w`) split over `parts` rayon tasks, each writing its
/// share into `scratch` (at least as large as `dst`) first: the rows of a column-major matrix
/// are not one piece of memory.
fn dense(mut dst: MatMut<'_>, w: Mat<'_>, x: Mat<'_>, parts: usize, scratch: &mut [f32]) {
    let rows = dst.rows();
    if parts <= 1 || rows < 2 * SPLIT_ALIGN {
        matmul(dst, w, x, 1.0);
        return;
    }
    let cols = dst.cols();
    let bound = |i: usize| ((rows * i / parts).div_ceil(SPLIT_ALIGN) * SPLIT_ALIGN).min(rows);
    let mut rest = &mut scratch[..rows * cols];
    let mut shares = Vec::with_capacity(parts);
    for i in 0..parts {
        let share = bound(i)..bound(i + 1);
        let (part, tail) = rest.split_at_mut(share.len() * cols);
        rest = tail;
        shares.push((share, part));
    }
    shares.par_iter_mut().for_each(|(share, part)| {
        let w = w.block(share.start, 0, share.len(), w.cols());
        matmul(MatMut::col_major(part, share.len(), cols), w, x, 1.0);
    });
    for (share, part) in &shares {
        dst.copy_rows_from(share.start, part, share.len());
    }
}

/// Row blocks of a split product are multiples of the kernels' register height.
const SPLIT_ALIGN: usize = 32;

/// `[rows, cols]` row-major to column-major.
fn transpose(w: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; w.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = w[r * cols + c];
        }
    }
    out
}
