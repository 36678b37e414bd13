// The output projection as a kernel of its own, for the split Hopper pass (D >= 512; attn_kernel.cuh
// says why):
//   out = O @ W_out^T + bias + x
// for the pass's tokens in sequence order, O being the attention output that the split attention
// kernel left in the q columns of the q/k/v scratch ([tokens, 3D]: the first D columns of each row).
// A plain streamed GEMM, persistent: grid = min(tiles, SMs), one block per SM, each taking output
// tiles of 128 tokens x BN columns (tile = blockIdx.x, + gridDim.x, ...; a tile's column parts are
// consecutive, so the blocks running at once share their A rows in L2). Both operands come in
// 64-deep chunks (A: 128 x 64 of O, W: BN x 64 of W_out; SW128, S stages) by tensor-map copies that
// thread 0 issues (full / empty mbarriers per stage as in wg_gemm_tma); the chunk counter runs
// across tiles, so the next tile's first chunks load during this tile's epilogue. The two
// warpgroups take 64 rows each, BN / 128 accumulators of wgmma m64n128k16 (both operands in shared
// memory). The bias and residual of a tile's first 128 columns are loaded before its products
// (OutEpilogue's addends), the rest's after them; the outputs go out as 16-byte vectors.
// BN = 256 where D allows: a chunk then carries 48 KB for 4 MFLOP, 85 flops per byte from L2, against
// 64 at BN = 128, at which the tensor rate would need more L2 read bandwidth than L2 gives. A is read
// D / BN times and W_out once per 128-token row tile, where the fused projection of 64-token blocks
// reads W_out once per 64 tokens.
#pragma once
#include <cuda.h>  // CUtensorMap

#include "axial_fused/sm90/tile_size.h"
#include "axial_fused/sm90/wg_gemm.cuh"

