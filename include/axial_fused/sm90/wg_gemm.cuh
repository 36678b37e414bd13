// Hopper (sm_90a) block-level products Y = A @ W^T on wgmma, A resident in shared memory (SW128) and
// the weight W (an nn.Linear weight, N x K, row-major in global memory) streamed through a ring of
// shared stages:
//   wg_gemm             cp.async stages, a block barrier per step (the output projections);
//   wg_gemm_ws_*        warp-specialized: a producer warp (or warpgroup) and two consumer warpgroups
//                       with full / empty mbarriers per stage (K1's product); with TMA the producer
//                       loads by tensor-map copies multicast to a cluster of blocks;
//   wg_gemm_tma         thread 0 loads each chunk by one tensor-map copy, mbarriers per stage (the
//                       Hopper attention kernel's output projection at D <= 256).
#pragma once
#include "axial_fused/common/epilogue.cuh"
#include "axial_fused/sm90/sync.cuh"
#include "axial_fused/sm90/tile_size.h"
#include "axial_fused/sm90/wgmma.cuh"

namespace axial_fused {

// One thread's share of copying CN x KW chunks of an N x K weight into swizzled stages (SW64 for
// KW = 32, SW128 for 64) when THREADS threads split each chunk into passes of RPP rows: rows lr,
// lr + RPP, ... and 16-byte piece lc, so the source pointer and stage offset are computed once and a
// chunk costs PASSES cp.async (FITS: the split is exact and every pass has the same swizzle phase).
template <class T, int THREADS, int CN, int K, int KW>
struct ChunkCopy {
  static constexpr int RB = KW * 2, CPR = KW / 8, RPP = THREADS / CPR, PASSES = CN / RPP;
  static constexpr bool FITS = THREADS % CPR == 0 && CN % RPP == 0 && RPP % 8 == 0;
  const T* src;
  uint32_t dst;
  __device__ __forceinline__ ChunkCopy(const T* W, const void* ws, int tid) {
    const int lr = tid / CPR, lc = tid % CPR;
    src = W + int64_t(lr) * K + lc * 8;
    dst = smem_u32(ws) + lr * RB + ((lc ^ swz_row<RB>(lr)) << 4);
  }
  // The chunk at row n0, column k0 of W into the stage `stage` bytes past ws.
  __device__ __forceinline__ void operator()(int n0, int k0, uint32_t stage) const {
    const T* from = src + int64_t(n0) * K + k0;
#pragma unroll
    for (int j = 0; j < PASSES; ++j) cp_async16_shared(dst + stage + j * RPP * RB, from + int64_t(j) * RPP * K);
  }
};

// A column chunk's finished accumulators out through the epilogue: addends folded in and 16-byte
// stores (an epilogue with addend()), or pairs.
template <class T, int BNW, bool PREFETCH, class Epi, class Add>
__device__ __forceinline__ void chunk_epilogue(float (&acc)[BNW / 2], Add (&add)[PREFETCH ? BNW / 8 : 1][2], int r0,
                                               int n0, int t, Epi& epi) {
  if constexpr (PREFETCH) {  // the addends folded in, then 16-byte output stores
#pragma unroll
    for (int j = 0; j < BNW / 8; ++j) {
      epi.fold(acc[4 * j], acc[4 * j + 1], add[j][0]);
      epi.fold(acc[4 * j + 2], acc[4 * j + 3], add[j][1]);
    }
    store_vec8<T, BNW>(acc, r0, n0, t, epi);
  } else {
#pragma unroll
    for (int j = 0; j < BNW / 8; ++j) {
      epi(r0, n0 + j * 8 + 2 * t, acc[4 * j], acc[4 * j + 1]);
      epi(r0 + 8, n0 + j * 8 + 2 * t, acc[4 * j + 2], acc[4 * j + 3]);
    }
  }
}

// Y (BM x N) = A @ W^T with wgmma, for a block of WGM * WGN warpgroups (128 or 256 threads).
//   A: BM x K, SW128 K-major in shared memory (1024-byte aligned), BM = 64 * WGM.
//   W: N x K, row-major in global memory (an nn.Linear weight), streamed in chunks of CN = WGN * BNW
//      rows x KW columns through S >= 3 shared stages at `ws` (each CN x KW: SW128 for KW = 64, SW64
//      for KW = 32; 1024-aligned). KW = 32 halves a stage, so wider chunks (or deeper rings, or two
//      blocks per SM) fit beside a large A; the barriers per product stay the same per flop.
// Warpgroup wg computes rows [64 (wg % WGM), +64) and chunk columns [BNW (wg / WGM), +BNW).
// epi(row, col, y[row][col], y[row][col+1]) receives every pair; an epilogue with addend()
// (HasAddend: the output projections' bias + residual) gets its addends loaded before each column
// chunk's products, folded into the accumulators, and the outputs stored as 16-byte vectors
// (store_vec8: one STG.E.128 per 8 outputs instead of one 4-byte store per pair).
// Pipeline: one wgmma group stays in flight across each barrier (wait_group 1), so a stage is
// refilled two iterations after its use; S - 2 chunks are in flight while one is multiplied.
// A must be written and fenced (fence_proxy_async) before the call. Ends with all wgmma done; `ws`
// is free once the caller synchronises.
template <class T, int WGM, int WGN, int BNW, int N, int K, int S, int KW = 64, class Epi>
__device__ __forceinline__ void wg_gemm(const T* A, const T* W, T* ws, Epi&& epi) {
  static_assert(WGM * WGN <= 2 && (BNW == 32 || BNW == 64 || BNW == 128) && S >= 3, "1-2 warpgroups; n32/64/128 tiles");
  static_assert(KW == 32 || KW == 64, "32- or 64-column weight chunks");
  constexpr int BM = 64 * WGM, CN = WGN * BNW, KC = K / KW, ITERS = (N / CN) * KC, THREADS = 128 * WGM * WGN;
  constexpr int RB = KW * 2, CPR = KW / 8;  // bytes and 16-byte pieces per weight-chunk row
  static_assert(N % CN == 0 && K % 64 == 0, "weight chunks must tile the weight");
  const int wg = warp_uniform(threadIdx.x >> 7), wm = wg % WGM, wn = wg / WGM;
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const uint32_t a_base = smem_u32(A) + wm * 64 * 128, w_base = smem_u32(ws) + wn * BNW * RB;

  // Every thread copies the same rows and 16-byte piece of each chunk, so its source pointer and
  // stage offset are computed once and each chunk costs PASSES unrolled cp.async plus one 64-bit add
  // where the threads split a chunk evenly (Copy::FITS); else the general loop, whose index
  // arithmetic and branches cost more than the copies.
  using Copy = ChunkCopy<T, THREADS, CN, K, KW>;
  constexpr bool HOIST = Copy::FITS;
  const Copy copy(W, ws, threadIdx.x);

  auto load = [&](int it) {
    if (it < ITERS) {
      const int n0 = (it / KC) * CN, k0 = (it % KC) * KW;
      if constexpr (HOIST) {
        copy(n0, k0, (it % S) * (CN * RB));
      } else {
        char* dst = reinterpret_cast<char*>(ws) + (it % S) * CN * RB;
        for (int v = threadIdx.x; v < CN * CPR; v += THREADS) {
          const int r = v / CPR, c = v % CPR;
          cp_async16(dst + r * RB + ((c ^ swz_row<RB>(r)) << 4), W + int64_t(n0 + r) * K + k0 + c * 8, true);
        }
      }
    }
    cp_async_commit();  // possibly empty: keeps the group count per iteration uniform
  };

  float acc[BNW / 2];
#pragma unroll
  for (int i = 0; i < BNW / 2; ++i) acc[i] = 0.f;
#pragma unroll
  for (int s = 0; s < S - 2; ++s) load(s);
#ifdef AXIAL_FUSED_PHASE_CLOCK
  long long phase_[6] = {}, phase_last_ = clock64();
#endif
  AXIAL_PHASE(0);
  constexpr bool PREFETCH = HasAddend<std::decay_t<Epi>>::value;
  using Add = typename AddendOf<std::decay_t<Epi>, PREFETCH>::type;
  Add add[PREFETCH ? BNW / 8 : 1][2];
  for (int nc = 0; nc < N / CN; ++nc) {
    if constexpr (PREFETCH) {  // the chunk's addends, in flight while its products run (load_addends
      // written out: calling it changes attn_out_kernel's instruction schedule at 192x6 fp16)
      const int n0 = nc * CN + wn * BNW, r0 = wm * 64 + warp * 16 + g;
#pragma unroll
      for (int j = 0; j < BNW / 8; ++j) {
        add[j][0] = epi.addend(r0, n0 + j * 8 + 2 * t);
        add[j][1] = epi.addend(r0 + 8, n0 + j * 8 + 2 * t);
      }
      AXIAL_PHASE(1);
    }
    for (int kc = 0; kc < KC; ++kc) {
      const int it = nc * KC + kc;
      cp_async_wait<S - 3>();  // this thread's copies of chunk `it` have landed
      fence_proxy_async();     // ... and are visible to the tensor cores
      __syncthreads();         // everyone's have; wgmma(it - 2) is done in both warpgroups
      AXIAL_PHASE(2);
      load(it + S - 2);        // refill the stage chunk it - 2 used
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < KW / 16; ++kk) {
        const int ka = kc * KW + kk * 16;  // A column: 64-column block ka / 64, 32 bytes per k-step in it
        Wgmma<T, BNW>::mma(acc, sw128_desc(a_base + (ka >> 6) * BM * 128 + (ka & 63) * 2),
                           swz_desc<RB>(w_base + (it % S) * CN * RB + kk * 32), kc > 0 || kk > 0);
      }
      wgmma_commit();
      AXIAL_PHASE(3);
      wgmma_wait<1>();
      AXIAL_PHASE(4);
    }
    wgmma_wait<0>();
    fence_regs(acc);
    AXIAL_PHASE(4);
    chunk_epilogue<T, BNW, PREFETCH>(acc, add, wm * 64 + warp * 16 + g, nc * CN + wn * BNW, t, epi);
    AXIAL_PHASE(5);
  }
  cp_async_wait<0>();
#ifdef AXIAL_FUSED_PHASE_CLOCK
  if (blockIdx.x < 2 && (threadIdx.x & 127) == 0)
    printf("wg_gemm clocks N %d K %d BNW %d S %d block %d wg %d: loads %lld addends %lld wait+sync %lld "
           "issue %lld mma-wait %lld epilogue %lld\n", N, K, BNW, S, int(blockIdx.x), int(threadIdx.x >> 7), phase_[0],
           phase_[1], phase_[2], phase_[3], phase_[4], phase_[5]);
#endif
}

