// The axial pass kernels: LayerNorm -> QKV projection -> multi-head softmax attention -> output
// projection + bias -> residual add, over S sequences of L tokens addressed through strides.
//
//   fused_pass_kernel    one block owns `group` whole sequences; their q/k/v live in shared memory.
//   ln_qkv_kernel        two-kernel path, part 1: LN + QKV for a tile of tokens -> q/k/v scratch.
//   attn_out_kernel      two-kernel path, part 2: attention for a tile of queries of one sequence
//                        (keys streamed from the scratch) + output projection + bias + residual.
//
// Both paths are built from the same three block-level steps (layernorm_tile, block_gemm,
// attend_tile); docs/design.md walks through them.
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#ifdef AXIAL_FUSED_PHASE_CLOCK
#include <cstdio>
#endif
#include <type_traits>

#include "axial_fused/params.h"
#include "axial_fused/warp_mma.cuh"
#include "axial_fused/wgmma.cuh"

// At D >= AXIAL_FUSED_QKV_TMA_MIN_D, K1 runs in clusters of two blocks that share each weight chunk
// through a multicast tensor-map copy (wg_gemm_tma_produce): half the L2 weight reads. Measured
// (session 9): esm (D = 768) 337 -> 318 us per pass; msa (D = 256, where the weight is a smaller
// share of the traffic) 174 -> 177, hence the threshold. Needs the driver API's tensor-map types
// (cuda.h) and its encoder (found through the runtime). Kernel experiments: -DAXIAL_FUSED_QKV_TMA=0
// (no cluster kernel at all), -DAXIAL_FUSED_QKV_TMA_MIN_D=0 (clusters at every D).
#ifndef AXIAL_FUSED_QKV_TMA
#define AXIAL_FUSED_QKV_TMA 1
#endif
#ifndef AXIAL_FUSED_QKV_TMA_MIN_D
#define AXIAL_FUSED_QKV_TMA_MIN_D 512
#endif
#ifndef AXIAL_FUSED_K1_NO_MAP
#define AXIAL_FUSED_K1_NO_MAP 0
#endif
// Kernel experiment (session 10, default off; needs AXIAL_FUSED_QKV_TMA): -DAXIAL_FUSED_QKV_TMA_STORE=1
// stores K1's q/k/v through shared memory with tensor-map copies (store_tile_tma) instead of 16-byte
// stores from registers, so the warps go on to the next column chunk while the copy engine writes.
// -DAXIAL_FUSED_QKV_ST_SUB=16|32|64 forces the staging width (columns per round). Measured (session
// 10): correct, but the staging takes the weight ring's fourth stage: msa 149 -> 153, esm 287 -> 427
// us per pass (a 3-stage ring alone: 161 / 424).
#ifndef AXIAL_FUSED_QKV_TMA_STORE
#define AXIAL_FUSED_QKV_TMA_STORE 0
#endif
#if AXIAL_FUSED_QKV_TMA
#include <cuda.h>
#include <cudaTypedefs.h>
#endif

namespace axial_fused {

template <class T_, Mma M_, int D_, int HEADS_>
struct Traits {
  using T = T_;
  static constexpr Mma M = M_;
  static constexpr int D = D_, HEADS = HEADS_, HD = D / HEADS;
  static constexpr int ESZ = sizeof(T);
  static constexpr int PAD = 16 / ESZ;              // one 16-byte vector per smem row: no ldmatrix bank conflicts
  static constexpr int VEC = 16 / ESZ;              // elements per 16-byte copy
  static constexpr int BN = ESZ == 4 ? 32 : 64;     // keys per attention tile
  static constexpr int BK = 128 / ESZ;              // weight columns per streamed chunk (128 bytes)
  static constexpr int LDX = D + PAD, LDQKV = 3 * D + PAD, LDH = HD + PAD, LDW = BK + PAD, LDP = BN + PAD;

  // Warps: RG row groups of 16 tokens x CG column groups. In the projections the column groups take
  // different 64-wide output chunks; in attention they take different heads. Two column groups where
  // the two-kernel attention block still fits a Hopper SM's shared memory, else one. fp32 at large D
  // uses two row groups (32-token tiles) to fit.
  static constexpr int RG = (ESZ == 4 && D >= 512) ? 2 : 4;
  static constexpr size_t k2_bytes(int cg) {
    const size_t w = 2ull * 64 * cg * LDW * ESZ, kv = 4ull * cg * BN * LDH * ESZ;
    return 16ull * RG * LDX * ESZ + 2ull * cg * 16 * RG * LDH * ESZ + (kv > w ? kv : w) +
           (M == Mma::Tc16 ? 0 : 16ull * RG * cg * LDP * ESZ);
  }
  static constexpr int CG = (HEADS % 2 == 0 && k2_bytes(2) <= 220 * 1024) ? 2 : 1;
  static constexpr int NW = RG * CG;
  static constexpr int BM = 16 * RG, THREADS = 32 * NW;
  static constexpr int WN = 64 * CG;                 // weight rows (output features) per streamed chunk
  static constexpr int ROW_ALIGN = BM > BN ? BM : BN;  // fused buffer rows are a multiple of this

  static constexpr size_t X_BYTES = size_t(BM) * LDX * ESZ;         // LN tile, then attention output tile
  static constexpr size_t W_BYTES = 2ull * WN * LDW * ESZ;           // streamed weight chunks, 2 stages
  static constexpr size_t P_BYTES = M == Mma::Tc16 ? 0 : 16ull * NW * LDP * ESZ;  // probabilities (fp32 modes)
  static constexpr size_t OFF_BYTES = 2ull * BM * sizeof(int64_t);   // per-row x and out offsets of a tile
  static constexpr size_t Q_BYTES = 2ull * CG * BM * LDH * ESZ;      // two-kernel: CG heads of queries, 2 stages
  static constexpr size_t KV_BYTES = 4ull * CG * BN * LDH * ESZ;     // two-kernel: K and V tiles, 2 stages
  static constexpr size_t fused_bytes(int rows) {
    return OFF_BYTES + X_BYTES + W_BYTES + P_BYTES + size_t(rows) * LDQKV * ESZ;
  }
  static constexpr size_t K1_BYTES = X_BYTES + W_BYTES;
  static constexpr size_t K2_BYTES = OFF_BYTES + k2_bytes(CG);

  static_assert(D % 64 == 0, "dim must be a multiple of 64");
  static_assert(D % HEADS == 0 && HD % 16 == 0 && HD <= 128, "head_dim must be a multiple of 16, at most 128");
  static_assert(std::is_same<T, float>::value == (M != Mma::Tc16), "tensor-core 16-bit mode iff 16-bit storage");
};

// ---- addressing ---------------------------------------------------------------------------------

__device__ __forceinline__ int64_t token_offset(int64_t s, int64_t l, int64_t inner, int64_t so, int64_t si, int64_t st) {
  const int64_t outer = s / inner;
  return outer * so + (s - outer * inner) * si + l * st;
}
__device__ __forceinline__ int64_t x_offset(const PassParams& p, int64_t s, int64_t l) {
  return token_offset(s, l, p.seq_inner, p.x_stride_outer, p.x_stride_inner, p.x_stride_tok);
}
__device__ __forceinline__ int64_t out_offset(const PassParams& p, int64_t s, int64_t l) {
  return token_offset(s, l, p.seq_inner, p.o_stride_outer, p.o_stride_inner, p.o_stride_tok);
}

// 2^x on the special-function unit alone (one MUFU.EX2): ex2.approx with subnormal results flushed
// to zero. exp2f() compiles to the non-ftz form, which wraps the MUFU in a compare and two
// predicated multiplies to keep subnormals; a probability below 2^-126 is 0 at any of our
// precisions. exp2_ftz(-inf) = 0 and exp2_ftz(NaN) = NaN, as exp2f.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The sums over a warp of N values at once, step by step across them (N shuffle chains overlapped).
template <int N>
__device__ __forceinline__ void warp_sum_rows(float (&v)[N]) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] += __shfl_xor_sync(0xffffffffu, v[j], o);
}

// ---- step 1: LayerNorm of BM tokens into shared memory -----------------------------------------

// LayerNorm of RB rows held by a warp, row j as D/64 pairs per lane (lane's pair i is features
// 2 lane + 64 i, +1), with this lane's LayerNorm weight and bias pairs wr/br: store(j, d, y[d], y[d+1])
// receives each normalised pair. Two-pass statistics in fp32 from registers, the RB rows reduced
// together: each shuffle step of every row before the next step (ptxas does not interleave separate
// rows' shuffle chains by itself: session 16's SASS ran them one after another; reducing together
// took seed's LayerNorm phase 7.2k -> 4.6k cycles a block with the offsets change, session 17).
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
// latency a batch, not one a row: row by row, the SASS waited for each row's x before the next row's
// offset; session 16), then normalised together (layernorm_batch). A padding row is normalised too
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
// only (the short-block form).
template <class Tr, int ROWS = Tr::BM, class RowOff>
__device__ __forceinline__ void layernorm_tile(const PassParams& p, typename Tr::T* xs, RowOff row_off) {
  layernorm_rows<typename Tr::T, Tr::D, ROWS, Tr::NW>(
      p, row_off, [&](int r, int d, float a, float b) { store2(xs + r * Tr::LDX + d, a, b); });
}

// ---- step 2: a block-wide product with a streamed weight ---------------------------------------

// Y (BM x N) = A (BM x K, shared, row stride lda) @ W^T, W (N x K) row-major in global memory,
// streamed through `ws` in (WN x BK) chunks, two stages deep (cp.async). Warp w computes rows
// [16 rg, 16 rg + 16) and the 64 columns [64 cg, 64 cg + 64) of each chunk (rg = w % RG,
// cg = w / RG) when `active` (a chunk may stick out past N: those columns are skipped).
// SPLIT = 2 (the short-block form, fused_pass_kernel's tiles of at most BM / 2 rows): the first
// RG / 2 row groups only, each column group's 64 columns in two halves of 32, so that every warp
// takes a 16 x 32 part (rg = w % (RG / 2), half = w / (RG / 2) % 2) and no warp a padding row.
// epi(row, col, y[row][col], y[row][col+1]) receives every pair. Starts and ends with all threads
// synchronised on `ws`. PRE: the caller has already requested chunk 0 (request_chunk<Tr, N, K>(W, ws, 0),
// its cp.async group the newest), so that its latency overlaps the caller's work before the call.
//
// request_chunk: weight chunk `it` into its stage of `ws`, by all threads, as one cp.async group.
template <class Tr, int N, int K>
__device__ __forceinline__ void request_chunk(const typename Tr::T* W, typename Tr::T* ws, int it) {
  constexpr int WN = Tr::WN, BK = Tr::BK, KC = K / BK, ROW_VECS = BK / Tr::VEC;
  const int n0 = (it / KC) * WN, k0 = (it % KC) * BK;
  const int rows = N - n0 < WN ? N - n0 : WN;
  typename Tr::T* dst = ws + (it & 1) * WN * Tr::LDW;
  for (int v = threadIdx.x; v < rows * ROW_VECS; v += Tr::THREADS) {
    const int r = v / ROW_VECS, c = (v % ROW_VECS) * Tr::VEC;
    cp_async16(dst + r * Tr::LDW + c, W + int64_t(n0 + r) * K + k0 + c, true);
  }
  cp_async_commit();
}