namespace axial_fused {

template <class T, int D>
struct OutGemmSm90 {
  static constexpr OutGemmSm90Tile TILE = out_gemm_sm90_tile(D);
  static constexpr int BM = TILE.bm, BN = TILE.bn, BNW = TILE.bnw;
  static constexpr int NACC = BN / BNW, KW = TILE.kw, KC = D / KW, NT = D / BN;
  static constexpr uint32_t A_STAGE = BM * KW * 2, W_STAGE = BN * KW * 2, STAGE = A_STAGE + W_STAGE;
  // Row-offset tables for two tiles (the next tile's are written while the last warps may still be
  // in this one's epilogue), the mbarriers, 1024-byte alignment, then the stages.
  static constexpr size_t HEAD = 2 * 2 * BM * sizeof(int64_t) + 2 * 8 * 8;
  static constexpr int S_FIT = int((kSmemPerBlock - HEAD - 1024) / STAGE);
  static constexpr int S = S_FIT < TILE.max_stages ? S_FIT : TILE.max_stages;
  static constexpr size_t SMEM = HEAD + 1024 + size_t(S) * STAGE;
  static constexpr bool SERVED = D % BN == 0 && BN % BNW == 0 && BN <= 256 && D % KW == 0 && S >= TILE.min_stages;
};

// `amap`: the scratch's q columns as [tokens, D] with a row stride of 3D, boxes of 64 x 128;
// `wmap`: W_out [D, D], boxes of 64 x BN; both with the 128-byte swizzle.
// EXTRAS: the optional residual (PassParams::residual).
template <class T, int D, bool EXTRAS = false>
__global__ void __launch_bounds__(256, 1)
    out_gemm_sm90_kernel(const __grid_constant__ PassParams p, const __grid_constant__ CUtensorMap amap,
                         const __grid_constant__ CUtensorMap wmap) {
#if AXIAL_FUSED_SM90
  pdl_entry();
  using C = OutGemmSm90<T, D>;
  static_assert(C::SERVED, "out_gemm_sm90_kernel instantiated for a configuration it does not serve");
  constexpr int BM = C::BM, BN = C::BN, BNW = C::BNW, NACC = C::NACC, KW = C::KW, KC = C::KC, NT = C::NT, S = C::S;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  int64_t* tables = reinterpret_cast<int64_t*>(smem_raw);  // [2][xo[BM], oo[BM]]
  const uint32_t full = smem_u32(tables + 4 * BM), empty = full + 8 * 8;
  unsigned char* base = smem_raw + C::HEAD;
  base += (1024 - (smem_u32(base) & 1023)) & 1023;
  const uint32_t st0 = smem_u32(base);

  const int64_t tokens = p.num_seq * p.len;
  const int64_t tiles = (tokens + BM - 1) / BM * NT;
  const int tid = threadIdx.x, wg = warp_uniform(tid >> 7), warp = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  if (tid == 0) {
    for (int k = 0; k < S; ++k) {
      mbar_init(full + 8 * k, 1);
      mbar_init(empty + 8 * k, 8);
    }
    fence_mbar_init_cluster();
  }
  // Chunk `it` of this block: its (it / KC)-th tile, k-chunk it % KC. Thread 0 only.
  auto load = [&](int64_t it) {
    const int64_t tile = blockIdx.x + (it / KC) * int64_t(gridDim.x);
    if (tile < tiles) {
      const int s = int(it % S), kc = int(it % KC);
      if (it >= S) mbar_wait(empty + 8 * s, uint32_t((it / S) - 1) & 1);  // every warp released chunk it - S
      mbar_arrive_expect_tx(full + 8 * s, C::STAGE);
      const uint32_t st = st0 + s * C::STAGE;
      tma_load_2d(st, &amap, kc * KW, int((tile / NT) * BM), full + 8 * s);
      tma_load_2d(st + C::A_STAGE, &wmap, kc * KW, int(tile % NT) * BN, full + 8 * s);
    }
  };
  __syncthreads();  // the mbarriers are initialised
  if (tid == 0)
    for (int it = 0; it < S; ++it) load(it);
  __syncwarp();

  const int r0 = wg * 64 + warp * 16 + g;  // this thread's first row in the tile
  using Add = typename OutEpilogue<T, EXTRAS>::Addend;
  int64_t it = 0;
  for (int64_t tile = blockIdx.x, ti = 0; tile < tiles; tile += gridDim.x, ++ti) {
    const int64_t m0 = (tile / NT) * BM;
    const int n0 = int(tile % NT) * BN;
    int64_t* xo = tables + (ti & 1) * 2 * BM;
    int64_t* oo = xo + BM;
    for (int r = tid; r < BM; r += 256) {
      const int64_t tok = m0 + r;
      const bool ok = tok < tokens;
      const int64_t s = ok ? tok / p.len : 0, l = ok ? tok - s * p.len : 0;
      xo[r] = ok ? x_offset(p, s, l) : -1;
      oo[r] = ok ? out_offset(p, s, l) : -1;
    }
    // (The tables of tile ti - 2 used the same buffer: every warp finished that epilogue before it
    // passed this barrier of tile ti - 1.)
    __syncthreads();
    OutEpilogue<T, EXTRAS> epi(p, xo, oo);
    Add add[BNW / 8][2];
    load_addends<BNW>(epi, add, r0, n0, t);
    float acc[NACC][BNW / 2];
#pragma unroll
    for (int j = 0; j < NACC; ++j)
#pragma unroll
      for (int i = 0; i < BNW / 2; ++i) acc[j][i] = 0.f;
    for (int kc = 0; kc < KC; ++kc, ++it) {
      const int s = int(it % S);
      mbar_wait(full + 8 * s, uint32_t(it / S) & 1);
      wgmma_fence();
      const uint32_t a = st0 + s * C::STAGE + wg * 64 * 128, w = st0 + s * C::STAGE + C::A_STAGE;
#pragma unroll
      for (int kk = 0; kk < KW / 16; ++kk)
#pragma unroll
        for (int j = 0; j < NACC; ++j)
          Wgmma<T, BNW>::mma(acc[j], sw128_desc(a + kk * 32), sw128_desc(w + j * BNW * 128 + kk * 32), kc > 0 || kk > 0);
      wgmma_commit();
      wgmma_wait<1>();  // chunk it - 1's products are done: release it, refill its stage
      if (kc > 0) {
        if (lane == 0) mbar_arrive(empty + 8 * int((it - 1) % S));
        if (tid == 0) load(it - 1 + S);
        __syncwarp();
      }
    }
    wgmma_wait<0>();
#pragma unroll
    for (int j = 0; j < NACC; ++j) fence_regs(acc[j]);
    if (lane == 0) mbar_arrive(empty + 8 * int((it - 1) % S));  // the tile's last chunk
    if (tid == 0) load(it - 1 + S);
    __syncwarp();
#pragma unroll
    for (int j = 0; j < NACC; ++j) {
      if (j > 0) load_addends<BNW>(epi, add, r0, n0 + j * BNW, t);
      chunk_epilogue<T, BNW, true>(acc[j], add, r0, n0 + j * BNW, t, epi);
    }
  }
#else
  __trap();
#endif
}

}  // namespace axial_fused