// Warp-specialized form of wg_gemm (K1's product): the same product with 16-byte vector epilogues,
// but the weight chunks (CN x KW, KW = 32, SW64) come from one producer warp, and each stage has two
// mbarriers: full[s] (32 arrivals: each producer lane's cp.async of the chunk have landed) and
// empty[s] (8 arrivals: every consumer warp's wgmma that read it are done). The consumer warpgroups
// then pay per step a barrier wait, a proxy fence and their wgmma, instead of a block barrier and
// the copy loop. `full` and `empty` are the shared addresses of S consecutive mbarriers each.
//
// Producer: the one extra warp; refills stage s once its previous chunk is released. Each lane copies
// rows lr, lr + 8, ... of the chunk (its 16-byte piece lc), so its addresses are computed once.
// The weight's rows (a multiple of CN): NFIX > 0, that many (compile-time: the plain K1); NFIX = 0,
// n at run time (K1's EXTRAS variant: 3D, or 4D with the gate).
template <class T, int CN, int K, int S, int KW, int NFIX>
__device__ __forceinline__ void wg_gemm_ws_produce(const T* W, T* ws, uint32_t full, uint32_t empty, int n) {
  static_assert(KW == 32, "the producer's address pattern assumes 64-byte chunk rows");
  using Copy = ChunkCopy<T, 32, CN, K, KW>;
  static_assert(Copy::FITS, "every pass of the warp has the same swizzle phase");
  constexpr int KC = K / KW;
  const int ITERS = ((NFIX > 0 ? NFIX : n) / CN) * KC;
  const Copy copy(W, ws, threadIdx.x & 31);
  for (int it = 0; it < ITERS; ++it) {
    const int s = it % S;
    if (it >= S) mbar_wait(empty + 8 * s, ((it / S) - 1) & 1);  // the chunk it - S is released
    copy((it / KC) * CN, (it % KC) * KW, s * (CN * Copy::RB));
    cp_async_mbar_arrive(full + 8 * s);
  }
  cp_async_wait<0>();
}

