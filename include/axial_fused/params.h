// The one parameter struct every axial_fused kernel takes (by value, __grid_constant__).
// Plain C++: no torch headers, so kernel files compile fast. All strides are in elements.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

namespace axial_fused {

enum DType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// How float32 matrix products run (PyTorch's float32 matmul precision setting).
enum MathMode : int { kExactFp32 = 0, kTf32 = 1 };

// How one pass is executed.
enum PassPath : int {
  kPathFused = 0,     // one kernel: a group of whole sequences per block, q/k/v in shared memory
  kPathTwoKernel = 1,  // LN+QKV kernel -> q/k/v scratch in global memory -> attention+out-proj kernel
  kPathFusedSm90 = 2   // Hopper, 16-bit, head_dim 32, even heads, D <= 256, L <= 128: head-looped wgmma kernel
};

struct PassParams {
  // The grid, seen as S sequences of L tokens of D features. Sequence s lives at
  // (s / seq_inner) * stride_outer + (s % seq_inner) * stride_inner, token l at + l * stride_tok.
  // The row pass and the column pass differ only in these strides.
  const void* x;  // input  [.., D], feature stride 1
  void* out;      // output [.., D], feature stride 1; may alias x (each element is read before it is written, by the same thread)
  int64_t x_stride_outer, x_stride_inner, x_stride_tok;
  int64_t o_stride_outer, o_stride_inner, o_stride_tok;
  int64_t num_seq;    // S
  int64_t seq_inner;  // S = outer * seq_inner
  int len;            // L, tokens per sequence

  // Weights (contiguous): LayerNorm [D], [D]; QKV [3D, D] (nn.Linear layout); out [D, D] and bias [D].
  const void* ln_w;
  const void* ln_b;
  const void* w_qkv;
  const void* w_out;
  const void* b_out;

  float eps;
  float scale_log2;  // log2(e) / sqrt(head_dim)

  // The optional features (docs/design.md, "Masks, bias, gate"). `nq` columns of the QKV product
  // (and of the scratch's rows): 3D, or 4D with the sigmoid gate, whose weight is then W_qkv's rows
  // 3D .. 4D - 1. qkv_bias (null: none) is added to that product's columns qkv_bias_from .. nq - 1:
  // qkv_bias_from is 0, or 3D where only the gate has a bias (qkv_bias then is b_g itself).
  int nq;
  int gated;               // nq == 4D
  int qkv_bias_from;
  int residual;            // 1: out = x + update; 0: out = update (out_proj(o) + b_out)
  const void* qkv_bias;
  // Key mask (null: none): key l of sequence s is present where mask[(s / seq_inner) * m_stride_outer
  // + (s % seq_inner) * m_stride_inner + l * m_stride_tok] != 0 (bytes); an absent key's logit is
  // replaced by kMaskedLogit.
  // mask_bytes: its element's size. 1 (bool, uint8) everywhere; on the two-kernel path, whose
  // terms_prep_kernel alone reads it, also a float mask as it is: 2 (float16, bfloat16) or 4
  // (float32), present where the value is nonzero (a bit other than the sign set).
  const unsigned char* mask;
  int64_t m_stride_outer, m_stride_inner, m_stride_tok;
  int mask_bytes;
  // Additive bias of the scaled logits (null: none): element (batch s / seq_inner, head h, query i,
  // key j) at b * bias_stride_b + h * bias_stride_h + i * bias_stride_q + j * bias_stride_k
  // (bias_stride_b = 0: one bias for the whole batch); float32 (bias_f32) or the input's dtype. The
  // kernels that read it directly (LogitRow) take bias_stride_k = 1: run_pass copies any other bias
  // for them; terms_prep_kernel reads any strides.
  const void* bias;
  int bias_f32;
  int64_t bias_stride_b, bias_stride_h, bias_stride_q, bias_stride_k;
  // The same terms prepared by terms_prep_kernel for the two-kernel path's attention (null: not
  // prepared; the fused kernels read mask and bias above), in rows of kp = L rounded up to 128 keys:
  // key_bits [S, kp / 16], bit i of word w of a sequence set where its key w * 16 + i is absent (the
  // mma.sync kernel's plain order; zero past L), or, for the Hopper attention kernel, key
  // frag_key(16 w + i) (each 64 keys in fragment order, frag_pos; set past L, so that a 64-key chunk
  // with no present key is one whose bits are all set). Only the Hopper attention kernel reads the
  // bias prepared: bias_frag [1 or B, heads, kp, kp] in warp blocks (bias_block_row / _key), the
  // bias times sqrt(head_dim) (in units of the raw product q.k, which the kernel's score
  // accumulators start from) in float16, saturated at +-65504 (zero past L on either axis), batch
  // stride bias_frag_stride_b (0: one).
  const uint16_t* key_bits;
  const __half* bias_frag;
  int64_t bias_frag_stride_b;
  int kp;
  // The bias computed from the pass's own LayerNorm output (PassWeights::bias_w, the triangle bias;
  // null: none): bias[b, h, i, j] = LN(token j of sequence i) . bias_w[h] for the sequences of batch
  // element b (seq_inner == len). Set only where the Hopper attention kernel reads the bias prepared:
  // K1 (ln_qkv_sm90_body) then writes bias_frag from its normalised rows; elsewhere run_pass computes
  // the bias beforehand (the pair-bias kernel) and passes it as `bias`.
  const void* bias_w;
  int heads;  // num_heads (K1, which serves every head count of its D, reads it for bias_w)

