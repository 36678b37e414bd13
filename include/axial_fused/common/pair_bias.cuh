// The protein modules' pair bias in one kernel: bias[b, h, i, j] = LayerNorm(x[b, i, j, :]) . w[h, :]
// (OpenFold's linear_z(layer_norm_z(z)), the triangle bias linear(layer_norm(x))), written head-major
// so that a pass reads it as its [B, heads, L, L] bias. A memory-bound pass over x (c values read a
// token, `heads` written). The LayerNorm folds into the projection:
//   bias_h = rstd * (D_h - mean * S_h) + B_h,   D_h = sum_c x_c gw_ch,  gw_ch = gamma_c w_hc,
//   S_h = sum_c gw_ch,  B_h = sum_c beta_c w_hc,
// gw, S and B computed once per block into shared memory. Two kernels, by x's dtype:
//
// 16-bit x (pair_bias_mma_kernel): everything per token on the tensor cores (mma.sync m16n8k16). A
// warp takes 16 tokens at a time, 128 channels a step, straight from global memory into registers:
// lane (g, t) = (lane / 4, lane % 4) loads the 16-byte pieces 4 j + t (j < 4) of rows g and g + 8,
// and uses them as its A fragments as they come (a product's sum over k does not care which channel
// sits at which k, so gw's fragments are stored in the same order). Per 16 channels the warp runs one
// product per 8 heads (D), one against ones (sum x) and two against its own rows as B (sum x^2 on the
// diagonals of x x^T); gw is rounded to x's dtype and S_h summed from the rounded values, so the
// centring is exact for the weights used (the rounding is of the size of PyTorch rounding its LayerNorm
// output to x's dtype). The variance is sum x^2 / c - mean^2 from exact products summed in float32: it
// loses about (mean / std)^2 * 2^-23 relative, below 16-bit rounding while |mean| < ~50 std.
// One wave of blocks; each warp's first tile is requested before the block's setup, each next one
// before the current one's stores.
//
// float32 x (pair_bias_kernel): CUDA cores, a lane a token. A warp takes 32 consecutive tokens at a
// time, their rows in 128-byte chunks: each chunk of the 32 rows (4 KB, contiguous rows of x) comes by
// coalesced 16-byte cp.async copies into a per-warp ring of shared-memory stages, STAGES - 1 chunks
// ahead, the first requested before the block's setup; then each lane reads its own token's chunk from
// the stage (16-byte pieces swizzled by row, so the lanes' reads do not share banks) and accumulates
// it, about x's first value x_0 (d_c = x_c - x_0, D_h over d, so that sum d_c^2 / c - m^2, the
// variance, does not cancel): a channel costs one shared load of `heads` gw values (a broadcast) and
// heads + 2 FMAs, with no warp reductions. Stores: a lane a token, so a head's 32 values of a warp are
// contiguous. Rows that are not whole 16-byte pieces at 16-byte aligned addresses (!VEC; for the
// tensor-core kernel whole 32-channel groups) are staged by plain loads, a value at a time.
#pragma once
#include "axial_fused/common/device.cuh"
#include "axial_fused/mma_sync/warp_mma.cuh"

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


// ---- 16-bit x: the tensor cores -----------------------------------------------------------------

constexpr int kPairBiasMmaThreads = 256;

// NT: heads rounded up to 8, 16 or 32, in 8-head tiles. Shared memory: gw's B fragments, [k-tile of
// 16 channels][NT][lane] (two registers each), then each warp's sums of S_h and B_h.
template <int NT>
constexpr size_t pair_bias_mma_smem(int c) {
  return size_t((c + 127) / 128) * 8 * NT * 32 * sizeof(uint2) + (kPairBiasMmaThreads / 32) * 2 * 8 * NT * sizeof(float);
}
// Blocks an SM the registers are set for (80 registers at NT = 1, 128 above; no spills).
constexpr int pair_bias_mma_min_blocks(int nt) { return nt == 1 ? 3 : 2; }