// K1's cluster form (QkvSm90::TMA, D >= 512): K1 in clusters of kQkvCluster = 2 blocks (two token
// tiles) that share every weight chunk. Each block's producer thread loads half of the chunk's CN
// rows with one tensor-map copy (TMA, the 64-byte swizzle done by the copy engine) multicast into
// both blocks' stage, so each block reads half the weight from L2. full[s] (1 arrival: the local
// producer's, expecting the whole chunk's bytes, half from each block's copy); empty[s] (16
// arrivals: every consumer warp of both blocks, since either block's copy writes into both). `map`
// is the weight's tensor map (box KW x CN / 2).
// Stages S0 .. S - 1 (register A, QkvSm90::RS) are not free at the start: their first fill waits
// for one release more (the consumers', once they no longer read that memory).
// (The weight's rows: NFIX or n, as wg_gemm_ws_produce.)
template <int CN, int K, int S, int KW, int NFIX, int S0 = S>
__device__ __forceinline__ void wg_gemm_tma_produce(const void* map, uint32_t ws, uint32_t full, uint32_t empty,
                                                    uint32_t rank, int n) {
  constexpr int KC = K / KW, PART = CN / kQkvCluster;
  const int ITERS = ((NFIX > 0 ? NFIX : n) / CN) * KC;
  constexpr uint32_t STAGE = CN * KW * 2;
  for (int it = 0; it < ITERS; ++it) {
    const int s = it % S;
    if (S0 < S && s >= S0) {
      mbar_wait(empty + 8 * s, (it / S) & 1);  // the memory is free (round 0) or chunk it - S released
    } else if (it >= S) {
      mbar_wait(empty + 8 * s, ((it / S) - 1) & 1);  // every block released chunk it - S
    }
    mbar_arrive_expect_tx(full + 8 * s, STAGE);
    tma_load_2d_multicast(ws + s * STAGE + rank * (PART * KW * 2), map, (it % KC) * KW, (it / KC) * CN + rank * PART,
                          full + 8 * s, (1 << kQkvCluster) - 1);
  }
}