// The output projection's epilogue (OutEpilogue: bias + residual) in block_gemm. out may alias x
// (the in-place column pass), so the compiler keeps each pair's loads after the previous pair's
// store, and pair by pair (-DAXIAL_FUSED_BLOCK_EPI_BATCH=0) a warp waits one load latency per pair
// (8 pairs a warp in the short-block form, 16 in the whole one). =2, the default since session 19:
// a warp's addends are all loaded before its last k chunk's products, then folded in and stored;
// =1: loaded all at once after those products. Measured (H200, kernels a forward; the out phase of
// a seed block 2.1k -> 1.35k cycles bf16, 4.4k -> 3.3k fp32): seed 12.7 / 12.1 / 11.9 us and seed
// fp32 21.3 / 20.4 / 20.8 us for 0 / 1 / 2; =1 spills 20-36 bytes in the fp32 D = 512 and 1024
// fused kernels (16 fp32 addend pairs a warp in the whole form), =2 none beyond =0's.
#ifndef AXIAL_FUSED_BLOCK_EPI_BATCH
#define AXIAL_FUSED_BLOCK_EPI_BATCH 2
#endif

template <class Tr, int N, int K, bool PRE = false, int SPLIT = 1, class Epi>
__device__ __forceinline__ void block_gemm(const typename Tr::T* As, int lda, const typename Tr::T* W,
                                           typename Tr::T* ws, bool active, Epi&& epi) {
  constexpr int WN = Tr::WN, BK = Tr::BK, LDW = Tr::LDW, NT = 8 / SPLIT, RGS = Tr::RG / SPLIT;
  constexpr int KC = K / BK, NC = (N + WN - 1) / WN, ITERS = NC * KC;
  static_assert(N % 64 == 0 && K % BK == 0, "weight chunks must tile the weight");
  static_assert((SPLIT == 1 || SPLIT == 2) && RGS >= 1, "SPLIT: 1, or 2 (the short-block form)");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int rg = warp % RGS, cg = warp / Tr::RG;
  // (the column offset of this warp's part within its column group: 0 in the whole form)
  const int half = SPLIT == 1 ? 0 : (warp / RGS) % SPLIT * (64 / SPLIT);
  auto load = [&](int it) { request_chunk<Tr, N, K>(W, ws, it); };

  float acc[NT][4];
  if constexpr (!PRE) load(0);
  for (int it = 0; it < ITERS; ++it) {
    if (it + 1 < ITERS) {
      load(it + 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int kc = it % KC, n0 = (it / KC) * WN + cg * 64 + half;
    if (kc == 0) {
#pragma unroll
      for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    }
    if (active && n0 < N) {
      // An epilogue with addend() (OutEpilogue: bias + residual) gets all of this warp's addends
      // loaded at once, then folded in and stored (put): out may alias x, so loads left in the
      // pairs' order would each wait for the store before them (AXIAL_FUSED_BLOCK_EPI_BATCH above).
      constexpr bool BATCH = AXIAL_FUSED_BLOCK_EPI_BATCH != 0 && HasAddend<std::decay_t<Epi>>::value;
      typename AddendOf<std::decay_t<Epi>, BATCH>::type add[BATCH ? NT : 1][2];
      const int r0 = rg * 16 + g;
      if constexpr (BATCH && AXIAL_FUSED_BLOCK_EPI_BATCH == 2) {
        if (kc == KC - 1) load_addends<8 * NT>(epi, add, r0, n0, t);
      }
      warp_mma_nt<Tr::M, BK, NT>(acc, As + rg * 16 * lda + kc * BK, lda, ws + (it & 1) * WN * LDW + (cg * 64 + half) * LDW, LDW);
      if (kc == KC - 1) {
        if constexpr (BATCH) {
          if constexpr (AXIAL_FUSED_BLOCK_EPI_BATCH == 1) load_addends<8 * NT>(epi, add, r0, n0, t);
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            epi.fold(acc[j][0], acc[j][1], add[j][0]);
            epi.fold(acc[j][2], acc[j][3], add[j][1]);
            epi.put(r0, n0 + j * 8 + 2 * t, acc[j][0], acc[j][1]);
            epi.put(r0 + 8, n0 + j * 8 + 2 * t, acc[j][2], acc[j][3]);
          }
        } else {
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            epi(r0, n0 + j * 8 + 2 * t, acc[j][0], acc[j][1]);
            epi(r0 + 8, n0 + j * 8 + 2 * t, acc[j][2], acc[j][3]);
          }
        }
      }
    }
    __syncthreads();
  }
}

// ---- step 3: online-softmax attention of one warp's 16 queries over a tile of keys -------------

template <class Tr>
struct AttnState {
  float o[Tr::HD / 8][4];
  float m[2];  // running max of the scaled logits (log2 units) of rows g and g+8
  float l[2];  // running sum of probabilities (this thread's columns only; reduced at the end)
  __device__ __forceinline__ void init() {
#pragma unroll
    for (int j = 0; j < Tr::HD / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.f;
  }
  // Normalise and write the 16 x HD head output (rounded to T) at Os (row stride ldo).
  __device__ __forceinline__ void store(typename Tr::T* Os, int ldo) {
    store_to([&](int r, int c, float a, float b) { store2(Os + r * ldo + c, a, b); });
  }
  // Normalise and hand each pair (row r < 16, column c < HD) to put(r, c, a, b).
  template <class Put>
  __device__ __forceinline__ void store_to(Put&& put) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float s = l[r];
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      inv[r] = 1.f / s;
    }
#pragma unroll
    for (int j = 0; j < Tr::HD / 8; ++j) {
      put(g, j * 8 + 2 * t, o[j][0] * inv[0], o[j][1] * inv[0]);
      put(g + 8, j * 8 + 2 * t, o[j][2] * inv[1], o[j][3] * inv[1]);
    }
  }
};

// Queries: 16 rows at Qs. Keys/values: KN (a tile, BN, unless the short-block form's keys are fewer)
// rows at Ks/Vs, key index of the first = key0; keys outside
// [lo[i], hi[i]) are masked for this thread's row i (g, g+8). Masked keys must hold finite values
// (their probability is 0, and 0 * NaN = NaN): fused_pass_kernel makes sure of it after phase 1.
// Ps: this warp's 16 x LDP scratch for the probabilities (fp32 modes).
template <class Tr, int KN = Tr::BN>
__device__ __forceinline__ void attend_tile(AttnState<Tr>& st, const typename Tr::T* Qs, int ldq,
                                            const typename Tr::T* Ks, const typename Tr::T* Vs, int ldkv,
                                            int key0, const int (&lo)[2], const int (&hi)[2], float scale_log2,
                                            typename Tr::T* Ps) {
  static_assert(KN % 16 == 0 && KN <= Tr::BN, "a key tile of 16 to BN keys");
  constexpr int NT = KN / 8;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float s[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
  warp_mma_nt<Tr::M, Tr::HD, NT>(s, Qs, ldq, Ks, ldkv);

  // Keys outside a row's [lo, hi) get -inf; a tile inside both rows' ranges (the common case) skips
  // the comparisons. The max is taken on raw scores (scale > 0) and the scale is folded into the
  // exponent: p = 2^(s * scale_log2 - m), one FFMA and one EX2 per score.
  const bool inside = key0 >= lo[0] && key0 >= lo[1] && key0 + KN <= hi[0] && key0 + KN <= hi[1];
  if (!inside) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = key0 + j * 8 + 2 * t + (e & 1), r = e >> 1;
        if (col < lo[r] || col >= hi[r]) s[j][e] = -INFINITY;
      }
    }
  }
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    mx[0] = fmaxf(mx[0], fmaxf(s[j][0], s[j][1]));
    mx[1] = fmaxf(mx[1], fmaxf(s[j][2], s[j][3]));
  }
  float mu[2], alpha[2], rs[2] = {0.f, 0.f};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    mx[r] = fmaxf(st.m[r], mx[r] * scale_log2);
    mu[r] = mx[r] == -INFINITY ? 0.f : mx[r];  // a row with nothing unmasked yet stays all-zero
    alpha[r] = exp2_ftz(st.m[r] - mu[r]);
    st.m[r] = mx[r];
  }
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[j][e] = exp2_ftz(fmaf(s[j][e], scale_log2, -mu[e >> 1]));
      rs[e >> 1] += s[j][e];
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) st.l[r] = st.l[r] * alpha[r] + rs[r];
#pragma unroll
  for (int j = 0; j < Tr::HD / 8; ++j) {
    st.o[j][0] *= alpha[0];
    st.o[j][1] *= alpha[0];
    st.o[j][2] *= alpha[1];
    st.o[j][3] *= alpha[1];
  }
  if constexpr (Tr::M == Mma::Tc16) {
    warp_mma_reg_nn<NT, Tr::HD / 8>(st.o, s, Vs, ldkv);
  } else {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      store2(Ps + g * Tr::LDP + j * 8 + 2 * t, s[j][0], s[j][1]);
      store2(Ps + (g + 8) * Tr::LDP + j * 8 + 2 * t, s[j][2], s[j][3]);
    }
    __syncwarp();
    warp_mma_nn<Tr::M, KN, Tr::HD / 8>(st.o, Ps, Tr::LDP, Vs, ldkv);
    __syncwarp();
  }
}

// Token offsets of the rows of a tile, computed once (the 64-bit divisions stay out of the epilogues):
// xo[r] / oo[r] = offsets of row r's token in x / out, or -1 for rows past the end.
template <class Tr, class RowTok>
__device__ __forceinline__ void row_offsets(const PassParams& p, int64_t* xo, int64_t* oo, RowTok row_tok) {
  for (int r = threadIdx.x; r < Tr::BM; r += Tr::THREADS) {
    int64_t s, l;
    const bool ok = row_tok(r, s, l);
    xo[r] = ok ? x_offset(p, s, l) : -1;
    oo[r] = ok ? out_offset(p, s, l) : -1;
  }
}

