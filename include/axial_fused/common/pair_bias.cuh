// The protein modules' pair bias in one kernel: bias[b, h, i, j] = LayerNorm(x[b, i, j, :]) . w[h, :]
// (OpenFold's linear_z(layer_norm_z(z)), the triangle bias linear(layer_norm(x))), written head-major
// so that a pass reads it as its [B, heads, L, L] bias.
//
// A memory-bound pass over x (c values read a token, `heads` written), one thread a token, one pass
// over its row. The LayerNorm folds into the projection:
//   bias_h = rstd * sum_c (x_c - mean) gamma_c w_hc + sum_c beta_c w_hc
//          = rstd * (D_h - m * S_h) + B_h,   D_h = sum_c d_c gw_ch,  d_c = x_c - x_0,  m = mean - x_0,
// with gw_ch = gamma_c w_hc, S_h = sum_c gw_ch and B_h = sum_c beta_c w_hc computed once per block into
// shared memory, so a channel costs one shared load of `heads` floats (the same address in every lane:
// a broadcast) and heads + 2 FMAs, with no warp reductions. The statistics and products are in float32,
// about x's first value x_0 (so that sum d_c^2 / c - m^2, the variance, does not cancel). A token's row
// is read in 128-byte chunks, each by 16-byte loads (VEC: c a multiple of the chunk and x 16-byte
// aligned) or one value at a time; consecutive threads take consecutive tokens, so the stores of one
// head are coalesced.
#pragma once
#include "axial_fused/common/device.cuh"

namespace axial_fused {

struct PairBiasParams {
  const void *x, *ln_w, *ln_b, *w;
  void* out;
  int64_t tokens, plane;  // B * I * J; I * J
  int c, heads;
  float eps;
};

constexpr int kPairBiasThreads = 128, kPairBiasBlocks = 4096;

// HMAX: heads rounded up to 4, 8, 16 or 32 (the accumulators; gw rows padded with zeros).
template <int HMAX>
constexpr size_t pair_bias_smem(int c) {
  return (size_t(c) * HMAX + 2 * HMAX) * sizeof(float);
}

template <class T, int HMAX, bool VEC>
__global__ void __launch_bounds__(kPairBiasThreads) pair_bias_kernel(const __grid_constant__ PairBiasParams p) {
  static_assert(HMAX % 4 == 0, "gw rows are read as float4");
  constexpr int CH = 128 / int(sizeof(T));  // the channels of a 128-byte chunk
  extern __shared__ float4 pb_smem4[];
  float* gw = reinterpret_cast<float*>(pb_smem4);  // [c][HMAX]
  float* sb = gw + p.c * HMAX;                     // S_h [HMAX], then B_h [HMAX]
  const int C = p.c, H = p.heads;
  const T* ln_w = static_cast<const T*>(p.ln_w);
  const T* ln_b = static_cast<const T*>(p.ln_b);
  const T* w = static_cast<const T*>(p.w);
  for (int i = threadIdx.x; i < C * HMAX; i += blockDim.x) {
    const int c = i / HMAX, h = i - c * HMAX;
    gw[i] = h < H ? Pack2<T>::to_float(ln_w[c]) * Pack2<T>::to_float(w[h * C + c]) : 0.f;
  }
  const int lane = threadIdx.x & 31;
  for (int h = threadIdx.x / 32; h < HMAX; h += blockDim.x / 32) {
    float s[2] = {0.f, 0.f};
    if (h < H)
      for (int c = lane; c < C; c += 32) {
        const float wv = Pack2<T>::to_float(w[h * C + c]);
        s[0] = fmaf(Pack2<T>::to_float(ln_w[c]), wv, s[0]);
        s[1] = fmaf(Pack2<T>::to_float(ln_b[c]), wv, s[1]);
      }
    warp_sum_rows(s);
    if (lane == 0) sb[h] = s[0], sb[HMAX + h] = s[1];
  }
  __syncthreads();

  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t n = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; n < p.tokens; n += step) {
    const T* xr = static_cast<const T*>(p.x) + n * C;
    const float x0 = Pack2<T>::to_float(xr[0]);
    float s1 = 0.f, s2 = 0.f, dot[HMAX];
#pragma unroll
    for (int h = 0; h < HMAX; ++h) dot[h] = 0.f;
    const auto add = [&](float xc, int c) {  // channel c's value into the sums
      const float d = xc - x0;
      s1 += d;
      s2 = fmaf(d, d, s2);
      const float4* g4 = reinterpret_cast<const float4*>(gw + c * HMAX);
#pragma unroll
      for (int j = 0; j < HMAX / 4; ++j) {
        const float4 g = g4[j];
        dot[4 * j] = fmaf(d, g.x, dot[4 * j]);
        dot[4 * j + 1] = fmaf(d, g.y, dot[4 * j + 1]);
        dot[4 * j + 2] = fmaf(d, g.z, dot[4 * j + 2]);
        dot[4 * j + 3] = fmaf(d, g.w, dot[4 * j + 3]);
      }
    };
    if constexpr (VEC) {
      for (int c0 = 0; c0 < C; c0 += CH) {
        uint4 raw[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) raw[i] = reinterpret_cast<const uint4*>(xr + c0)[i];
#pragma unroll
        for (int k = 0; k < CH; ++k) add(Pack2<T>::to_float(reinterpret_cast<const T*>(raw)[k]), c0 + k);
      }
    } else {
      for (int c = 0; c < C; ++c) add(Pack2<T>::to_float(xr[c]), c);
    }
    const float m = s1 / C, rstd = rsqrtf(fmaxf(s2 / C - m * m, 0.f) + p.eps);
    const int64_t b = n / p.plane;
    T* o = static_cast<T*>(p.out) + b * H * p.plane + (n - b * p.plane);
#pragma unroll
    for (int h = 0; h < HMAX; ++h)
      if (h < H) o[h * p.plane] = Pack2<T>::from_float(rstd * (dot[h] - m * sb[h]) + sb[HMAX + h]);
  }
}

}  // namespace axial_fused