// A consumer warp's release of a stage (lane 0): this block's `empty`, and with TMA the other blocks'.
template <bool TMA>
__device__ __forceinline__ void ws_release(uint32_t bar) {
  mbar_arrive(bar);
  if constexpr (TMA) {
#pragma unroll
    for (int r = 1; r < kQkvCluster; ++r) mbar_arrive_cluster(bar, cluster_rank() ^ r);
  }
}

// One weight step of the consumers (chunk `it`, the kc-th of its column chunk): wait until the stage's
// chunk has landed, make it visible to the tensor cores, issue its products into acc (kc = 0
// overwrites). Not committed.
// (Chunks written by the copy engine, TMA, are in the async proxy already: no proxy fence.)
template <class T, int BM, int BNW, int CN, int S, int KW, bool TMA = false>
__device__ __forceinline__ void ws_step(float (&acc)[BNW / 2], uint32_t a_base, uint32_t w_base, uint32_t full, int it,
                                        int kc) {
  constexpr int RB = KW * 2;
  const int s = it % S;
  mbar_wait(full + 8 * s, (it / S) & 1);
  if constexpr (!TMA) fence_proxy_async();
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < KW / 16; ++kk) {
    const int ka = kc * KW + kk * 16;
    Wgmma<T, BNW>::mma(acc, sw128_desc(a_base + (ka >> 6) * BM * 128 + (ka & 63) * 2),
                       swz_desc<RB>(w_base + s * CN * RB + kk * 32), kc > 0 || kk > 0);
  }
}

