// The online softmax of the Hopper attention kernel (attn_kernel.cuh): the running row maxima and
// sums of a warpgroup's 64-row query halves, their update from one tile of scores, the rescale of the
// output accumulators, and the final 1 / rowsum (after FlashAttention-3's hopper/softmax.h).
//
// Scores are in the wgmma accumulator layout: row g in entries e = 0, 1 and row g + 8 in e = 2, 3 of
// each 8-column block; a row's scores are spread over the quad's four threads, whose partial sums are
// combined only at the end (finalize). Maxima are in log2 units with the scale folded in, so each
// probability is one exp2 of an fma.
#pragma once
#include "axial_fused/sm90/wgmma.cuh"

namespace axial_fused {

// One tile of the online softmax for a warpgroup's 64 x BN scores: updates the running max (log2
// units, scale folded in) and this thread's partial row sums, returns the factor alpha the output
// rows must be rescaled by, and the probabilities as the A fragments of P V.
template <class T, int BN>
__device__ __forceinline__ void softmax_tile(float (&sc)[BN / 2], float (&m_run)[2], float (&l_run)[2], float (&alpha)[2],
                                             uint32_t (&pa)[BN / 16][4], float scale_log2) {
  float mx[2], rs[2] = {0.f, 0.f}, mu[2];
  acc_row_max(sc, mx);
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const float m_new = fmaxf(m_run[hr], mx[hr] * scale_log2);
    mu[hr] = m_new == -INFINITY ? 0.f : m_new;  // a row with nothing unmasked yet stays all-zero
    alpha[hr] = exp2_ftz(m_run[hr] - mu[hr]);
    m_run[hr] = m_new;
  }
#pragma unroll
  for (int jb = 0; jb < BN / 8; ++jb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float x = fmaf(sc[4 * jb + e], scale_log2, -mu[e >> 1]);
      sc[4 * jb + e] = exp2_ftz(x);
      rs[e >> 1] += sc[4 * jb + e];
    }
  }
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) l_run[hr] = l_run[hr] * alpha[hr] + rs[hr];
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) acc_to_a<T>(pa[kk], sc, 0, kk);
}

// The state of one head's online softmax over MT query halves of 64 rows, BN-key score tiles:
// this thread's two rows' running maxima and partial sums per half.
//   reset()                   before a head's first tile;
//   update<M>(sc, pa, alpha)  a tile of half M's scores into probabilities (pa, the A fragments of
//                             P V), and the factor alpha its output rows must be rescaled by;
//   rescaler(alpha)(o)        those output rows times alpha;
//   finalize(m, inv)          1 / rowsum of half m's two rows (the quad's partial sums combined);
//   uniform(L, first)         the sums of a head whose queries attend uniformly to L keys (value sums).
// alpha stays the caller's (a register pair, rewritten by each update), as FlashAttention-3's
// scores_scale.
template <class T, int BN, int MT>
struct OnlineSoftmax {
  float m_run[MT][2], l_run[MT][2];

  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      m_run[m][0] = m_run[m][1] = -INFINITY;
      l_run[m][0] = l_run[m][1] = 0.f;
    }
  }
  template <int M>
  __device__ __forceinline__ void update(float (&sc)[BN / 2], uint32_t (&pa)[BN / 16][4], float (&alpha)[2],
                                         float scale_log2) {
    softmax_tile<T, BN>(sc, m_run[M], l_run[M], alpha, pa, scale_log2);
  }
  // The rescale of output rows (an accumulator of one half) by the factor in `alpha` as it holds at
  // each call (the last update's). A closure rather than a member function: the kernel's machine
  // code is then exactly that of the loop written in place (ptxas's schedule of the head loop shifts
  // with a forceinline function here).
  __device__ __forceinline__ static auto rescaler(const float (&alpha)[2]) {
    return [&alpha](auto& o) {
      constexpr int R = sizeof(o) / sizeof(float);
#pragma unroll
      for (int jb = 0; jb < R / 4; ++jb) {
        o[4 * jb] *= alpha[0];
        o[4 * jb + 1] *= alpha[0];
        o[4 * jb + 2] *= alpha[1];
        o[4 * jb + 3] *= alpha[1];
      }
    };
  }
  __device__ __forceinline__ void finalize(int m, float (&inv)[2]) const {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float l = l_run[m][hr];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      inv[hr] = 1.f / l;
    }
  }
  // Every query's sum is L (the quad's: L on its first thread, `first`, 0 on the others).
  __device__ __forceinline__ void uniform(int L, bool first) {
#pragma unroll
    for (int m = 0; m < MT; ++m) l_run[m][0] = l_run[m][1] = first ? float(L) : 0.f;
  }
};

// The softmax of whole rows at once (the fused kernel's: all of a row's keys in one BN-key score
// tile, no online rescaling), in place in the wgmma accumulator layout: the probabilities
// exp2(s * scale - mx), unnormalised, with mx the row's scaled maximum (0 for a row of -inf only),
// and the rows' sums (the quad's, combined) added to `sum`. mx and sum are the caller's (declared
// there, the kernel's machine code is that of this code written in place).
template <int BN>
__device__ __forceinline__ void row_softmax(float (&s)[BN / 2], float scale, float (&mx)[2], float (&sum)[2]) {
  acc_row_max(s, mx);
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) mx[hr] = mx[hr] == -INFINITY ? 0.f : mx[hr] * scale;
#pragma unroll
  for (int jb = 0; jb < BN / 8; ++jb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[4 * jb + e] = exp2_ftz(fmaf(s[4 * jb + e], scale, -mx[e >> 1]));
      sum[e >> 1] += s[4 * jb + e];
    }
  }
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    sum[hr] += __shfl_xor_sync(0xffffffffu, sum[hr], 1);
    sum[hr] += __shfl_xor_sync(0xffffffffu, sum[hr], 2);
  }
}

}  // namespace axial_fused
