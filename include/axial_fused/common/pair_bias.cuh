// The protein modules' pair bias in one kernel: bias[b, h, i, j] = LayerNorm(x[b, i, j, :]) . w[h, :]
// (OpenFold's linear_z(layer_norm_z(z)), the triangle bias linear(layer_norm(x))), written head-major
// so that a pass reads it as its [B, heads, L, L] bias.
//
// A memory-bound pass over x (c values read a token, `heads` written). A warp takes 32 consecutive
// tokens at a time, their rows in 128-byte chunks: each chunk of the 32 rows (4 KB, contiguous rows
// of x) comes by coalesced 16-byte cp.async copies into a per-warp ring of shared-memory stages,
// STAGES - 1 chunks ahead, the first requested before the block's setup; then each lane reads its
// own token's chunk from the stage (16-byte pieces swizzled by row, so the lanes' reads do not share
// banks) and accumulates it. The LayerNorm folds into the projection:
//   bias_h = rstd * sum_c (x_c - mean) gamma_c w_hc + sum_c beta_c w_hc
//          = rstd * (D_h - m * S_h) + B_h,   D_h = sum_c d_c gw_ch,  d_c = x_c - x_0,  m = mean - x_0,
// with gw_ch = gamma_c w_hc, S_h = sum_c gw_ch and B_h = sum_c beta_c w_hc computed once per block into
// shared memory, so a channel costs one shared load of `heads` floats (the same address in every lane:
// a broadcast) and heads + 2 FMAs, with no warp reductions. The statistics and products are in float32,
// about x's first value x_0 (so that sum d_c^2 / c - m^2, the variance, does not cancel). Stores: a
// lane a token, so a head's 32 values of a warp are contiguous. Rows that are not whole 16-byte pieces
// at 16-byte aligned addresses (!VEC) are staged by plain loads, a value at a time.
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

constexpr int kPairBiasThreads = 128, kPairBiasStages = 3;
constexpr int kPairBiasStageBytes = 32 * 128;  // 32 tokens' 128-byte chunks

// HMAX: heads rounded up to 4, 8, 16 or 32 (the accumulators; gw rows padded with zeros).
template <int HMAX>
constexpr size_t pair_bias_smem(int c) {
  return size_t(kPairBiasThreads / 32) * kPairBiasStages * kPairBiasStageBytes +
         (size_t(c) * HMAX + 2 * HMAX) * sizeof(float);
}

template <class T, int HMAX, bool VEC>
__global__ void __launch_bounds__(kPairBiasThreads) pair_bias_kernel(const __grid_constant__ PairBiasParams p) {
  static_assert(HMAX % 4 == 0, "gw rows are read as float4");
  constexpr int CH = 128 / int(sizeof(T));  // the channels of a 128-byte chunk
  constexpr int PV = 16 / int(sizeof(T));   // the channels of a 16-byte piece
  constexpr int WARPS = kPairBiasThreads / 32, S = kPairBiasStages;
  extern __shared__ float4 pb_smem4[];
  const int C = p.c, H = p.heads, lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  char* ring = reinterpret_cast<char*>(pb_smem4) + warp * S * kPairBiasStageBytes;
  float* gw = reinterpret_cast<float*>(reinterpret_cast<char*>(pb_smem4) + WARPS * S * kPairBiasStageBytes);  // [c][HMAX]
  float* sb = gw + C * HMAX;  // S_h [HMAX], then B_h [HMAX]
  const T* x = static_cast<const T*>(p.x);

  // This warp's steps: its groups of 32 tokens (every WARPS * gridDim.x-th), each chunk of a group.
  const int chunks = (C + CH - 1) / CH;
  const int64_t groups = (p.tokens + 31) / 32, g0 = int64_t(blockIdx.x) * WARPS + warp, gstep = int64_t(gridDim.x) * WARPS;
  const int64_t steps = g0 < groups ? ((groups - 1 - g0) / gstep + 1) * chunks : 0;
  // Step s into stage s % S: lane l copies pieces (row 4i + l / 8, piece l % 8), i < 8.
  const auto request = [&](int64_t s) {
    if (s < steps) {
      const int64_t g = g0 + (s / chunks) * gstep;
      const int ch = int(s % chunks), pc = lane & 7;
      char* st = ring + int(s % S) * kPairBiasStageBytes;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int row = 4 * i + lane / 8;
        const int64_t tok = g * 32 + row;
        char* dst = st + row * 128 + ((pc ^ (row & 7)) << 4);
        const int c0 = ch * CH + pc * PV;
        if constexpr (VEC) {
          cp_async16(dst, x + (tok < p.tokens ? tok : 0) * C + c0, tok < p.tokens);
        } else {
          alignas(16) T v[PV];
#pragma unroll
          for (int e = 0; e < PV; ++e) v[e] = tok < p.tokens && c0 + e < C ? x[tok * C + c0 + e] : Pack2<T>::from_float(0.f);
          *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(v);
        }
      }
    }
    cp_async_commit();  // (an empty group past the last step keeps the wait counts uniform)
  };