template <class T, int NT, bool VEC>
__global__ void __launch_bounds__(kPairBiasMmaThreads, pair_bias_mma_min_blocks(NT))
    pair_bias_mma_kernel(const __grid_constant__ PairBiasParams p) {
  static_assert(sizeof(T) == 2, "the tensor-core form takes 16-bit x");
  using P2 = typename Pack2<T>::type;
  constexpr int WARPS = kPairBiasMmaThreads / 32;
  extern __shared__ uint2 pbm_frag[];  // [k-tile][NT][32]
  const int C = p.c, H = p.heads, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int chunks = (C + 127) / 128, frags = chunks * 8 * NT * 32;
  float* sb = reinterpret_cast<float*>(pbm_frag + frags);  // each warp's sums: [warp][S_h, B_h][8 NT]
  const T* x = static_cast<const T*>(p.x);
  const int64_t tiles = (p.tokens + 15) / 16, wstep = int64_t(gridDim.x) * WARPS;
  int64_t tile = int64_t(blockIdx.x) * WARPS + threadIdx.x / 32;

  // One step's pieces: r[2 j + rho] = row g + 8 rho of the tile, channels ch * 128 + 8 (4 j + t) + [0, 8)
  // (from one row pointer, the pieces at immediate offsets). VEC (rows of whole 32-channel groups):
  // a group past the row is not loaded and not multiplied (the step's loop stops at the row's end),
  // and a piece of a row past the tokens keeps what r held, which goes only into sums that are not
  // stored (each token's sums read its own row alone). !VEC: zeros past the row.
  uint4 r[8];
  const auto load = [&](int64_t tl, int ch) {
    const int64_t row = tl * 16 + g;
    const int cb = ch * 128 + 8 * t;
    const T* src[2] = {x + row * C + cb, x + (row + 8) * C + cb};
    const bool row_ok[2] = {row < p.tokens, row + 8 < p.tokens};
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int rho = 0; rho < 2; ++rho) {
        const bool ok = row_ok[rho] && cb + 32 * j < C;
        if constexpr (VEC) {
          if (ok) r[2 * j + rho] = __ldg(reinterpret_cast<const uint4*>(src[rho] + 32 * j));
        } else {
          alignas(16) T v[8];
#pragma unroll
          for (int e = 0; e < 8; ++e) v[e] = ok && cb + 32 * j + e < C ? src[rho][32 * j + e] : Pack2<T>::from_float(0.f);
          r[2 * j + rho] = *reinterpret_cast<const uint4*>(v);
        }
      }
  };
  if (tile < tiles) load(tile, 0);  // (in flight during the setup)

  // gw's fragments: entry (k-tile kt, nt, lane l) holds gw at channels c0 + [0, 4) for head
  // 8 nt + l / 4, with c0 the channels of l's A registers at kt: b0 pairs with A's k = 2t, 2t + 1,
  // b1 with k = 2t + 8, 2t + 9. Warp w fills k-tiles w, w + WARPS, ...; each lane sums its entries'
  // rounded gw (S_h: the values the products use) and beta_c w_hc (B_h), the quad adds its four
  // lanes' sums, and the warps' sums are added after the barrier in a fixed order.
  const T* ln_w = static_cast<const T*>(p.ln_w);
  const T* ln_b = static_cast<const T*>(p.ln_b);
  const T* w = static_cast<const T*>(p.w);
  const int warp = threadIdx.x / 32;
  float part[NT][2] = {};
  for (int kt = warp; kt < chunks * 8; kt += WARPS) {
    const int c0 = (kt >> 3) * 128 + 8 * (4 * ((kt & 7) >> 1) + t) + 4 * (kt & 1);
    float gv[4], bv[4], wv[NT][4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const bool ok = c0 + e < C;
      gv[e] = ok ? Pack2<T>::to_float(ln_w[c0 + e]) : 0.f;
      bv[e] = ok ? Pack2<T>::to_float(ln_b[c0 + e]) : 0.f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int h = 8 * nt + g;
        wv[nt][e] = ok && h < H ? Pack2<T>::to_float(w[h * C + c0 + e]) : 0.f;
      }
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const P2 lo = Pack2<T>::make(gv[0] * wv[nt][0], gv[1] * wv[nt][1]);
      const P2 hi = Pack2<T>::make(gv[2] * wv[nt][2], gv[3] * wv[nt][3]);
      pbm_frag[(kt * NT + nt) * 32 + lane] = make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
      const float2 l2 = Pack2<T>::unpack(lo), h2 = Pack2<T>::unpack(hi);
      part[nt][0] += (l2.x + l2.y) + (h2.x + h2.y);
#pragma unroll
      for (int e = 0; e < 4; ++e) part[nt][1] = fmaf(bv[e], wv[nt][e], part[nt][1]);
    }
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      part[nt][k] += __shfl_xor_sync(0xffffffffu, part[nt][k], 1);
      part[nt][k] += __shfl_xor_sync(0xffffffffu, part[nt][k], 2);
      if (t == 0) sb[(warp * 2 + k) * 8 * NT + 8 * nt + g] = part[nt][k];
    }
  __syncthreads();
  float s_h[NT][2] = {}, b_h[NT][2] = {};  // this lane's heads 8 nt + 2 t + e
  for (int v = 0; v < WARPS; ++v)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        s_h[nt][e] += sb[(v * 2) * 8 * NT + 8 * nt + 2 * t + e], b_h[nt][e] += sb[(v * 2 + 1) * 8 * NT + 8 * nt + 2 * t + e];

  const float inv_c = 1.f / C;
  const P2 one2 = Pack2<T>::make(1.f, 1.f);
  const uint32_t one = *reinterpret_cast<const uint32_t*>(&one2);
  float acc[NT][4], sx[4], q0[4], q1[4];  // D; sum x; x x^T for tokens 0-7 and 8-15 as B
  int ch = 0;
  while (tile < tiles) {
    if (ch == 0) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sx[e] = q0[e] = q1[e] = 0.f;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) acc[nt][e] = 0.f;
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (ch * 128 + 32 * j >= C) break;  // (the rest of the last chunk is past the row)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const uint4 &lo = r[2 * j], &hi = r[2 * j + 1];
        const uint32_t a[4] = {half ? lo.z : lo.x, half ? hi.z : hi.x, half ? lo.w : lo.y, half ? hi.w : hi.y};
        const uint2* bf = pbm_frag + ((ch * 8 + 2 * j + half) * NT) * 32 + lane;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const uint2 b = bf[nt * 32];
          mma16816<T>(acc[nt], a, b.x, b.y);
        }
        mma16816<T>(sx, a, one, one);
        mma16816<T>(q0, a, a[0], a[2]);
        mma16816<T>(q1, a, a[1], a[3]);
      }
    }
    const int64_t cur = tile;
    const bool last = ch == chunks - 1;
    if (last) ch = 0, tile += wstep; else ++ch;
    if (tile < tiles) load(tile, ch);  // the next step's pieces, in flight during this tile's stores
    if (last) {
      // Token g's sum of squares sits at (g, g) of q0, token g + 8's at (g + 8, g) of q1: both in lane
      // (g, g / 2), element g % 2 (of the upper half for q1).
      const int src = 4 * g + (g >> 1);
      const float sq[2] = {__shfl_sync(0xffffffffu, g & 1 ? q0[1] : q0[0], src),
                           __shfl_sync(0xffffffffu, g & 1 ? q1[3] : q1[2], src)};
#pragma unroll
      for (int rho = 0; rho < 2; ++rho) {
        const int64_t n = cur * 16 + g + 8 * rho;
        if (n < p.tokens) {
          const float m = sx[2 * rho] * inv_c, rstd = rsqrtf(fmaxf(sq[rho] * inv_c - m * m, 0.f) + p.eps);
          // (a 32-bit division below 2^32 tokens: a 64-bit one is a call, whose saved registers spill)
          const int64_t b = p.tokens <= p.plane ? 0
                            : p.tokens <= 0xffffffffLL ? int64_t(uint32_t(n) / uint32_t(p.plane)) : n / p.plane;
          T* o = static_cast<T*>(p.out) + b * H * p.plane + (n - b * p.plane);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int h = 8 * nt + 2 * t + e;
              if (h < H) o[h * p.plane] = Pack2<T>::from_float(rstd * (acc[nt][2 * rho + e] - m * s_h[nt][e]) + b_h[nt][e]);
            }
        }
      }
    }
  }
}

}  // namespace axial_fused