// Where a tile's rows live in x and out: a table of offsets (row_offsets; -1 past the end), or, for
// consecutive tokens of one sequence (the Hopper attention kernel), the first row's offsets and the
// token strides, with rows n and above past the end.
struct RowTable {
  const int64_t* xo;
  const int64_t* oo;
  __device__ __forceinline__ int64_t x(int r) const { return xo[r]; }
  __device__ __forceinline__ int64_t o(int r) const { return oo[r]; }
};
struct RowRun {
  int64_t x0, xs, o0, os;
  int n;
  __device__ __forceinline__ int64_t x(int r) const { return r < n ? x0 + r * xs : -1; }
  __device__ __forceinline__ int64_t o(int r) const { return o0 + r * os; }
};

// The output projection's epilogue: out[row] = y + bias + x[row] for the pair (r, c) of a tile whose
// rows are addressed by `rows` (x offset -1: past the end, skipped).
template <class T, class Rows = RowTable>
struct OutEpilogue {
  const T* x;
  const T* bias;
  T* out;
  Rows rows;
  __device__ __forceinline__ OutEpilogue(const PassParams& p, const int64_t* xo_, const int64_t* oo_)
      : x(static_cast<const T*>(p.x)), bias(static_cast<const T*>(p.b_out)), out(static_cast<T*>(p.out)),
        rows{xo_, oo_} {}
  __device__ __forceinline__ OutEpilogue(const PassParams& p, const Rows& rows_)
      : x(static_cast<const T*>(p.x)), bias(static_cast<const T*>(p.b_out)), out(static_cast<T*>(p.out)),
        rows(rows_) {}
  __device__ __forceinline__ void operator()(int r, int c, float a, float b) const {
    const int64_t xr = rows.x(r);
    if (xr < 0) return;
    const float2 res = load2(x + xr + c);
    const float2 bv = load2(bias + c);
    store2(out + rows.o(r) + c, a + bv.x + res.x, b + bv.y + res.y);
  }
  // The same in two steps, for wg_gemm to issue every load of a tile before its products finish:
  // out may alias x (the in-place column pass), so a compiler cannot hoist a load above an earlier
  // store itself, and each pair would wait out a global load's latency in turn.
  // addend() only issues the two loads and returns the raw pairs; fold() converts and adds them.
  // (Adding them in addend() made every thread wait for its loads where they were issued: 13k cycles
  // per block in msa's attention kernel; deferring the add took msa from 1316 to 1291 us per forward,
  // esm from 1558 to 1546, docs/performance.md.) Same arithmetic as operator(): a + (bias + residual).
  struct Addend {
    typename Pack2<T>::type res, bias;
  };
  __device__ __forceinline__ Addend addend(int r, int c) const {
    using P2 = typename Pack2<T>::type;
    const int64_t xr = rows.x(r);
    Addend a;
    a.bias = *reinterpret_cast<const P2*>(bias + c);
    a.res = xr >= 0 ? *reinterpret_cast<const P2*>(x + xr + c) : Pack2<T>::make(0.f, 0.f);
    return a;
  }
  // wg_gemm folds the addends into the accumulator pair (the same fp32 sum as operator()), then
  // stores 8 consecutive outputs, rounded, as one 16-byte vector (out rows are 16-byte aligned: the
  // op allocates out, and x is packed so).
  __device__ __forceinline__ void fold(float& a, float& b, const Addend& add) const {
    const float2 res = Pack2<T>::unpack(add.res), bv = Pack2<T>::unpack(add.bias);
    a = a + (res.x + bv.x);
    b = b + (res.y + bv.y);
  }
  __device__ __forceinline__ void operator()(int r, int c, uint4 v) const {
    if (rows.x(r) >= 0) st_global_16(out + rows.o(r) + c, v);
  }
  // A pair with its addend already folded in (block_gemm's batched form).
  __device__ __forceinline__ void put(int r, int c, float a, float b) const {
    if (rows.x(r) >= 0) store2(out + rows.o(r) + c, a, b);
  }
};

// Output projection of the BM x D attention output in `os` + bias + residual, rows addressed by the
// offsets from row_offsets (which must be visible to all threads: a barrier after writing them).
template <class Tr, bool PRE = false, int SPLIT = 1>
__device__ __forceinline__ void out_projection(const PassParams& p, const typename Tr::T* os, typename Tr::T* ws,
                                               bool active, const int64_t* xo, const int64_t* oo) {
  using T = typename Tr::T;
  block_gemm<Tr, Tr::D, Tr::D, PRE, SPLIT>(os, Tr::LDX, static_cast<const T*>(p.w_out), ws, active, OutEpilogue<T>(p, xo, oo));
}

// ---- the fused kernel ---------------------------------------------------------------------------

// The short-block form (session 18; the default since session 19, -DAXIAL_FUSED_SHORT_BLOCK=0 turns
// it off for A/B runs). A block of at most BM / 2 tokens (seed: one 32-token sequence a block, 128
// blocks on 132 SMs) would leave the row groups past BM / 2 without work in the attention and the
// output projection, and compute LayerNorm and q/k/v of padding rows with them: warps rg = 2, 3 of
// RG = 4, which are warps 2, 3, 6, 7, the same two of the SM's four schedulers (warp % 4), so half
// the SM's issue slots and tensor cores would wait while the other half ran every product of the
// block. The short-block form gives every warp a share of the real rows: the products in 16 x 32
// parts (block_gemm's SPLIT = 2), the attention one head a warp (NW / (RG / 2) head slots instead
// of CG) over one tile of BM / 2 keys (every key of the block; the 16-bit kernels' 64-key tiles
// were half masked padding at L = 32), the LayerNorm of BM / 2 rows. Measured on the H200
// (session 19, kernels a forward): seed fp32 32.1 -> 21.4 us, seed bf16 18.5 -> 12.6 us
// (predicted ~21 and ~13); docs/performance.md, "Session 19".
#ifndef AXIAL_FUSED_SHORT_BLOCK
#define AXIAL_FUSED_SHORT_BLOCK 1
#endif

template <class Tr>
__global__ void __launch_bounds__(Tr::THREADS) fused_pass_kernel(const __grid_constant__ PassParams p) {
  pdl_entry();
  using T = typename Tr::T;
  constexpr int D = Tr::D, HD = Tr::HD, BM = Tr::BM, BN = Tr::BN, LDQKV = Tr::LDQKV;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  int64_t* xo = reinterpret_cast<int64_t*>(smem_raw);             // BM row offsets into x
  int64_t* oo = xo + BM;                                          // BM row offsets into out
  unsigned char* base = smem_raw + Tr::OFF_BYTES;
  T* xs = reinterpret_cast<T*>(base);                             // BM x LDX
  T* ws = reinterpret_cast<T*>(base + Tr::X_BYTES);               // 2 x WN x LDW
  T* ps = reinterpret_cast<T*>(base + Tr::X_BYTES + Tr::W_BYTES);                 // NW x 16 x LDP
  T* qkv = reinterpret_cast<T*>(base + Tr::X_BYTES + Tr::W_BYTES + Tr::P_BYTES);  // rows_alloc x LDQKV

  const int L = p.len, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
  const int rg = warp % Tr::RG, cg = warp / Tr::RG;
  const int64_t s0 = int64_t(blockIdx.x) * p.group;
  const int rows = int(p.num_seq - s0 < p.group ? p.num_seq - s0 : p.group) * L;
  const int rows_alloc = (rows + Tr::ROW_ALIGN - 1) / Tr::ROW_ALIGN * Tr::ROW_ALIGN;

#ifdef AXIAL_FUSED_PHASE_CLOCK
  long long phase_[7] = {}, phase_last_ = clock64();
#endif
  // Where phase 2's query tile starting at q0 lives in x and out (row_offsets).
  auto offsets = [&](int q0) {
    row_offsets<Tr>(p, xo, oo, [&](int r, int64_t& s, int64_t& l) {
      const int rr = q0 + r;
      s = s0 + rr / L;
      l = rr % L;
      return rr < rows;
    });
  };
  // A block is a chain of latencies (session 16's phase clocks at seed, D = 64: 18.5k cycles, of which
  // the LayerNorm took 6k and each product started by waiting for its first weight chunk), so each
  // weight's first chunk is requested before the work that precedes its product, and the first
  // query tile's offsets are computed here, beside the first loads.
  const T* w_qkv = static_cast<const T*>(p.w_qkv);
  request_chunk<Tr, 3 * D, D>(w_qkv, ws, 0);
  offsets(0);
  // The first tile's LayerNorm takes its rows' offsets from offsets(0) (the same BM rows: xo[r] is row
  // r's x offset, -1 past the end) instead of dividing again, at the price of this barrier (session 17:
  // with the batched statistics, seed's LayerNorm phase 7.2k -> 4.6k cycles a block).
  __syncthreads();
  AXIAL_PHASE(6);  // ("setup": the first requests, the offsets' divisions and this barrier)
  // Phase 1: q/k/v of every token of the group (padding rows are zero, so masked keys are finite).
#if AXIAL_FUSED_SHORT_BLOCK
  const bool short_block = rows <= BM / 2;  // (block-uniform)
  if (short_block) {  // one tile of BM / 2 rows (nothing reads q/k/v rows past them: phase 2's keys)
    layernorm_tile<Tr, BM / 2>(p, xs, [&](int r) -> int64_t { return xo[r]; });
    __syncthreads();
    AXIAL_PHASE(0);
    block_gemm<Tr, 3 * D, D, true, 2>(xs, Tr::LDX, w_qkv, ws, true,
                                      [&](int r, int c, float a, float b) { store2(qkv + r * LDQKV + c, a, b); });
    AXIAL_PHASE(1);
  } else
#endif
  for (int r0 = 0; r0 < rows_alloc; r0 += BM) {
    if (r0 > 0) request_chunk<Tr, 3 * D, D>(w_qkv, ws, 0);  // (the last product ended synchronised)
    layernorm_tile<Tr>(p, xs, [&](int r) -> int64_t {
      const int rr = r0 + r;
      if (r0 == 0) return xo[r];
      return rr < rows ? x_offset(p, s0 + rr / L, rr % L) : -1;
    });
    __syncthreads();
    AXIAL_PHASE(0);
    block_gemm<Tr, 3 * D, D, true>(xs, Tr::LDX, w_qkv, ws, true,
                                   [&](int r, int c, float a, float b) { store2(qkv + (r0 + r) * LDQKV + c, a, b); });
    AXIAL_PHASE(1);
  }

  // NaN/Inf isolation between packed sequences. Masking sets a foreign key's probability to 0, but
  // P @ V still multiplies that 0 by the key's v, and 0 * NaN = NaN would leak a non-finite v (from
  // a NaN/Inf token of x) into every other sequence sharing the key tile. So a non-finite v pair is
  // replaced by zeros and the matching k pair by NaN: the token's own sequence (which does not mask
  // it) still gets NaN scores, hence NaN outputs, as PyTorch does; the other sequences turn the NaN
  // score into -inf and multiply 0 by a finite 0. Only packed blocks need it (group is uniform).
  if (p.group > 1) {
    const float nan = __int_as_float(0x7fffffff);
    for (int i = threadIdx.x; i < rows * (D / 2); i += Tr::THREADS) {
      T* k = qkv + (i / (D / 2)) * LDQKV + D + 2 * (i % (D / 2));
      const float2 v = load2(k + D);
      if (!(isfinite(v.x) && isfinite(v.y))) {
        store2(k, nan, nan);
        store2(k + D, 0.f, 0.f);
      }
    }
    __syncthreads();
  }

  // Phase 2: attention for BM queries at a time (column groups take alternate heads), then the
  // output projection. In the short-block form the first RG / 2 row groups take the rows and every
  // warp of them one of NW / (RG / 2) head slots.
#if AXIAL_FUSED_SHORT_BLOCK
  const int arg = short_block ? warp % (Tr::RG / 2) : rg, slot = short_block ? warp / (Tr::RG / 2) : cg;
  const int slots = short_block ? Tr::NW / (Tr::RG / 2) : Tr::CG;
#else
  const int arg = rg, slot = cg;
  constexpr int slots = Tr::CG;
#endif
  for (int q0 = 0; q0 < rows; q0 += BM) {
    if (q0 > 0) offsets(q0);  // (the last product ended synchronised: its epilogue is done with them)
    request_chunk<Tr, D, D>(static_cast<const T*>(p.w_out), ws, 0);  // in flight during the attention
    AXIAL_PHASE(5);  // ("pre-attention": the NaN isolation, later tiles' offsets and this request)
    const int rw = q0 + arg * 16;  // this warp's first query row
    const bool active = rw < rows;
    if (active) {
      const int ra = min(rw + g, rows - 1), rb = min(rw + g + 8, rows - 1);
      const int lo[2] = {ra / L * L, rb / L * L};
      const int hi[2] = {lo[0] + L, lo[1] + L};
      const int klo = rw / L * L / BN * BN, khi = min(rw + 15, rows - 1) / L * L + L;
      for (int h = slot; h < Tr::HEADS; h += slots) {
        AttnState<Tr> st;
        st.init();
#if AXIAL_FUSED_SHORT_BLOCK
        if (short_block) {  // all the block's keys in one tile of BM / 2 (<= BN) keys, from key 0
          static_assert(BM / 2 <= BN, "the short-block form's key tile");
          attend_tile<Tr, BM / 2>(st, qkv + rw * LDQKV + h * HD, LDQKV, qkv + D + h * HD, qkv + 2 * D + h * HD, LDQKV, 0,
                                  lo, hi, p.scale_log2, ps + warp * 16 * Tr::LDP);
        } else
#endif
        for (int kt = klo; kt < khi; kt += BN) {
          attend_tile<Tr>(st, qkv + rw * LDQKV + h * HD, LDQKV, qkv + kt * LDQKV + D + h * HD,
                          qkv + kt * LDQKV + 2 * D + h * HD, LDQKV, kt, lo, hi, p.scale_log2, ps + warp * 16 * Tr::LDP);
        }
        st.store(xs + arg * 16 * Tr::LDX + h * HD, Tr::LDX);
      }
    }
    AXIAL_PHASE(2);
    __syncthreads();
    AXIAL_PHASE(3);
#if AXIAL_FUSED_SHORT_BLOCK
    if (short_block)
      out_projection<Tr, true, 2>(p, xs, ws, active, xo, oo);
    else
#endif
      out_projection<Tr, true>(p, xs, ws, active, xo, oo);
    AXIAL_PHASE(4);
  }
#ifdef AXIAL_FUSED_PHASE_CLOCK
  if (blockIdx.x < 2 && (threadIdx.x & 31) == 0 && warp < 2)  // (warp 1: the second row group)
    printf("fused clocks block %d warp %d: setup %lld ln %lld qkv %lld pre-attention %lld attention %lld sync %lld "
           "out %lld\n",
           int(blockIdx.x), warp, phase_[6], phase_[0], phase_[1], phase_[5], phase_[2], phase_[3], phase_[4]);
#endif
}