  // The launch as planned (KernelPlan, plan.h, names the kernels; these are the values they read).
  int arch;       // the device's compute capability, major * 10 + minor
  int path;       // PassPath
  int math;       // MathMode (float32 only)
  int group;      // one-kernel paths: sequences per block
  int k1_per_sm;  // two-kernel path: K1's blocks an SM, 2 or 3 (KernelPlan::k1_per_sm)
  void* scratch;  // two-kernel path: q/k/v (and the gate), [S * L, nq] elements of the input dtype
};

// log2(e): the kernels' softmax runs in base 2 (exp2 of logits scaled by log2(e) / sqrt(head_dim)).
constexpr double kLog2e = 1.4426950408889634;

// An absent key's logit (log2 units). Finite, so a query whose keys are all absent attends uniformly
// (every logit equal); far below any real logit, and absorbed by float32 addition (ulp(1e30) ~ 8e22),
// so `logit + kMaskedLogit` is kMaskedLogit exactly: replacing and adding are the same.
constexpr float kMaskedLogit = -1e30f;
// The same in the raw units of q.k that the Hopper attention kernel's prepared terms use: a power of
// two, so that its product with scale_log2 is exact and a query whose keys are all absent gets logits
// that are exactly equal (the softmax's fma(s, scale, -max) is then exactly 0, not a rounding residue).
constexpr float kMaskedRaw = -0x1p100f;
// bfloat16 bit patterns the tensor-core mask writes: 1.0 (its A tile of ones) and kMaskedRaw (its B rows).
constexpr unsigned kOneBf16Bits = 0x3F80u, kMaskedRawBf16Bits = 0xF180u;


// The prepared terms a Hopper attention kernel reads (its TERMS template argument). kTermMaskMma
// (with kTermMask, bfloat16, L <= kMaskMmaMaxLen): the mask applied by the tensor cores, as one more
// k-step of each unit's S product (attn_sm90_body), instead of a select per score.
constexpr int kTermBias = 1, kTermMask = 2, kTermMaskMma = 4;
constexpr int kMaskMmaMaxLen = 2048;
// Where key l's bit lies in the Hopper attention kernel's key_bits: in each chunk of 64 keys, thread
// t = (l / 2) % 4 of a quad holds keys 8 jb + 2 t + c (jb < 8, c < 2) of a score fragment; they are
// stored contiguously, in the order (t, jb, c), so a thread's 16 bits are one word.
__host__ __device__ constexpr int frag_pos(int l) {
  return (l & ~63) | (((l >> 1) & 3) << 4) | (((l >> 3) & 7) << 1) | (l & 1);
}
__host__ __device__ constexpr int frag_key(int pos) {  // the inverse of frag_pos
  return (pos & ~63) | (((pos >> 1) & 7) << 3) | (((pos >> 4) & 3) << 1) | (pos & 1);
}
// The prepared bias of one (batch, head), kp x kp, is stored in blocks of 16 query rows x 64 keys
// (2 KB: one warp's share of a 64 x 64 score tile), block (row / 16, key / 64) at
// ((row / 16) * (kp / 64) + key / 64) * 1024 elements, each in the order the warp reads it: four
// fully coalesced 16-byte loads a thread, load j of lane 4 g + t at element j * 256 + lane * 8,
// holding its accumulator elements of row g + 8 (j >> 1), keys 8 jb + 2 t + c for
// jb = 4 (j & 1) + jj (jj < 4, c < 2, in that order). Element `pos` of a block is the bias of
// (row, key) = (bias_block_row(pos), bias_block_key(pos)) relative to the block's first.
__host__ __device__ constexpr int bias_block_row(int pos) { return ((pos >> 5) & 7) + 8 * (pos >> 9); }
__host__ __device__ constexpr int bias_block_key(int pos) {
  return 8 * (4 * ((pos >> 8) & 1) + ((pos >> 1) & 3)) + 2 * ((pos >> 3) & 3) + (pos & 1);
}
// The inverse: the element of a block holding (row, key), row < 16, key < 64.
__host__ __device__ constexpr int bias_block_pos(int row, int key) {
  return ((row >> 3) << 9) | (((key >> 5) & 1) << 8) | ((row & 7) << 5) | (((key >> 1) & 3) << 3) |
         (((key >> 3) & 3) << 1) | (key & 1);
}
constexpr bool bias_block_pos_inverts() {
  for (int pos = 0; pos < 1024; ++pos)
    if (bias_block_pos(bias_block_row(pos), bias_block_key(pos)) != pos) return false;
  return true;
}
static_assert(bias_block_pos_inverts(), "bias_block_pos must invert bias_block_row / bias_block_key");

// Whether a pass uses any of the optional features: every kernel has a plain variant (the pass
// without them, compiled as if they did not exist) and an EXTRAS variant that reads them.
inline bool has_extras(const PassParams& p) {
  return p.mask != nullptr || p.bias != nullptr || p.bias_w != nullptr || p.gated != 0 || p.qkv_bias != nullptr ||
         p.residual == 0;
}

}  // namespace axial_fused
