// The optional features of the attention, shared by every attention kernel (docs/design.md, "Masks,
// bias, gate"):
//   SeqTerms  one sequence's mask and bias; LogitRow what they do to one query row's logits:
//             term(key), in log2 units, is added to the scaled score s * scale_log2 (kMaskedLogit for
//             an absent key, whose logit it then replaces: float32 addition absorbs the score);
//   FragmentTerms   the terms of a score fragment in the tensor cores' accumulator layout, compact
//             (the Hopper fused kernel);
//   terms_prep_kernel   the Hopper attention kernel's prepared terms (PassParams::key_bits, bias_frag).
#pragma once
#include "axial_fused/common/device.cuh"

namespace axial_fused {

// (The strides and the bias's dtype are read from the pass's parameters where they are used: they
// live in constant memory, not in registers that the attention's accumulators need.)
template <class T>
struct LogitRow {
  const unsigned char* mask;  // this sequence's mask, key l at mask[l * m_stride_tok] (null: none)
  const void* bias;           // this (batch, head, query)'s bias row, key l at l (null: none)
  __device__ __forceinline__ float bias_at(const PassParams& p, int l) const {
    return p.bias_f32 ? static_cast<const float*>(bias)[l] : Pack2<T>::to_float(static_cast<const T*>(bias)[l]);
  }
  __device__ __forceinline__ bool absent(const PassParams& p, int l) const {
    return mask && mask[l * p.m_stride_tok] == 0;
  }
  // The term of key l (0 <= l < L).
  __device__ __forceinline__ float term(const PassParams& p, int l) const {
    if (absent(p, l)) return kMaskedLogit;
    return bias ? bias_at(p, l) * float(kLog2e) : 0.f;
  }
};

// One sequence's mask and its batch element's bias; row(p, h, q) is the LogitRow of head h, query q.
// (The division by seq_inner happens here, once per sequence.)
template <class T>
struct SeqTerms {
  const unsigned char* mask;
  const void* bias;
  __device__ __forceinline__ SeqTerms() : mask(nullptr), bias(nullptr) {}
  __device__ __forceinline__ SeqTerms(const PassParams& p, int64_t s) {
    const int64_t outer = s / p.seq_inner;
    mask = p.mask ? p.mask + outer * p.m_stride_outer + (s - outer * p.seq_inner) * p.m_stride_inner : nullptr;
    bias = p.bias ? static_cast<const char*>(p.bias) + outer * p.bias_stride_b * (p.bias_f32 ? 4 : int(sizeof(T)))
                  : nullptr;
  }
  __device__ __forceinline__ LogitRow<T> row(const PassParams& p, int h, int q) const {
    const int64_t off = (h * p.bias_stride_h + q * p.bias_stride_q) * (p.bias_f32 ? 4 : int(sizeof(T)));
    return LogitRow<T>{mask, bias ? static_cast<const void*>(static_cast<const char*>(bias) + off) : nullptr};
  }
};

// The terms of a 16 x 8NB score fragment in the tensor cores' accumulator layout (element
// e = 4 jb + 2 i + c: row half i, column 8 jb + 2 t + c, t = lane % 4), loaded before the scores
// exist and applied to them after, held compactly because the scores, the probabilities of the
// previous unit and the output accumulators are live meanwhile: per (jb, i) the two columns' bias as
// a pair of T (the bias at x's precision, as PyTorch adds it to logits of that dtype), and one bit per
// element for an absent key.
template <class T, int NB>
struct FragmentTerms {
  uint32_t bias2[2 * NB];
  uint32_t absent[(4 * NB + 31) / 32];
  // Row half i's query is row[i]; key_of(jb, i) is the sequence index of its column 8 jb + 2 t (the
  // next column is that + 1); keys outside [0, L) get no term (the kernels mask them to -inf).
  template <class KeyOf>
  __device__ __forceinline__ void load(const PassParams& p, const LogitRow<T> (&row)[2], int L, KeyOf key_of) {
#pragma unroll
    for (int w = 0; w < (4 * NB + 31) / 32; ++w) absent[w] = 0u;
#pragma unroll
    for (int jb = 0; jb < NB; ++jb) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float v[2];
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int key = key_of(jb, i) + c, e = 4 * jb + 2 * i + c;
          const bool ok = unsigned(key) < unsigned(L);
          v[c] = ok && row[i].bias ? row[i].bias_at(p, key) : 0.f;
          if (ok && row[i].absent(p, key)) absent[e / 32] |= 1u << (e % 32);
        }
        const typename Pack2<T>::type b2 = Pack2<T>::make(v[0], v[1]);
        bias2[2 * jb + i] = *reinterpret_cast<const uint32_t*>(&b2);
      }
    }
  }
  // sc = sc * scale + bias * log2(e), or kMaskedLogit for an absent key: the scaled logits in log2 units.
  __device__ __forceinline__ void apply(float (&sc)[4 * NB], float scale) const {
#pragma unroll
    for (int jb = 0; jb < NB; ++jb) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const float2 b = Pack2<T>::unpack(*reinterpret_cast<const typename Pack2<T>::type*>(&bias2[2 * jb + i]));
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int e = 4 * jb + 2 * i + c;
          const float t = fmaf(sc[e], scale, (c ? b.y : b.x) * float(kLog2e));
          sc[e] = (absent[e / 32] >> (e % 32)) & 1u ? kMaskedLogit : t;
        }
      }
    }
  }
};