#pragma unroll
  for (int s = 0; s < S - 1; ++s) request(s);

  const T* ln_w = static_cast<const T*>(p.ln_w);
  const T* ln_b = static_cast<const T*>(p.ln_b);
  const T* w = static_cast<const T*>(p.w);
  // The setup's loads U at a time per thread, all requested before any is used: an L2 round trip a
  // batch rather than a value (the x copies above are in flight meanwhile).
  constexpr int U = 8;
  for (int i0 = threadIdx.x; i0 < C * HMAX; i0 += U * kPairBiasThreads) {
    float a[U], b[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = i0 + u * kPairBiasThreads, c = i / HMAX, h = i - c * HMAX;
      const bool ok = i < C * HMAX && h < H;
      a[u] = ok ? Pack2<T>::to_float(ln_w[c]) : 0.f;
      b[u] = ok ? Pack2<T>::to_float(w[h * C + c]) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i0 + u * kPairBiasThreads < C * HMAX) gw[i0 + u * kPairBiasThreads] = a[u] * b[u];
  }
  for (int h = warp; h < HMAX; h += WARPS) {
    float s2[2] = {0.f, 0.f};
    if (h < H)
      for (int c0 = lane; c0 < C; c0 += U * 32) {
        float wv[U], gv[U], bv[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int c = c0 + 32 * u;
          wv[u] = c < C ? Pack2<T>::to_float(w[h * C + c]) : 0.f;
          gv[u] = c < C ? Pack2<T>::to_float(ln_w[c]) : 0.f;
          bv[u] = c < C ? Pack2<T>::to_float(ln_b[c]) : 0.f;
        }
#pragma unroll
        for (int u = 0; u < U; ++u) s2[0] = fmaf(gv[u], wv[u], s2[0]), s2[1] = fmaf(bv[u], wv[u], s2[1]);
      }
    warp_sum_rows(s2);
    if (lane == 0) sb[h] = s2[0], sb[HMAX + h] = s2[1];
  }
  __syncthreads();

  float x0 = 0.f, s1 = 0.f, sq = 0.f, dot[HMAX] = {};
  for (int64_t s = 0; s < steps; ++s) {
    request(s + S - 1);
    cp_async_wait<S - 1>();
    __syncwarp();  // the other lanes' copies of this stage are visible
    const int ch = int(s % chunks);
    if (ch == 0) {
      s1 = sq = 0.f;
#pragma unroll
      for (int h = 0; h < HMAX; ++h) dot[h] = 0.f;
    }
    const char* st = ring + int(s % S) * kPairBiasStageBytes + lane * 128;
#pragma unroll
    for (int pc = 0; pc < 8; ++pc) {
      const uint4 raw = *reinterpret_cast<const uint4*>(st + ((pc ^ (lane & 7)) << 4));
      const T* v = reinterpret_cast<const T*>(&raw);
      if (ch == 0 && pc == 0) x0 = Pack2<T>::to_float(v[0]);
#pragma unroll
      for (int e = 0; e < PV; ++e) {
        const int c = ch * CH + pc * PV + e;
        if (!VEC && c >= C) break;
        const float d = Pack2<T>::to_float(v[e]) - x0;
        s1 += d;
        sq = fmaf(d, d, sq);
        const float4* g4 = reinterpret_cast<const float4*>(gw + c * HMAX);
#pragma unroll
        for (int j = 0; j < HMAX / 4; ++j) {
          const float4 gv = g4[j];
          dot[4 * j] = fmaf(d, gv.x, dot[4 * j]);
          dot[4 * j + 1] = fmaf(d, gv.y, dot[4 * j + 1]);
          dot[4 * j + 2] = fmaf(d, gv.z, dot[4 * j + 2]);
          dot[4 * j + 3] = fmaf(d, gv.w, dot[4 * j + 3]);
        }
      }
    }
    __syncwarp();  // every lane is done with this stage before it is refilled
    const int64_t n = (g0 + (s / chunks) * gstep) * 32 + lane;
    if (ch == chunks - 1 && n < p.tokens) {
      const float m = s1 / C, rstd = rsqrtf(fmaxf(sq / C - m * m, 0.f) + p.eps);
      const int64_t b = n / p.plane;
      T* o = static_cast<T*>(p.out) + b * H * p.plane + (n - b * p.plane);
#pragma unroll
      for (int h = 0; h < HMAX; ++h)
        if (h < H) o[h * p.plane] = Pack2<T>::from_float(rstd * (dot[h] - m * sb[h]) + sb[HMAX + h]);
    }
  }
  cp_async_wait<0>();
}

}  // namespace axial_fused