// Consumers: the WGM x WGN = 2 warpgroups (threads 0 .. 255) over A, as wg_gemm; A must be written and
// fenced, and visible to both, before the call.
// With TMA (K1's cluster form) each release also goes to the other block's `empty`.
// KR > 0 (register A, QkvSm90::RS): each thread first loads its rows' A fragments of
// k-steps 0 .. KR - 1 into registers (wgmma's register-A form takes them from there), then releases
// stages S0 .. S - 1, which lie over that part of A; the k loop is unrolled so the fragments stay
// in registers. The weight's rows NFIX or n as wg_gemm_ws_produce; with NFIX = 0, `bias` (null:
// none), the bias of columns bias_from .. n - 1 (PassParams::qkv_bias), is added to the products before
// the epilogue.
template <class T, int WGM, int WGN, int BNW, int K, int S, int KW, int NFIX, bool TMA = false, int KR = 0, int S0 = S,
          class Epi>
__device__ __forceinline__ void wg_gemm_ws_consume(const T* A, const T* ws, uint32_t full, uint32_t empty, Epi&& epi,
                                                   int n, const T* bias, int bias_from) {
  const int N = NFIX > 0 ? NFIX : n;
  // Two warpgroups: each `empty` mbarrier expects one arrival from each of their 8 warps.
  static_assert(WGM * WGN == 2 && (BNW == 64 || BNW == 128) && S >= 2 && KW == 32,
                "2 warpgroups; n64/128 tiles; 32-deep chunks");
  constexpr int BM = 64 * WGM, CN = WGN * BNW, KC = K / KW, RB = KW * 2;
  static_assert(K % 64 == 0, "weight chunks must tile the weight");
  const int wg = warp_uniform(threadIdx.x >> 7), wm = wg % WGM, wn = wg / WGM;
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const uint32_t a_base = smem_u32(A) + wm * 64 * 128, w_base = smem_u32(ws) + wn * BNW * RB;
  float acc[BNW / 2];
#pragma unroll
  for (int i = 0; i < BNW / 2; ++i) acc[i] = 0.f;
  static_assert(KR == 0 || (KR % (KW / 16) == 0 && KR * 16 < K && S0 < S), "register A: whole chunks, some in smem");
  uint32_t af[KR > 0 ? KR : 1][4];
  if constexpr (KR > 0) {
#pragma unroll
    for (int ks = 0; ks < KR; ++ks) a_frag_sw128<BM>(af[ks], A, wm * 64 + warp * 16, ks * 16);
    fence_proxy_async();  // these reads before the copy engine's writes into the same bytes
    __syncwarp();
    if (lane == 0)
      for (int s = S0; s < S; ++s) ws_release<TMA>(empty + 8 * s);
  }
#ifdef AXIAL_FUSED_PHASE_CLOCK
  long long phase_[3] = {}, phase_last_ = clock64();
#endif
  // One weight chunk: wait for it, issue its products (register A for k-steps below KR), commit, and
  // release the chunk before it once its products are done.
  auto step = [&](int nc, int kc) {
    const int it = nc * KC + kc;
    if (KR > 0 && kc * (KW / 16) < KR) {
      const int s = it % S;
      mbar_wait(full + 8 * s, (it / S) & 1);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < KW / 16; ++kk)
        WgmmaRS<T, BNW>::mma(acc, af[kc * (KW / 16) + kk], swz_desc<RB>(w_base + s * CN * RB + kk * 32),
                             kc > 0 || kk > 0);
    } else {
      ws_step<T, BM, BNW, CN, S, KW, TMA>(acc, a_base, w_base, full, it, kc);
    }
    wgmma_commit();
    AXIAL_PHASE(0);
    wgmma_wait<1>();  // the products of chunk it - 1 are done: release its stage
    if (kc > 0 && lane == 0) ws_release<TMA>(empty + 8 * ((it - 1) % S));
    AXIAL_PHASE(1);
  };
  for (int nc = 0; nc < N / CN; ++nc) {
    if constexpr (KR > 0) {
#pragma unroll
      for (int kc = 0; kc < KC; ++kc) step(nc, kc);
    } else {
      for (int kc = 0; kc < KC; ++kc) step(nc, kc);
    }
    wgmma_wait<0>();
    fence_regs(acc);
    AXIAL_PHASE(1);
    if (lane == 0) ws_release<TMA>(empty + 8 * (((nc + 1) * KC - 1) % S));  // the column chunk's last stage
    const int n0 = nc * CN + wn * BNW;
    // The bias covers columns bias_from on: the chunks before it (a gate's bias alone: q, k and v)
    // are stored without loads or adds.
    const bool add_bias = bias && n0 >= bias_from;
    if (NFIX == 0 && add_bias) {  // (into a copy: writing the accumulators themselves makes ptxas fence the wgmma)
      float ov[BNW / 2];
#pragma unroll
      for (int j = 0; j < BNW / 8; ++j) {
        const float2 b = load2(bias + (n0 - bias_from) + 8 * j + 2 * t);
        ov[4 * j] = acc[4 * j] + b.x;
        ov[4 * j + 1] = acc[4 * j + 1] + b.y;
        ov[4 * j + 2] = acc[4 * j + 2] + b.x;
        ov[4 * j + 3] = acc[4 * j + 3] + b.y;
      }
      store_vec8<T, BNW>(ov, wm * 64 + warp * 16 + g, n0, t, epi);
    } else {
      store_vec8<T, BNW>(acc, wm * 64 + warp * 16 + g, n0, t, epi);
    }
    AXIAL_PHASE(2);
  }