// ---- the two-kernel path ------------------------------------------------------------------------

template <class Tr>
__global__ void __launch_bounds__(Tr::THREADS) ln_qkv_kernel(const __grid_constant__ PassParams p) {
  pdl_entry();
  using T = typename Tr::T;
  constexpr int D = Tr::D;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* xs = reinterpret_cast<T*>(smem_raw);
  T* ws = reinterpret_cast<T*>(smem_raw + Tr::X_BYTES);
  T* qkv = static_cast<T*>(p.scratch);
  const int64_t L = p.len, tokens = p.num_seq * L, t0 = int64_t(blockIdx.x) * Tr::BM;

  layernorm_tile<Tr>(p, xs, [&](int r) -> int64_t {
    const int64_t tk = t0 + r;
    return tk < tokens ? x_offset(p, tk / L, tk % L) : -1;
  });
  __syncthreads();
  block_gemm<Tr, 3 * D, D>(xs, Tr::LDX, static_cast<const T*>(p.w_qkv), ws, true, [&](int r, int c, float a, float b) {
    if (t0 + r < tokens) store2(qkv + (t0 + r) * (3 * D) + c, a, b);
  });
}

// Hopper LN + QKV (two-kernel path, part 1, 16-bit types on sm_90a): BM tokens per block, their
// normalised rows resident in shared memory (SW128), the QKV weight streamed through cp.async stages
// into wgmma (wgmma.cuh). Same output as ln_qkv_kernel.
template <class T, int D, bool ST = false>  // ST: the tile-store form (AXIAL_FUSED_QKV_TMA_STORE)
struct QkvSm90 {
  static constexpr int N = 3 * D;
  // Weight-chunk depth (K columns per stage): 32 halves a stage against 64, so 128-wide chunks fit
  // beside msa's A twice per SM and beside esm's 128-token A at all. Measured (session 7): msa K1
  // 255 -> 243 us per pass; esm unchanged (441). -DAXIAL_FUSED_QKV_KW=64 restores 64-deep chunks.
#ifdef AXIAL_FUSED_QKV_KW
  static constexpr int KW_BASE = AXIAL_FUSED_QKV_KW;
#else
  static constexpr int KW_BASE = 32;
#endif
  // Warp-specialized product (wg_gemm_ws_*): a producer warp streams the weight (32 threads more,
  // 128 bytes of mbarriers). Measured (session 8) against wg_gemm: msa 235 -> 217, esm 413 -> 352 us
  // per pass. -DAXIAL_FUSED_QKV_WS=0 (kernel experiment) restores wg_gemm; it needs 32-deep chunks.
#ifndef AXIAL_FUSED_QKV_WS
#define AXIAL_FUSED_QKV_WS 1
#endif
  static constexpr bool WS = AXIAL_FUSED_QKV_WS && KW_BASE == 32;
  static constexpr bool TMA = AXIAL_FUSED_QKV_TMA && WS && D >= AXIAL_FUSED_QKV_TMA_MIN_D;  // 2-block clusters (top of this file)
  // Kernel experiment (session 10, default off): -DAXIAL_FUSED_QKV_TMA_KW=16 gives the cluster form
  // 16-deep chunks (4 KB stages, 32-byte swizzle) and twice the stages in the same bytes, so a stage
  // is released after one k-step and refilled sooner: more of the ring is in flight. Measured
  // (session 10): esm K1 with a 3-stage ring instead of 4 is 287 -> 424 us per pass, so it waits on
  // the weight stream's latency.
#ifndef AXIAL_FUSED_QKV_TMA_KW
#define AXIAL_FUSED_QKV_TMA_KW 32
#endif
  static constexpr int KW = TMA ? AXIAL_FUSED_QKV_TMA_KW : KW_BASE;
  // Register A (session 11; RS below): where the cluster form's weight ring is held to a few stages by
  // A's size, its consumers keep the first AXIAL_FUSED_QKV_RS 64-column panels of their A rows in
  // registers (wgmma's register-A form) and the ring grows over those panels of A once they have
  // loaded them. Kernel experiments: -DAXIAL_FUSED_QKV_RS=0 (off) or another panel count.
  // Wide form (session 12's default, WIDE below): the producer is a whole warpgroup (384 threads;
  // one thread still issues the copies) so registers move between them with setmaxnreg: the
  // producer warpgroup down to 40 a thread, the consumers up to 232 (FlashAttention-3's split),
  // room for 6 panels of A in registers and a 16-stage ring. Measured at esm (session 12), us per
  // K1 pass: 288 threads with 4 panels 210.8, 384 threads with 4 panels 209.0, with 6 panels 197.2.
  // -DAXIAL_FUSED_QKV_WIDE=0 restores the 288-thread form (with 4 panels unless RS is given).
#ifndef AXIAL_FUSED_QKV_WIDE
#define AXIAL_FUSED_QKV_WIDE 1
#endif
#ifndef AXIAL_FUSED_QKV_RS
#define AXIAL_FUSED_QKV_RS (AXIAL_FUSED_QKV_WIDE ? 6 : 4)
#endif
  // (Decided before the budget below, which depends on it through the barriers: a 128-token A that
  // leaves room for fewer than five 8 KB stages but at least three.)
  static constexpr bool RS_MAY = AXIAL_FUSED_QKV_RS && TMA && !ST && size_t(256) * D + 5 * 8192 > 227 * 1024 &&
                                 size_t(256) * D + 3 * 8192 + 4096 <= 227 * 1024;
  static constexpr size_t BAR_BYTES = WS ? (RS_MAY ? 32 : 16) * 8 : 0;  // full[SB] and empty[SB], SB <= 8 (16 with RS)
  static constexpr bool WIDE = AXIAL_FUSED_QKV_WIDE && RS_MAY;
  static constexpr int THREADS = WIDE ? 384 : WS ? 288 : 256;
  static constexpr size_t SLACK = 128 * sizeof(int64_t) + BAR_BYTES + 1024;  // row offsets, barriers, alignment
  static constexpr size_t BUDGET = 227 * 1024 - SLACK;           // one block's opt-in limit
  static constexpr int WGM = size_t(128) * D * 2 + 3 * 8192 <= BUDGET ? 2 : 1;  // 128 or 64 tokens per block
  static constexpr int BM = 64 * WGM, WGN = 2 / WGM;
  static constexpr size_t A_BYTES = size_t(BM) * D * 2;
  static constexpr size_t stage_bytes(int bnw) { return size_t(WGN) * bnw * KW * 2; }
  // 128-wide weight chunks (m64n128: half the barriers and less shared-memory traffic per flop than
  // n64) wherever 3 stages of them fit; else two blocks per SM (228 KB, 1 KB reserved per block) with
  // 64-wide chunks where they fit (one block's LayerNorm and epilogue overlap the other's products);
  // else the widest chunks that fit. Measured at msa (D = 256), with 64-deep chunks: 128-wide, one
  // block per SM, 272 -> 249 us per pass against two blocks of 64-wide ones (session 6). With 32-deep
  // chunks 128-wide ones fit twice per SM there (MINB below): 243 us (session 7, docs/performance.md).
  // Kernel experiments: -DAXIAL_FUSED_QKV_BNW=64 (AXIAL_FUSED_NVCC_FLAGS) restores the 64-wide preference.
#ifdef AXIAL_FUSED_QKV_BNW
  static constexpr int WANT = AXIAL_FUSED_QKV_BNW;
#else
  static constexpr int WANT = 128;
#endif
  static constexpr int FORCED = N % (WGN * WANT) == 0 && A_BYTES + 3 * stage_bytes(WANT) <= BUDGET ? WANT : 0;
  static constexpr bool TWO = (FORCED == 0 || FORCED == 64) && 2 * (A_BYTES + 4 * stage_bytes(64) + SLACK + 1024) <= 228 * 1024;
  static constexpr int BNW = FORCED ? FORCED
                             : TWO  ? 64
                             : (N % (WGN * 128) == 0 && A_BYTES + 3 * stage_bytes(128) <= BUDGET) ? 128
                                                                                                 : 64;
  static constexpr size_t STAGE = stage_bytes(BNW);
#ifndef AXIAL_FUSED_QKV_STAGES  // kernel experiments: the deepest ring wanted (as many as fit, at least 3)
#define AXIAL_FUSED_QKV_STAGES 4
#endif
  // The tile-store form's staging (two 64 x SUB buffers per warpgroup, 512 * SUB bytes a block):
  // the widest SUB that leaves a 3-stage ring and keeps two blocks per SM where the ring alone would
  // (msa: 32), else the widest that fits beside a 3-stage ring (esm: 16).
  static constexpr bool two_fit(size_t bytes) { return 2 * (SLACK + bytes + 1024) <= 228 * 1024; }
  static constexpr int sub_pick() {
    const bool two = two_fit(A_BYTES + 3 * STAGE);
    for (int sub = 64; sub >= 16; sub /= 2)
      if (BNW % sub == 0 && (two ? two_fit(A_BYTES + 3 * STAGE + 512 * sub) : A_BYTES + 3 * STAGE + 512 * sub <= BUDGET))
        return sub;
    return 0;
  }
#ifdef AXIAL_FUSED_QKV_ST_SUB
  static constexpr int SUB = ST ? AXIAL_FUSED_QKV_ST_SUB : 0;
#else
  static constexpr int SUB = ST ? sub_pick() : 0;
#endif
  static constexpr size_t EPI_BYTES = size_t(512) * SUB;
  static constexpr int S_FIT = int((BUDGET - A_BYTES - EPI_BYTES) / STAGE);
  static constexpr int S_CAP = KW < 32 ? AXIAL_FUSED_QKV_STAGES * 32 / KW : AXIAL_FUSED_QKV_STAGES;  // the same bytes
  static constexpr int S_WANT = S_FIT < 3 ? 3 : S_FIT < S_CAP ? S_FIT : S_CAP;
  static constexpr int S = ST && !two_fit(A_BYTES + S_WANT * STAGE + EPI_BYTES) && two_fit(A_BYTES + 3 * STAGE + EPI_BYTES)
                               ? 3
                               : S_WANT;
  static constexpr size_t SMEM = SLACK + A_BYTES + S * STAGE + EPI_BYTES;
  // RS: esm's K1 waited on its weight stream's latency with a 32 KB ring (4 stages beside 192 KB of
  // A; measured in session 10: a 3-stage ring 137 us per pass slower; session 11: 16-deep chunks in
  // the same bytes 285 -> 316, clusters of 4 -> 421). With RS each consumer thread loads its rows'
  // first 64n columns of A as wgmma A fragments (KR = 4n k-steps, 16n registers) once LayerNorm is
  // done, and the ring (stages 0 .. S - 1 first, then SB - S more over A's first n panels, which the
  // layout puts right after the ring) has SB stages. Measured at esm (session 11), us per K1 pass:
  // n = 0 (4 stages) 285, n = 3 (10 stages) 234, n = 4 (12 stages, 96 KB in flight) 211. The
  // register budget bounds n: with 288 threads (168 a thread: ptxas allots whole warpgroups, 384
  // threads' worth) 5 spills and serialises the wgmmas; the wide form's 232 take n = 6 (16 stages,
  // 128 KB in flight; session 12: 197). Only where the ring is held by A's size (S_FIT <= S_CAP: esm's
  // D = 768; not D = 512, whose ring could grow without it).
  static constexpr int RS_PANELS = AXIAL_FUSED_QKV_RS;  // 64-column panels of A held in registers
  static constexpr size_t RS_BYTES = size_t(BM) * 128 * RS_PANELS;
  static constexpr bool RS = RS_MAY && WGM == 2 && S_FIT <= S_CAP && RS_PANELS * 64 < D && RS_BYTES % STAGE == 0 &&
                             S + RS_BYTES / STAGE <= 16;
  static constexpr int KR = RS ? 4 * RS_PANELS : 0;
  static constexpr int SB = RS ? S + int(RS_BYTES / STAGE) : S;
  // Blocks per SM the register budget is set for (228 KB of shared memory, 1 KB reserved per block).
  static constexpr int MINB = KW <= 32 && 2 * (SMEM + 1024) <= 228 * 1024 ? 2 : 1;
  static_assert(!WS || ((KW == 32 || (TMA && KW == 16)) && S <= 8 && (BNW == 64 || BNW == 128)),
                "the warp-specialized form's limits");
  static_assert(A_BYTES + S * STAGE + EPI_BYTES <= BUDGET && N % (WGN * BNW) == 0, "no Hopper QKV configuration fits");
  static_assert(!ST || (WS && SUB >= 16 && BNW % (SUB ? SUB : 1) == 0), "the tile-store form needs the warp-specialized product");
};

