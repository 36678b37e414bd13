// LayerNorm in registers, shared by every kernel: a warp normalises a batch of rows held as pairs
// (layernorm_batch), and layernorm_rows streams rows from global memory through it.
#pragma once
#include "axial_fused/common/device.cuh"

namespace axial_fused {

// LayerNorm of RB rows held by a warp, row j as D/64 pairs per lane (lane's pair i is features
// 2 lane + 64 i, +1), with this lane's LayerNorm weight and bias pairs wr/br: store(j, d, y[d], y[d+1])
// receives each normalised pair. Two-pass statistics in fp32 from registers, the RB rows reduced
// together: each shuffle step of every row before the next step (ptxas does not interleave separate
// rows' shuffle chains by itself, and one chain after another is RB times the latency).
template <int D, int RB, class Store>
__device__ __forceinline__ void layernorm_batch(const PassParams& p, const float2 (&v)[RB][D / 64],
                                                const float2 (&wr)[D / 64], const float2 (&br)[D / 64], Store store) {
  constexpr int NV = D / 64;
  const int lane = threadIdx.x & 31;
  float mean[RB], rstd[RB];
#pragma unroll
  for (int j = 0; j < RB; ++j) {
    mean[j] = 0.f;
#pragma unroll
    for (int i = 0; i < NV; ++i) mean[j] += v[j][i].x + v[j][i].y;
  }
  warp_sum_rows(mean);
#pragma unroll
  for (int j = 0; j < RB; ++j) {
    mean[j] *= 1.f / D;
    rstd[j] = 0.f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const float a = v[j][i].x - mean[j], c = v[j][i].y - mean[j];
      rstd[j] += a * a + c * c;
    }
  }
  warp_sum_rows(rstd);
#pragma unroll
  for (int j = 0; j < RB; ++j) {
    rstd[j] = rsqrtf(rstd[j] * (1.f / D) + p.eps);
#pragma unroll
    for (int i = 0; i < NV; ++i)
      store(j, 2 * lane + 64 * i, (v[j][i].x - mean[j]) * rstd[j] * wr[i].x + br[i].x,
            (v[j][i].y - mean[j]) * rstd[j] * wr[i].y + br[i].y);
  }
}

// This lane's LayerNorm weight and bias pairs (layernorm_batch's wr/br), loaded once per tile.
template <class T, int D>
__device__ __forceinline__ void load_ln_params(const PassParams& p, float2 (&wr)[D / 64], float2 (&br)[D / 64]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < D / 64; ++i) {
    wr[i] = load2(static_cast<const T*>(p.ln_w) + 2 * lane + 64 * i);
    br[i] = load2(static_cast<const T*>(p.ln_b) + 2 * lane + 64 * i);
  }
}

// LayerNorm of ROWS tokens read from global memory, one warp per row (NWARPS warps):
// store(r, d, y[d], y[d+1]) receives each normalised pair of row r; rows with row_off(r) < 0 get zeros.
// A warp's rows go in batches of RB whose loads are all issued before any is normalised (one memory
// latency a batch, not one a row), then normalised together (layernorm_batch). A padding row is normalised too
// (its v = 0 gives finite values) and stored as zeros.
template <class T, int D, int ROWS, int NWARPS, class RowOff, class Store>
__device__ __forceinline__ void layernorm_rows(const PassParams& p, RowOff row_off, Store store) {
  constexpr int NV = D / 64, RB_MAX = NV >= 8 ? 1 : 8 / NV;  // rows in flight: at most 8 float2 a lane
  constexpr int RB = RB_MAX * NWARPS <= ROWS ? RB_MAX : ROWS / NWARPS;  // (fewer rows: the short-block form)
  static_assert(RB >= 1 && ROWS % (NWARPS * RB) == 0, "a warp's batches tile the rows");
  const T* x = static_cast<const T*>(p.x);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float2 wr[NV], br[NV];
  load_ln_params<T, D>(p, wr, br);
  for (int r0 = warp; r0 < ROWS; r0 += NWARPS * RB) {
    // The batch's offsets first, then its loads in one straight run (an offset's 64-bit division may
    // call a subroutine, and a load issued before a call is waited for)
    int64_t off[RB];
#pragma unroll
    for (int j = 0; j < RB; ++j) off[j] = row_off(r0 + j * NWARPS);
    float2 v[RB][NV];
#pragma unroll
    for (int j = 0; j < RB; ++j)
#pragma unroll
      for (int i = 0; i < NV; ++i) v[j][i] = off[j] >= 0 ? load2(x + off[j] + 2 * lane + 64 * i) : make_float2(0.f, 0.f);
    layernorm_batch<D>(p, v, wr, br, [&](int j, int d, float a, float b) {
      const bool ok = off[j] >= 0;
      store(r0 + j * NWARPS, d, ok ? a : 0.f, ok ? b : 0.f);
    });
  }
}

// xs[r] = LN(x[row_off(r)]) for the BM rows of a tile (row stride LDX); ROWS < BM: its first ROWS rows

}  // namespace axial_fused