#ifdef AXIAL_FUSED_PHASE_CLOCK
  if (blockIdx.x < 2 && (threadIdx.x & 127) == 0)
    printf("k1 clocks N %d K %d BNW %d KW %d S %d block %d wg %d: stage-wait+issue %lld mma-wait %lld epilogue %lld\n",
           N, K, BNW, KW, S, int(blockIdx.x), int(threadIdx.x >> 7), phase_[0], phase_[1], phase_[2]);
#endif
}

// wg_gemm_tma's mbarriers, S of each kind at `full` and `empty` in memory nothing else uses any more:
// initialised by thread 0, then a block barrier (every thread of the block calls this).
template <int S>
__device__ __forceinline__ void out_tma_barriers(uint32_t full, uint32_t empty) {
  if (threadIdx.x == 0) {
    for (int k = 0; k < S; ++k) {
      mbar_init(full + 8 * k, 1);
      mbar_init(empty + 8 * k, 8);
    }
    fence_mbar_init_cluster();
  }
  __syncthreads();
}

// wg_gemm with the weight chunks loaded by tensor-map copies (AttnSm90::OUT_TMA): thread 0 of the
// block issues each chunk's copy
// (`map`: W with boxes of KW x CN, the KW * 2-byte swizzle, encode_weight_map) into stage it % S, which
// signals `full[s]` (the chunk's bytes), and refills a stage once every warp has released the chunk
// that used it on `empty[s]` (8 arrivals); S chunks are in flight from the start, S - 1 ahead of the
// one multiplied after. No cp.async, no block barrier per step: each costs a warp an mbarrier wait,
// its products and a release. The S mbarriers of each kind at `full` and `empty` must be initialised
// (out_tma_barriers), and A written and fenced, before every thread of the block enters;
// `ws` (1024-aligned) must no longer be read or written by anything else.
template <class T, int WGM, int WGN, int BNW, int N, int K, int S, int KW, class Epi>
__device__ __forceinline__ void wg_gemm_tma(const T* A, const void* map, uint32_t ws, uint32_t full, uint32_t empty,
                                            Epi&& epi) {
  static_assert(WGM * WGN == 2 && (BNW == 64 || BNW == 128) && S >= 2 && (KW == 32 || KW == 64),
                "2 warpgroups, 32- or 64-deep chunks");
  constexpr int BM = 64 * WGM, CN = WGN * BNW, KC = K / KW, ITERS = (N / CN) * KC, RB = KW * 2;
  constexpr uint32_t STAGE = CN * RB;
  static_assert(N % CN == 0 && K % 64 == 0 && CN <= 256, "weight chunks must tile the weight; boxes of <= 256 rows");
  const int wg = warp_uniform(threadIdx.x >> 7), wm = wg % WGM, wn = wg / WGM;
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const uint32_t a_base = smem_u32(A) + wm * 64 * 128, w_base = ws + wn * BNW * RB;
  auto load = [&](int it) {  // thread 0 only
    if (it < ITERS) {
      const int s = it % S;
      if (it >= S) mbar_wait(empty + 8 * s, ((it / S) - 1) & 1);  // every warp released chunk it - S
      mbar_arrive_expect_tx(full + 8 * s, STAGE);
      tma_load_2d(ws + s * STAGE, map, (it % KC) * KW, (it / KC) * CN, full + 8 * s);
    }
  };
  // (Each of thread 0's loads is followed by __syncwarp: warp 0 must be converged again before its
  // next wgmma, which the whole warp executes together.)
  if (threadIdx.x == 0)
    for (int it = 0; it < S; ++it) load(it);
  __syncwarp();
  float acc[BNW / 2];
#pragma unroll
  for (int i = 0; i < BNW / 2; ++i) acc[i] = 0.f;
  constexpr bool PREFETCH = HasAddend<std::decay_t<Epi>>::value;
  using Add = typename AddendOf<std::decay_t<Epi>, PREFETCH>::type;
  Add add[PREFETCH ? BNW / 8 : 1][2];
  for (int nc = 0; nc < N / CN; ++nc) {
    if constexpr (PREFETCH) load_addends<BNW>(epi, add, wm * 64 + warp * 16 + g, nc * CN + wn * BNW, t);
    for (int kc = 0; kc < KC; ++kc) {
      const int it = nc * KC + kc;
      ws_step<T, BM, BNW, CN, S, KW, true>(acc, a_base, w_base, full, it, kc);  // (copy-engine chunks: no proxy fence)
      wgmma_commit();
      wgmma_wait<1>();  // chunk it - 1's products are done: release it, refill its stage
      if (kc > 0) {
        if (lane == 0) mbar_arrive(empty + 8 * ((it - 1) % S));
        if (threadIdx.x == 0) load(it - 1 + S);
        __syncwarp();
      }
    }
    wgmma_wait<0>();
    fence_regs(acc);
    const int last = nc * KC + KC - 1;
    if (lane == 0) mbar_arrive(empty + 8 * (last % S));
    if (threadIdx.x == 0) load(last + S);
    __syncwarp();
    chunk_epilogue<T, BNW, PREFETCH>(acc, add, wm * 64 + warp * 16 + g, nc * CN + wn * BNW, t, epi);
  }
}


}  // namespace axial_fused