// The Hopper kernels' LayerNorm tile (256 threads, 8 warps; SW128 layout, the wgmma A operand):
// request_rows_sw128 starts copying row r of x (at offset xo[r]; xo[r] < 0: zeros) into its swizzled
// place as one cp.async group; once that group has landed and the block has synchronised,
// layernorm_sw128 normalises the rows in place and fences them for the tensor cores.
template <class T, int D, int BM>
__device__ __forceinline__ void request_rows_sw128(const PassParams& p, T* A, const int64_t* xo) {
  constexpr int CH = D / 8;  // 16-byte chunks per row
  const T* x = static_cast<const T*>(p.x);
  for (int v = threadIdx.x; v < BM * CH; v += 256) {
    const int r = v / CH, k = (v % CH) * 8;
    const int64_t off = xo[r];
    cp_async16(A + sw128_index<BM>(r, k), off >= 0 ? x + off + k : x, off >= 0);
  }
  cp_async_commit();
}

template <class T, int D, int BM>
__device__ __forceinline__ void layernorm_sw128(const PassParams& p, T* A) {
  constexpr int NV = D / 64;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float2 wr[NV], br[NV];  // this lane's LayerNorm weight and bias, loaded once
  load_ln_params<T, D>(p, wr, br);
  // R rows per step, all loaded before any is normalised and reduced together (layernorm_batch).
#ifdef AXIAL_FUSED_LN_ROWS  // kernel experiments: rows per step (1, 2 or 4)
  constexpr int R = AXIAL_FUSED_LN_ROWS;
#else
  constexpr int R = NV <= 4 ? 4 : 2;
#endif
  static_assert(BM % (8 * R) == 0, "rows per warp a multiple of R");
  for (int r0 = warp * R; r0 < BM; r0 += 8 * R) {
    float2 v[R][NV];
#pragma unroll
    for (int j = 0; j < R; ++j)
#pragma unroll
      for (int i = 0; i < NV; ++i) v[j][i] = load2(A + sw128_index<BM>(r0 + j, 2 * lane + 64 * i));
    layernorm_batch<D>(p, v, wr, br,
                       [&](int j, int d, float a, float b) { store2(A + sw128_index<BM>(r0 + j, d), a, b); });
  }
  fence_proxy_async();
}

// K1's tile-store epilogue (QkvSm90<T, D, true>): each warpgroup stages its 64 x BNW tiles in its
// own two buffers (after the weight ring, at `buf`) and stores them with the scratch's tensor map.
template <class T, int SUB>
struct QkvTileStore {
  const void* map;
  uint32_t buf;
  int row0;  // the block's first token (the host keeps every token's row below 2^31)
  template <int BNW>
  __device__ __forceinline__ void tile(const float (&acc)[BNW / 2], int r, int c, int nc) const {
    const int wg = threadIdx.x >> 7;
    store_tile_tma<T, BNW, SUB>(acc, buf + wg * 2 * (64 * SUB * 2), map, c, row0 + r, nc * (BNW / SUB), 2 + wg);
  }
};