// Writes PassParams::key_bits and bias_frag (where set) from the mask and the bias, read through
// their strides. The first terms_prep_key_blocks(p) blocks write key_bits, a thread a word (FRAG: the
// Hopper attention kernel's fragment order, the keys past L absent; else keys in order, the keys past
// L present); each block after them one 2 KB warp
// block of bias_frag (bias_block_row / _key), a thread 8 elements as one 16-byte store, so no thread
// divides more than once (a bias from PassParams::bias_w is K1's to write: no blocks for it). Launched before K1 of the two-kernel path: terms_prep_blocks(p, heads)
// blocks of kTermsPrepThreads threads.
constexpr int kTermsPrepThreads = 128;
__host__ __device__ inline int64_t terms_prep_key_blocks(const PassParams& p) {
  return p.key_bits ? (p.num_seq * (p.kp / 16) + kTermsPrepThreads - 1) / kTermsPrepThreads : 0;
}
// The whole grid: the key-bit blocks, then one per warp block of each (batch, head)'s kp x kp bias.
inline int64_t terms_prep_blocks(const PassParams& p, int heads) {
  const int64_t batches = p.bias_stride_b == 0 ? 1 : p.num_seq / p.seq_inner;
  return terms_prep_key_blocks(p) + (p.bias_frag && p.bias ? batches * heads * (p.kp / 16) * (p.kp / 64) : 0);
}
template <class T, bool FRAG>
__global__ void __launch_bounds__(kTermsPrepThreads) terms_prep_kernel(const __grid_constant__ PassParams p, int heads) {
  const int L = p.len, kp = p.kp;
  const int64_t key_blocks = terms_prep_key_blocks(p);
  if (blockIdx.x < key_blocks) {
    const int64_t i = blockIdx.x * int64_t(kTermsPrepThreads) + threadIdx.x;
    if (i >= p.num_seq * (kp / 16)) return;
    // Thread i takes word `word` of sequence s: the words of a sequence side by side where its keys
    // are (the row pass), the sequences side by side where they are (the column pass), so that a
    // warp's loads are coalesced either way.
    const bool seq_fast = p.m_stride_inner < p.m_stride_tok;
    const int64_t s = seq_fast ? i % p.num_seq : i / (kp / 16), outer = s / p.seq_inner;
    const int64_t word = seq_fast ? i / p.num_seq : i - s * (kp / 16);
    const int64_t m0 = outer * p.m_stride_outer + (s - outer * p.seq_inner) * p.m_stride_inner;
    const int pos0 = int(word) * 16;
    // An element of mask_bytes bytes is present where a bit other than the sign is set (a nonzero
    // byte, or a nonzero float16 / bfloat16 / float32 value). The element size is dispatched once,
    // outside the loop, so that the thread's 16 loads are all in flight together.
    const auto word_bits = [&](auto elem) {
      using E = decltype(elem);
      constexpr E kValue = E(sizeof(E) == 1 ? 0xffu : sizeof(E) == 2 ? 0x7fffu : 0x7fffffffu);
      const E* m = reinterpret_cast<const E*>(p.mask) + m0;
      E v[16];
#pragma unroll
      for (int b = 0; b < 16; ++b) {
        const int l = FRAG ? frag_key(pos0 + b) : pos0 + b;
        v[b] = l < L ? m[l * p.m_stride_tok] : E(0);
      }
      uint32_t bits = 0;
#pragma unroll
      for (int b = 0; b < 16; ++b) {
        const int l = FRAG ? frag_key(pos0 + b) : pos0 + b;
        if (l < L ? (v[b] & kValue) == 0 : FRAG) bits |= 1u << b;
      }
      return bits;
    };
    const uint32_t bits = p.mask_bytes == 4   ? word_bits(uint32_t{})
                          : p.mask_bytes == 2 ? word_bits(uint16_t{})
                                              : word_bits(uint8_t{});
    const_cast<uint16_t*>(p.key_bits)[s * (kp / 16) + word] = uint16_t(bits);
    return;
  }
  // Warp block blk = (bh * (kp / 16) + row / 16) * (kp / 64) + key / 64; this thread's elements
  // pos = 8 threadIdx.x + e (e < 8) share their row and have keys key0 + 8 (e >> 1) + (e & 1).
  static_assert(kTermsPrepThreads * 8 == 1024, "a block of threads a warp block of the bias");
  const int64_t blk = blockIdx.x - key_blocks, rows = blk / (kp / 64), bh = rows / (kp / 16);
  const int pos = 8 * threadIdx.x;
  const int q = int(rows - bh * (kp / 16)) * 16 + bias_block_row(pos);
  const int key0 = int(blk - rows * (kp / 64)) * 64 + bias_block_key(pos);
  const int64_t h = bh % heads, b = bh / heads;
  const int64_t row_off = b * p.bias_stride_b + h * p.bias_stride_h + q * p.bias_stride_q;
  const float root_hd = float(kLog2e) / p.scale_log2;
  // (the dtype dispatched outside the loop, so that the 8 loads are in flight together)
  float x[8];
  const auto load = [&](auto elem) {
    using E = decltype(elem);
    const E* bias = static_cast<const E*>(p.bias) + row_off;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int l = key0 + 8 * (e >> 1) + (e & 1);
      x[e] = l < L && q < L ? Pack2<E>::to_float(bias[l * p.bias_stride_k]) : 0.f;
    }
  };
  if (p.bias_f32) load(float{});
  else load(T{});
  alignas(16) __half v[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) v[e] = __float2half_rn(fminf(fmaxf(x[e] * root_hd, -65504.f), 65504.f));
  *reinterpret_cast<uint4*>(const_cast<__half*>(p.bias_frag) + blk * 1024 + pos) = *reinterpret_cast<const uint4*>(v);
}

}  // namespace axial_fused
