// The protein modules' pair bias in one kernel: bias[b, h, i, j] = LayerNorm(x[b, i, j, :]) . w[h, :]
// (OpenFold's linear_z(layer_norm_z(z)), the triangle bias linear(layer_norm(x))), written head-major
// so that a pass reads it as its [B, heads, L, L] bias. A memory-bound pass over x (c values a token
// read, `heads` written): one warp handles kTokens tokens at a time, their loads issued together.
// Lane l holds NPL channels: l*NPL .. l*NPL+NPL-1 by vector loads when c == 32 * NPL and x is 16-byte
// aligned (VEC), l, l+32, ... otherwise. The LayerNorm statistics in float32 by two warp sums, then
// one warp sum per head; lane h writes head h. The LayerNorm's affine and w sit in shared memory as
// float, loaded once per block (a grid of at most kPairBiasBlocks blocks strides over the tokens).
#pragma once
#include <type_traits>

#include "axial_fused/common/device.cuh"

namespace axial_fused {

struct PairBiasParams {
  const void *x, *ln_w, *ln_b, *w;
  void* out;
  int64_t tokens, plane;  // B * I * J; I * J
  int c, heads;
  float eps;
};

constexpr int kPairBiasWarps = 8, kPairBiasTokens = 2, kPairBiasBlocks = 2048;

// Lane `lane`'s NPL values of a row of floats in shared memory (VEC: contiguous, by vector reads).
template <int NPL, bool VEC>
__device__ __forceinline__ void smem_lane_values(const float* row, int lane, int C, float (&out)[NPL]) {
  if constexpr (VEC) {
    using V = std::conditional_t<NPL % 4 == 0, float4, float2>;
    constexpr int E = sizeof(V) / sizeof(float);
    const V* src = reinterpret_cast<const V*>(row + lane * NPL);
#pragma unroll
    for (int i = 0; i < NPL / E; ++i) {
      const V v = src[i];
      const float* f = reinterpret_cast<const float*>(&v);
#pragma unroll
      for (int e = 0; e < E; ++e) out[i * E + e] = f[e];
    }
  } else {
#pragma unroll
    for (int k = 0; k < NPL; ++k) out[k] = lane + 32 * k < C ? row[lane + 32 * k] : 0.f;
  }
}

// Lane `lane`'s NPL values of token row xr (absent channels 0).
template <class T, int NPL, bool VEC>
__device__ __forceinline__ void load_lane_values(const T* xr, int lane, int C, float (&out)[NPL]) {
  if constexpr (VEC) {
    constexpr int BYTES = NPL * int(sizeof(T));
    using V = std::conditional_t<BYTES % 16 == 0, uint4, std::conditional_t<BYTES % 8 == 0, uint2, unsigned>>;
    V raw[BYTES / sizeof(V)];
    const V* src = reinterpret_cast<const V*>(xr + lane * NPL);
#pragma unroll
    for (int i = 0; i < int(BYTES / sizeof(V)); ++i) raw[i] = src[i];
    const T* e = reinterpret_cast<const T*>(raw);
#pragma unroll
    for (int k = 0; k < NPL; ++k) out[k] = Pack2<T>::to_float(e[k]);
  } else {
#pragma unroll
    for (int k = 0; k < NPL; ++k) out[k] = lane + 32 * k < C ? Pack2<T>::to_float(xr[lane + 32 * k]) : 0.f;
  }
}

template <class T, int NPL, bool VEC>
__global__ void __launch_bounds__(32 * kPairBiasWarps) pair_bias_kernel(const __grid_constant__ PairBiasParams p) {
  constexpr int TOK = kPairBiasTokens;
  extern __shared__ float pb_smem[];
  const int C = p.c, lane = threadIdx.x & 31;
  float* gw = pb_smem;
  float* gb = gw + C;
  float* ws = gb + C;  // [heads][C]
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    gw[i] = Pack2<T>::to_float(static_cast<const T*>(p.ln_w)[i]);
    gb[i] = Pack2<T>::to_float(static_cast<const T*>(p.ln_b)[i]);
  }
  for (int i = threadIdx.x; i < p.heads * C; i += blockDim.x) ws[i] = Pack2<T>::to_float(static_cast<const T*>(p.w)[i]);
  __syncthreads();
  // A lane's channels count toward the statistics only where they exist (the scalar form's tail).
  float present[NPL];
#pragma unroll
  for (int k = 0; k < NPL; ++k) present[k] = VEC || lane + 32 * k < C ? 1.f : 0.f;
  const int64_t step = int64_t(gridDim.x) * kPairBiasWarps * TOK;
  for (int64_t n0 = (int64_t(blockIdx.x) * kPairBiasWarps + threadIdx.x / 32) * TOK; n0 < p.tokens; n0 += step) {
    float v[TOK][NPL], s[TOK], q[TOK];
#pragma unroll
    for (int t = 0; t < TOK; ++t) {
      const int64_t n = n0 + t < p.tokens ? n0 + t : p.tokens - 1;  // (a repeated token's result is not stored)
      load_lane_values<T, NPL, VEC>(static_cast<const T*>(p.x) + n * C, lane, C, v[t]);
    }
#pragma unroll
    for (int t = 0; t < TOK; ++t) {
      s[t] = 0.f;
#pragma unroll
      for (int k = 0; k < NPL; ++k) s[t] += v[t][k];
    }
    warp_sum_rows(s);
#pragma unroll
    for (int t = 0; t < TOK; ++t) {
      s[t] /= C;  // the mean
      q[t] = 0.f;
#pragma unroll
      for (int k = 0; k < NPL; ++k) q[t] += present[k] * (v[t][k] - s[t]) * (v[t][k] - s[t]);
    }
    warp_sum_rows(q);
    {
      float g[NPL], b[NPL];
      smem_lane_values<NPL, VEC>(gw, lane, C, g);
      smem_lane_values<NPL, VEC>(gb, lane, C, b);
#pragma unroll
      for (int t = 0; t < TOK; ++t) {
        const float rstd = rsqrtf(q[t] / C + p.eps);
#pragma unroll
        for (int k = 0; k < NPL; ++k) v[t][k] = (v[t][k] - s[t]) * rstd * g[k] + b[k];
      }
    }
    float mine[TOK] = {};
    for (int h = 0; h < p.heads; ++h) {
      float wh[NPL], d[TOK] = {};
      smem_lane_values<NPL, VEC>(ws + h * C, lane, C, wh);  // (0 past the tail: those channels drop out)
#pragma unroll
      for (int t = 0; t < TOK; ++t)
#pragma unroll
        for (int k = 0; k < NPL; ++k) d[t] = fmaf(v[t][k], wh[k], d[t]);
      warp_sum_rows(d);
      if (lane == h)
#pragma unroll
        for (int t = 0; t < TOK; ++t) mine[t] = d[t];
    }
    if (lane < p.heads)
#pragma unroll
      for (int t = 0; t < TOK; ++t) {
        const int64_t n = n0 + t;
        if (n >= p.tokens) break;
        const int64_t b = n / p.plane;
        static_cast<T*>(p.out)[(b * p.heads + lane) * p.plane + (n - b * p.plane)] = Pack2<T>::from_float(mine[t]);
      }
  }
}

}  // namespace axial_fused