// The body of K1 (ln_qkv_sm90_kernel); TMA: the cluster form (ln_qkv_sm90_tma_kernel),
// `wmap` the QKV weight's tensor map.
template <class T, int D, bool TMA, bool ST = false>
__device__ __forceinline__ void ln_qkv_sm90_body(const PassParams& p, const void* wmap, const void* omap = nullptr) {
  using C = QkvSm90<T, D, ST>;
  constexpr int BM = C::BM;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  int64_t* xo = reinterpret_cast<int64_t*>(smem_raw);  // BM row offsets into x
  unsigned char* base = smem_raw + BM * sizeof(int64_t) + C::BAR_BYTES;
  base += (1024 - (smem_u32(base) & 1023)) & 1023;
  // Register A (C::RS) only in the cluster form: the one-block kernel of the same specialization (the
  // fallback where no tensor map can be encoded) keeps the plain ring, its cp.async producer knowing
  // nothing of stages over A.
  constexpr bool RS = C::RS && TMA;
  constexpr int SB = RS ? C::SB : C::S, KR = RS ? C::KR : 0;
  // A then the ring; with RS the ring's first S stages, then A (whose first KR k-steps' panels become
  // stages S .. SB - 1 once the consumers hold them in registers).
  T* A = reinterpret_cast<T*>(base + (RS ? C::S * C::STAGE : 0));
  T* ws = reinterpret_cast<T*>(base + (RS ? 0 : C::A_BYTES));
  const int64_t L = p.len, tokens = p.num_seq * L, t0 = int64_t(blockIdx.x) * BM;
  // Each 16-byte vector goes out as one STG.E.128 (st_global_16): the compiler made four 32-bit
  // stores of a uint4 assignment. Measured (session 9): msa 215 -> 174, esm 351 -> 337 us per pass.
  // Addressed from the block's first row with 32-bit offsets and checked against its row count, so
  // no store recomputes a 64-bit product and compare.
  // (-DAXIAL_FUSED_DIAG_K1=8, wrong results: every block writes over one of 64 tiles, which stay in
  // L2, so the stores cost their instructions and L2 writes without the DRAM write-back.)
  T* const qkv = static_cast<T*>(p.scratch) + ((AXIAL_FUSED_DIAG_K1 & 8) ? int64_t(blockIdx.x & 63) * BM : t0) * C::N;
  const int rows = tokens - t0 < BM ? int(tokens - t0) : BM;
  auto store = [&](int r, int c, uint4 v) {
    if ((AXIAL_FUSED_DIAG_K1 & 2) == 0 && r < rows) st_global_16(qkv + (r * C::N + c), v);
  };

  // 1. Request the tile's raw rows (straight into their SW128 places; rows past the end read as 0).
  for (int r = threadIdx.x; r < BM; r += 256) xo[r] = t0 + r < tokens ? x_offset(p, (t0 + r) / L, (t0 + r) % L) : -1;
  if constexpr (C::WS) {
    // full[S] then empty[S], after the row offsets; the producer warp (threads 256..287) streams the
    // weight from the start, the two consumer warpgroups load and normalise the rows meanwhile.
    // With TMA, full[s] takes the local producer's one arrival (its expected bytes), empty[s] one
    // arrival per consumer warp of both blocks, and every thread of the cluster syncs after the inits
    // (before any remote arrival or multicast) and before leaving (while the other block may still
    // arrive on this one's barriers).
    const uint32_t full = smem_u32(smem_raw + BM * sizeof(int64_t)), empty = full + 8 * SB;
    if (threadIdx.x == 0) {
      for (int s = 0; s < SB; ++s) {
        mbar_init(full + 8 * s, TMA ? 1 : 32);
        mbar_init(empty + 8 * s, TMA ? 8 * kQkvCluster : 8);
      }
      if constexpr (TMA) fence_mbar_init_cluster();
    }
    if constexpr (TMA) {
      cluster_sync();
    } else {
      __syncthreads();
    }
    if (threadIdx.x >= 256) {
      if constexpr (C::WIDE) setmaxnreg_dec<40>();
      if constexpr (TMA) {
        if (threadIdx.x == 256)
          wg_gemm_tma_produce<C::WGN * C::BNW, C::N, D, SB, C::KW, C::S>(wmap, smem_u32(ws), full, empty,
                                                                            cluster_rank());
        cluster_sync();
      } else if (!C::WIDE || threadIdx.x < 288) {  // (one producer warp: `full` counts its 32 lanes)
        wg_gemm_ws_produce<T, C::WGN * C::BNW, C::N, D, C::S, C::KW>(static_cast<const T*>(p.w_qkv), ws, full, empty);
      }
      return;
    }
    if constexpr (C::WIDE) setmaxnreg_inc<232>();
    request_rows_sw128<T, D, BM>(p, A, xo);
    cp_async_wait<0>();
    named_sync(1, 256);
    layernorm_sw128<T, D, BM>(p, A);
    named_sync(1, 256);  // every row normalised and fenced before either warpgroup reads A
    if constexpr (ST) {
      const QkvTileStore<T, C::SUB> tiles{omap, smem_u32(ws) + uint32_t(C::S * C::STAGE), int(t0)};
      wg_gemm_ws_consume<T, C::WGM, C::WGN, C::BNW, C::N, D, C::S, C::KW, TMA>(A, ws, full, empty, tiles);
      if ((threadIdx.x & 127) == 0) bulk_wait<0>();  // every store written before the block's memory goes
    } else {
      wg_gemm_ws_consume<T, C::WGM, C::WGN, C::BNW, C::N, D, SB, C::KW, TMA, KR, C::S>(A, ws, full, empty,
                                                                                            store);
    }
    if constexpr (TMA) cluster_sync();
  } else {
    __syncthreads();
    request_rows_sw128<T, D, BM>(p, A, xo);
    // 2. QKV product; its prologue normalises the rows in place while the first weight chunks load.
    auto normalise = [&] {
      cp_async_wait<C::S - 2>();  // the row group (older than the S - 2 weight groups) has landed
      __syncthreads();
      layernorm_sw128<T, D, BM>(p, A);
    };
    wg_gemm<T, C::WGM, C::WGN, C::BNW, C::N, D, C::S, true, C::KW>(A, static_cast<const T*>(p.w_qkv), ws, store,
                                                                  normalise);
  }
}

template <class T, int D>
__global__ void __launch_bounds__(QkvSm90<T, D>::THREADS, QkvSm90<T, D>::MINB)
    ln_qkv_sm90_kernel(const __grid_constant__ PassParams p) {
#if AXIAL_FUSED_SM90
  pdl_entry();
  ln_qkv_sm90_body<T, D, false>(p, nullptr);
#else
  __trap();
#endif
}

#if AXIAL_FUSED_QKV_TMA
// K1 in clusters (QkvSm90::TMA): pairs of blocks (launched with a cluster attribute; grid rounded up
// to even; a block past the tokens still takes part in the copies and stores nothing).
template <class T, int D>
__global__ void __launch_bounds__(QkvSm90<T, D>::THREADS, QkvSm90<T, D>::MINB)
    ln_qkv_sm90_tma_kernel(const __grid_constant__ PassParams p, const __grid_constant__ CUtensorMap wmap) {
#if AXIAL_FUSED_SM90
  pdl_entry();
  ln_qkv_sm90_body<T, D, true>(p, &wmap);
#else
  __trap();
#endif
}

#if AXIAL_FUSED_QKV_TMA_STORE
// K1's tile-store form (QkvSm90<T, D, true>): `omap` the q/k/v scratch ([tokens, 3D]) with boxes of
// SUB x 64; TMA: also in clusters with the weight's map `wmap` (else unused).
template <class T, int D, bool TMA>
__global__ void __launch_bounds__(QkvSm90<T, D, true>::THREADS, QkvSm90<T, D, true>::MINB)
    ln_qkv_sm90_st_kernel(const __grid_constant__ PassParams p, const __grid_constant__ CUtensorMap wmap,
                          const __grid_constant__ CUtensorMap omap) {
#if AXIAL_FUSED_SM90
  pdl_entry();
  ln_qkv_sm90_body<T, D, TMA, true>(p, &wmap, &omap);
#else
  __trap();
#endif
}
#endif

// A 16-bit tensor of RANK dimensions (dims innermost first, strides in bytes of dimensions 1..) as a
// tensor map with boxes of `box` elements and the given swizzle; cudaErrorNotSupported where the
// driver has no encoder.
template <class T, int RANK>
inline cudaError_t encode_map(CUtensorMap* map, const void* w, const cuuint64_t (&dims)[RANK],
                              const cuuint64_t (&strides)[RANK - 1], const cuuint32_t (&box)[RANK],
                              CUtensorMapSwizzle swizzle) {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found;
#if CUDART_VERSION >= 12050
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
#else  // toolkits 12.0-12.4 (a source build against an older torch): the unversioned query
    const cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &found);
#endif
    if (e != cudaSuccess || found != cudaDriverEntryPointSuccess) fn = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  if (encode == nullptr) return cudaErrorNotSupported;
  cuuint32_t unit[RANK];
  for (int d = 0; d < RANK; ++d) unit[d] = 1;
  const CUresult r =
      encode(map, std::is_same<T, __half>::value ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, RANK,
             const_cast<void*>(w), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
             CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}
// A [rows, cols] row-major tensor with boxes of box_cols x box_rows.
template <class T>
inline cudaError_t encode_map_2d(CUtensorMap* map, const void* w, int64_t rows, int cols, int box_cols, int box_rows,
                                 CUtensorMapSwizzle swizzle) {
  return encode_map<T, 2>(map, w, {cuuint64_t(cols), cuuint64_t(rows)}, {cuuint64_t(cols) * sizeof(T)},
                          {cuuint32_t(box_cols), cuuint32_t(box_rows)}, swizzle);
}
// A weight with the swizzle of its box rows (32 columns: 64 bytes; 16: 32; 64: 128), the stage layout
// wgmma reads (swz_desc<64>, <32> or <128>).
template <class T>
inline cudaError_t encode_weight_map(CUtensorMap* map, const void* w, int rows, int cols, int box_cols, int box_rows) {
  return encode_map_2d<T>(map, w, rows, cols, box_cols, box_rows,
                          box_cols == 16   ? CU_TENSOR_MAP_SWIZZLE_32B
                          : box_cols == 32 ? CU_TENSOR_MAP_SWIZZLE_64B
                                           : CU_TENSOR_MAP_SWIZZLE_128B);
}
#endif

// Shared-memory layout of attn_out_kernel. Generic: [row offsets][xs: BM x LDX][q][p][k/v, later W].
// Hopper (SM90, 16-bit): the attention output tile is SW128 (1024-aligned) so the output projection
// runs on wgmma, with the weight streamed through the k/v region (wg_gemm, 3 stages).
template <class Tr, bool SM90>
struct AttnOutLayout {
  static constexpr int OWGN = Tr::THREADS >= 256 ? 2 : 1;  // warpgroups (1 or 2), side by side along N (Hopper)
  static constexpr int OBNW = (Tr::D % 128 == 0 ? 128 : 64) / OWGN;  // columns per warpgroup and weight chunk
  static constexpr size_t O_STAGE = size_t(OWGN) * OBNW * 128, O_STAGES = 3 * O_STAGE;
  // Weight stages of the output projection: 3, or as many (up to 6) as the k/v region already holds
  // (deeper look-ahead hides L2 latency; at D = 768 the region holds 4).
  static constexpr int OS = SM90 && Tr::KV_BYTES / O_STAGE > 3 ? (Tr::KV_BYTES / O_STAGE < 6 ? int(Tr::KV_BYTES / O_STAGE) : 6) : 3;
  static constexpr size_t X = SM90 ? size_t(Tr::BM) * Tr::D * Tr::ESZ : Tr::X_BYTES;
  static constexpr size_t Q = SM90 ? (Tr::Q_BYTES + 1023) / 1024 * 1024 : Tr::Q_BYTES;
  static constexpr size_t P = Tr::P_BYTES;
  static constexpr size_t KV = SM90 && O_STAGES > Tr::KV_BYTES ? O_STAGES : Tr::KV_BYTES;
  static constexpr size_t BYTES = Tr::OFF_BYTES + (SM90 ? 1024 : 0) + X + Q + P + KV;
  static_assert(!SM90 || (Tr::M == Mma::Tc16 && Tr::BM == 64 && Tr::THREADS % 128 == 0 && BYTES <= 227 * 1024),
                "Hopper attn_out layout");
};

template <class Tr, bool SM90>
__global__ void __launch_bounds__(Tr::THREADS) attn_out_kernel(const __grid_constant__ PassParams p) {
  pdl_entry();
#if !AXIAL_FUSED_SM90
  if constexpr (SM90) {
    __trap();
    return;
  }
#endif
  using T = typename Tr::T;
  using Lay = AttnOutLayout<Tr, SM90>;
  constexpr int D = Tr::D, HD = Tr::HD, BM = Tr::BM, BN = Tr::BN, LDH = Tr::LDH, VEC = Tr::VEC, CG = Tr::CG;
  constexpr int HG = (Tr::HEADS + CG - 1) / CG;  // head groups: CG heads at a time, one per column group
  extern __shared__ __align__(16) unsigned char smem_raw[];
  int64_t* xo = reinterpret_cast<int64_t*>(smem_raw);
  int64_t* oo = xo + BM;
  unsigned char* sbase = smem_raw + Tr::OFF_BYTES;
  if constexpr (SM90) sbase += (1024 - (smem_u32(sbase) & 1023)) & 1023;
  T* xs = reinterpret_cast<T*>(sbase);                                  // BM x D attention output
  T* qs = reinterpret_cast<T*>(sbase + Lay::X);                         // 2 stages x CG x BM x LDH
  T* ps = reinterpret_cast<T*>(sbase + Lay::X + Lay::Q);                // NW x 16 x LDP
  T* kv = reinterpret_cast<T*>(sbase + Lay::X + Lay::Q + Lay::P);       // 2 x CG x (K, V) x BN x LDH; later W

  const int L = p.len, warp = threadIdx.x >> 5, rg = warp % Tr::RG, cg = warp / Tr::RG;
  const int nqt = (L + BM - 1) / BM, nkt = (L + BN - 1) / BN;
  const int64_t s = blockIdx.x / nqt;
  const int q0 = int(blockIdx.x % nqt) * BM;
  const T* base = static_cast<const T*>(p.scratch) + s * L * (3 * D);

  row_offsets<Tr>(p, xo, oo, [&](int r, int64_t& ss, int64_t& l) {
    ss = s;
    l = q0 + r;
    return q0 + r < L;
  });

  auto load = [&](int it) {
    const int hg = it / nkt, kt = it % nkt, buf = it & 1;
    for (int c2 = 0; c2 < CG; ++c2) {
      const int h = hg * CG + c2;
      if (h >= Tr::HEADS) break;
      if (kt == 0) {
        T* qd = qs + ((hg & 1) * CG + c2) * BM * LDH;
        for (int v = threadIdx.x; v < BM * HD / VEC; v += Tr::THREADS) {
          const int r = v / (HD / VEC), c = (v % (HD / VEC)) * VEC, row = q0 + r;
          const bool ok = row < L;
          cp_async16(qd + r * LDH + c, ok ? base + int64_t(row) * 3 * D + h * HD + c : base, ok);
        }
      }
      T* ks = kv + (buf * CG + c2) * 2 * BN * LDH;
      for (int v = threadIdx.x; v < BN * HD / VEC; v += Tr::THREADS) {
        const int r = v / (HD / VEC), c = (v % (HD / VEC)) * VEC, row = kt * BN + r;
        const bool ok = row < L;
        const T* src = ok ? base + int64_t(row) * 3 * D + D + h * HD + c : base;
        cp_async16(ks + r * LDH + c, src, ok);
        cp_async16(ks + BN * LDH + r * LDH + c, ok ? src + D : base, ok);
      }
    }
    cp_async_commit();
  };

  const int rw = q0 + rg * 16;
  const bool active = rw < L;
  const int lo[2] = {0, 0}, hi[2] = {L, L};
  const int iters = HG * nkt;
  AttnState<Tr> st;
  load(0);
  for (int it = 0; it < iters; ++it) {
    if (it + 1 < iters) {
      load(it + 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int hg = it / nkt, kt = it % nkt, h = hg * CG + cg;
    if (active && h < Tr::HEADS) {
      if (kt == 0) st.init();
      const T* ks = kv + ((it & 1) * CG + cg) * 2 * BN * LDH;
      attend_tile<Tr>(st, qs + ((hg & 1) * CG + cg) * BM * LDH + rg * 16 * LDH, LDH, ks, ks + BN * LDH, LDH, kt * BN,
                      lo, hi, p.scale_log2, ps + warp * 16 * Tr::LDP);
      if (kt == nkt - 1) {
        if constexpr (SM90) {
          st.store_to([&](int r, int c, float a, float b) { store2(xs + sw128_index<BM>(rg * 16 + r, h * HD + c), a, b); });
        } else {
          st.store(xs + rg * 16 * Tr::LDX + h * HD, Tr::LDX);
        }
      }
    }
    __syncthreads();
  }
  if constexpr (SM90) {
    wg_gemm<T, 1, Lay::OWGN, Lay::OBNW, D, D, Lay::OS>(xs, static_cast<const T*>(p.w_out), kv, OutEpilogue<T>(p, xo, oo), [] {});
  } else {
    out_projection<Tr>(p, xs, kv, active, xo, oo);
  }
}

}  // namespace axial_fused

// The Hopper head-looped fused kernel and the Hopper attention kernel (they use layernorm_batch,
// OutEpilogue, exp2_ftz from above).
#include "axial_fused/fused_sm90.cuh"
#include "axial_fused/attn_sm90.cuh"
#include "axial_fused/out_gemm_sm90.cuh"

namespace axial_fused {

// ---- host side: one specialization --------------------------------------------------------------

// K1's cluster form: one block per BM tokens, rounded up to whole clusters (a block past the tokens
// takes part in the weight copies and stores nothing).
template <int BM>
inline int64_t cluster_grid(int64_t tokens) {
  return ((tokens + BM - 1) / BM + kQkvCluster - 1) / kQkvCluster * kQkvCluster;
}

// A value of the current device, asked once per device index (below 64) through ask(device, &value)
// and kept in `cache`: the launch paths read them on every call. (Only values that are never 0.)
template <class Ask>
inline cudaError_t per_device(std::atomic<int> (&cache)[64], int* value, Ask ask) {
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  const bool cached = device >= 0 && device < 64;
  *value = cached ? cache[device].load(std::memory_order_relaxed) : 0;
  if (*value != 0) return cudaSuccess;
  e = ask(device, value);
  if (e != cudaSuccess) return e;
  if (cached && *value != 0) cache[device].store(*value, std::memory_order_relaxed);
  return cudaSuccess;
}

// A device attribute of the current device.
template <cudaDeviceAttr ATTR>
inline cudaError_t current_device_attribute(int* value) {
  static std::atomic<int> cache[64];  // 0: not asked yet
  return per_device(cache, value, [](int device, int* v) { return cudaDeviceGetAttribute(v, ATTR, device); });
}

// Launches Kernel with `smem` bytes of dynamic shared memory. Above 48 KB a kernel must opt in
// (cudaFuncSetAttribute, a driver call): done once per kernel and device, to the device's limit
// (the attribute only permits; occupancy follows each launch's own request), so the hot path makes
// one launch call and no attribute call. CLUSTER > 1: thread-block clusters of that many blocks (a
// launch attribute, not __cluster_dims__, which the sm_80 compilation of the same kernel rejects).
// AFTER_K1: the Hopper attention kernels that follow K1 in a pass (-DAXIAL_FUSED_PDL=2, below).
template <auto Kernel, int CLUSTER = 1, bool AFTER_K1 = false, class... Args>
inline cudaError_t launch_with_smem(int64_t blocks, int threads, size_t smem, cudaStream_t stream, const Args&... args) {
  if (blocks <= 0) return cudaSuccess;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  if (smem > 48 * 1024) {
    static std::atomic<bool> opted_in[64];  // per device index
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e != cudaSuccess) return e;
    const bool cached = device >= 0 && device < 64;
    if (!cached || !opted_in[device].load(std::memory_order_acquire)) {
      int limit = 0;
      e = cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
      if (e != cudaSuccess) return e;
      if (smem > size_t(limit)) return cudaErrorInvalidValue;
      e = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, limit);
      if (e != cudaSuccess) return e;
      if (cached) opted_in[device].store(true, std::memory_order_release);
    }
  }
  // AXIAL_FUSED_PDL (wgmma.cuh, pdl_entry) = 2, the default: only the attention kernel after K1
  // (session 19: vision -1.8 us fused_graph, -3.7 us its eager call, the rest within spread), without
  // the losses at msa, esm and in seed's eager call that =1, every launch on compute capability 9.0
  // and above, measured in session 17.
  bool pdl = false;
  if constexpr (AXIAL_FUSED_PDL == 1 || (AXIAL_FUSED_PDL == 2 && AFTER_K1)) {
    int major = 0;
    const cudaError_t e = current_device_attribute<cudaDevAttrComputeCapabilityMajor>(&major);
    if (e != cudaSuccess) return e;
    pdl = major >= 9;
  }
  if (CLUSTER == 1 && !pdl) {
    Kernel<<<unsigned(blocks), threads, smem, stream>>>(args...);
    return cudaGetLastError();
  }
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (CLUSTER > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = CLUSTER;
    attr[n].val.clusterDim.y = 1;
    attr[n].val.clusterDim.z = 1;
    ++n;
  }
  if (pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(blocks));
  cfg.blockDim = dim3(unsigned(threads));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, Kernel, args...);
}

#if AXIAL_FUSED_QKV_TMA && AXIAL_FUSED_QKV_TMA_STORE
// K1's tile-store form, where its maps encode (the scratch's rows as tensor-map coordinates below
// 2^31); cudaErrorNotSupported: not launched, the caller runs the register-store K1.
template <class T, int D>
inline cudaError_t launch_k1_tile_store(const PassParams& p, int64_t tokens, cudaStream_t stream) {
  using C = QkvSm90<T, D, true>;
  if (tokens + C::BM >= (int64_t(1) << 31)) return cudaErrorNotSupported;
  constexpr CUtensorMapSwizzle SW = C::SUB == 64   ? CU_TENSOR_MAP_SWIZZLE_128B
                                    : C::SUB == 32 ? CU_TENSOR_MAP_SWIZZLE_64B
                                                   : CU_TENSOR_MAP_SWIZZLE_32B;
  CUtensorMap wmap = {}, omap;
  if (encode_map_2d<T>(&omap, p.scratch, tokens, C::N, C::SUB, 64, SW) != cudaSuccess) return cudaErrorNotSupported;
  if constexpr (C::TMA) {
    if (encode_weight_map<T>(&wmap, p.w_qkv, C::N, D, C::KW, C::WGN * C::BNW / kQkvCluster) != cudaSuccess)
      return cudaErrorNotSupported;
    return launch_with_smem<ln_qkv_sm90_st_kernel<T, D, true>, kQkvCluster>(cluster_grid<C::BM>(tokens), C::THREADS,
                                                                           C::SMEM, stream, p, wmap, omap);
  } else {
    return launch_with_smem<ln_qkv_sm90_st_kernel<T, D, false>>((tokens + C::BM - 1) / C::BM, C::THREADS, C::SMEM, stream,
                                                                p, wmap, omap);
  }
}
#endif

#if AXIAL_FUSED_ATTN_SPLIT && AXIAL_FUSED_QKV_TMA
// The split pass's second and third kernels (AttnSm90's SPLIT: the attention alone, then the output
// projection as a GEMM, out_gemm_sm90.cuh); cudaErrorNotSupported where they do not apply, so the
// caller launches the fused attention kernel instead.
template <class T, int D, int HEADS>
inline cudaError_t launch_split(const PassParams& p, int64_t tokens, cudaStream_t stream) {
  using A = AttnSm90<T, D, HEADS, 128>;
  using A64 = AttnSm90<T, D, HEADS, 64>;
  using G = OutGemmSm90<T, D>;
  if constexpr (A::SERVED && A64::SERVED && G::SERVED && D >= AXIAL_FUSED_ATTN_SPLIT_MIN_D) {
    if (p.arch != 90 || !p.attn_sm90 || tokens > 0x7fffffffLL - G::BM) return cudaErrorNotSupported;
    CUtensorMap amap, wmap;
    // O in the scratch's q columns: [tokens, D] with rows 3D apart; W_out [D, D].
    if (encode_map<T, 2>(&amap, p.scratch, {cuuint64_t(D), cuuint64_t(tokens)}, {cuuint64_t(3 * D) * sizeof(T)},
                         {cuuint32_t(G::KW), cuuint32_t(G::BM)}, CU_TENSOR_MAP_SWIZZLE_128B) != cudaSuccess ||
        encode_weight_map<T>(&wmap, p.w_out, D, D, G::KW, G::BN) != cudaSuccess)
      return cudaErrorNotSupported;
    // The GEMM's grid first: nothing may be launched before the last cudaErrorNotSupported (the
    // caller then runs the fused kernel, which reads q from the scratch the split kernel overwrites).
    int sms = 0;
    const cudaError_t e0 = current_device_attribute<cudaDevAttrMultiProcessorCount>(&sms);
    if (e0 != cudaSuccess) return e0;
    const int64_t tiles = (tokens + G::BM - 1) / G::BM * G::NT, gemm_blocks = tiles < sms ? tiles : sms;
    // 64 queries a block where the sequence is no longer (a 128-query block would be half padding).
    const cudaError_t e =
        p.len <= 64 ? launch_with_smem<attn_sm90_split_kernel<T, D, HEADS, 64>, 1, true>(p.num_seq, 256, A64::SMEM, stream, p)
                    : launch_with_smem<attn_sm90_split_kernel<T, D, HEADS, 128>, 1, true>(
                          p.num_seq * ((p.len + A::BM - 1) / A::BM), 256, A::SMEM, stream, p);
    if (e != cudaSuccess) return e == cudaErrorNotSupported ? cudaErrorUnknown : e;  // (no fallback from here)
    const cudaError_t g = launch_with_smem<out_gemm_sm90_kernel<T, D>>(gemm_blocks, 256, G::SMEM, stream, p, amap, wmap);
    return g == cudaErrorNotSupported ? cudaErrorUnknown : g;
  } else {
    return cudaErrorNotSupported;
  }
}
#endif

template <class T, int D, int HEADS>
struct Spec {
  template <Mma M>
  static cudaError_t run(const PassParams& p, cudaStream_t stream) {
    using Tr = Traits<T, M, D, HEADS>;
    if (p.path == kPathFusedSm90) {
      if constexpr (M == Mma::Tc16 && FusedSm90<T, D, HEADS>::SERVED) {
        if (p.arch == 90) {
          using F = FusedSm90<T, D, HEADS>;
#if AXIAL_FUSED_OUT_TMA && AXIAL_FUSED_QKV_TMA
          if constexpr (F::OUT_TMA) {  // (a driver without the encoder: the cp.async kernel below)
            CUtensorMap omap;
            if (encode_weight_map<T>(&omap, p.w_out, D, D, 64, F::OUT_BNW) == cudaSuccess)
              return launch_with_smem<fused_sm90_otma_kernel<T, D, HEADS>>((p.num_seq + p.group - 1) / p.group, 256,
                                                                           F::SMEM, stream, p, omap);
          }
#endif
          return launch_with_smem<fused_sm90_kernel<T, D, HEADS>>((p.num_seq + p.group - 1) / p.group, 256, F::SMEM,
                                                                   stream, p);
        }
      }
      return cudaErrorInvalidValue;  // plan_pass never chooses it here
    }
    if (p.path == kPathFused) {
      const int rows = (p.group * p.len + Tr::ROW_ALIGN - 1) / Tr::ROW_ALIGN * Tr::ROW_ALIGN;
      return launch_with_smem<fused_pass_kernel<Tr>>((p.num_seq + p.group - 1) / p.group, Tr::THREADS,
                                                   Tr::fused_bytes(rows), stream, p);
    }
    const int64_t tokens = p.num_seq * p.len;
    cudaError_t e;
    if constexpr (M == Mma::Tc16) {
      if (p.arch == 90) {
        using C = QkvSm90<T, D>;
#if AXIAL_FUSED_QKV_TMA && AXIAL_FUSED_QKV_TMA_STORE
        e = launch_k1_tile_store<T, D>(p, tokens, stream);
        if (e != cudaErrorNotSupported) {
          if (e != cudaSuccess) return e;
        } else
#endif
#if AXIAL_FUSED_QKV_TMA
        if constexpr (C::TMA) {
          // A driver without the encoder, or a map it refuses: the one-block kernel, same result.
          // (-DAXIAL_FUSED_K1_NO_MAP=1, a test build: act as if there were no encoder, so the GPU
          // tests run that fallback.)
          CUtensorMap wmap;
          e = AXIAL_FUSED_K1_NO_MAP ? cudaErrorNotSupported
                                    : encode_weight_map<T>(&wmap, p.w_qkv, C::N, D, C::KW, C::WGN * C::BNW / kQkvCluster);
          if (e == cudaSuccess)
            e = launch_with_smem<ln_qkv_sm90_tma_kernel<T, D>, kQkvCluster>(cluster_grid<C::BM>(tokens), C::THREADS,
                                                                         C::SMEM, stream, p, wmap);
          else if constexpr (C::KW == 32)  // (16-deep chunks, an experiment, come only from tensor-map copies)
            e = launch_with_smem<ln_qkv_sm90_kernel<T, D>>((tokens + C::BM - 1) / C::BM, C::THREADS, C::SMEM, stream, p);
        } else
#endif
        e = launch_with_smem<ln_qkv_sm90_kernel<T, D>>((tokens + C::BM - 1) / C::BM, C::THREADS, C::SMEM, stream, p);
      } else {
        e = launch_with_smem<ln_qkv_kernel<Tr>>((tokens + Tr::BM - 1) / Tr::BM, Tr::THREADS, Tr::K1_BYTES, stream, p);
      }
    } else {
      e = launch_with_smem<ln_qkv_kernel<Tr>>((tokens + Tr::BM - 1) / Tr::BM, Tr::THREADS, Tr::K1_BYTES, stream, p);
    }
    if (e != cudaSuccess) return e;
#if AXIAL_FUSED_ATTN_SPLIT && AXIAL_FUSED_QKV_TMA
    if constexpr (M == Mma::Tc16) {
      e = launch_split<T, D, HEADS>(p, tokens, stream);
      if (e != cudaErrorNotSupported) return e;  // (not served here, or no encoder: the fused attention)
    }
#endif
    if constexpr (M == Mma::Tc16) {
      using A = AttnSm90<T, D, HEADS>;
      if constexpr (A::SERVED) {
        if (p.arch == 90 && p.attn_sm90) {
#if AXIAL_FUSED_OUT_TMA && AXIAL_FUSED_QKV_TMA
          if constexpr (A::OUT_TMA) {  // (a driver without the encoder: the cp.async kernel below)
            CUtensorMap omap;
            if (encode_weight_map<T>(&omap, p.w_out, D, D, A::OUT_KW, A::WGN * A::OUT_BNW) == cudaSuccess)
              return launch_with_smem<attn_sm90_otma_kernel<T, D, HEADS>, 1, true>(p.num_seq * ((p.len + A::BM - 1) / A::BM), 256,
                                                                          A::SMEM, stream, p, omap);
          }
#endif
          return launch_with_smem<attn_sm90_kernel<T, D, HEADS>, 1, true>(p.num_seq * ((p.len + A::BM - 1) / A::BM), 256, A::SMEM,
                                                                 stream, p);
        }
      }
    }
    const int64_t blocks = p.num_seq * ((p.len + Tr::BM - 1) / Tr::BM);
    if constexpr (M == Mma::Tc16) {
      if (p.arch == 90)
        return launch_with_smem<attn_out_kernel<Tr, true>>(blocks, Tr::THREADS, AttnOutLayout<Tr, true>::BYTES, stream, p);
    }
    return launch_with_smem<attn_out_kernel<Tr, false>>(blocks, Tr::THREADS, Tr::K2_BYTES, stream, p);
  }
  template <class F>
  static auto with_mode(int math, F&& f) {
    if constexpr (std::is_same<T, float>::value) {
      return math == kTf32 ? f(Traits<T, Mma::Tf32, D, HEADS>{}) : f(Traits<T, Mma::Ffma, D, HEADS>{});
    } else {
      return f(Traits<T, Mma::Tc16, D, HEADS>{});
    }
  }
  static cudaError_t launch(const PassParams& p, cudaStream_t stream) {
    return with_mode(p.math, [&](auto tr) { return run<decltype(tr)::M>(p, stream); });
  }
  static size_t fused_smem(int rows, int math) {
    return with_mode(math, [&](auto tr) { return decltype(tr)::fused_bytes(rows); });
  }
  static size_t two_kernel_smem(int math) {
    return with_mode(math, [&](auto tr) {
      using Tr = decltype(tr);
      return Tr::K1_BYTES > Tr::K2_BYTES ? Tr::K1_BYTES : Tr::K2_BYTES;
    });
  }
  static int block_rows(int math) {
    return with_mode(math, [&](auto tr) { return decltype(tr)::ROW_ALIGN; });
  }
  static cudaError_t probe() {
    cudaFuncAttributes attr;
    return with_mode(kExactFp32, [&](auto tr) {
      return cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(&ln_qkv_kernel<decltype(tr)>));
    });
  }
  static const SpecInfo* info() {
    static const SpecInfo i{std::is_same<T, float>::value ? kFloat32 : std::is_same<T, __half>::value ? kFloat16 : kBFloat16,
                            D, HEADS, &fused_smem, &two_kernel_smem, &block_rows, &launch, &probe};
    return &i;
  }
};

}  // namespace axial_fused
