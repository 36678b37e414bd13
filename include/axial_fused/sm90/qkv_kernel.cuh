// K1 on Hopper: LN + QKV of the two-kernel pass on sm_90a, 16-bit (kPathTwoKernel's first kernel):
// BM tokens a block, their normalised rows resident in shared memory (SW128, the wgmma A operand),
// the QKV weight streamed by a producer warp into two consumer warpgroups' wgmma (wg_gemm_ws_*), the
// q/k/v rows written to the scratch as 16-byte vectors. Same output as ln_qkv_kernel.
#pragma once
#include <cuda.h>  // CUtensorMap

#include "axial_fused/mma_sync/warp_mma.cuh"
#include "axial_fused/sm90/layernorm_sw128.cuh"
#include "axial_fused/sm90/wg_gemm.cuh"

namespace axial_fused {

// K1's configuration for one (dtype, dim), derived from its row of tile_size.h (qkv_sm90_tile).
// THREE (D <= kQkvThreeMaxDim): the form with three blocks an SM, 64-wide chunks (half the accumulator
// registers) and a deeper ring, which the planner takes where its waves fill the SMs better than two
// blocks' (KernelPlan::k1_per_sm).
template <class T, int D, bool THREE = false>
struct QkvSm90 {
  static_assert(!THREE || D <= kQkvThreeMaxDim, "the three-block K1 serves D <= kQkvThreeMaxDim");
  static constexpr QkvSm90Tile TILE = qkv_sm90_tile(D, THREE);
  static constexpr int N = 3 * D;
  // Weight chunks 32 columns deep (64-byte rows, SW64): half the bytes of a 64-deep stage, so
  // 128-wide chunks fit beside a 128-token A at D = 768, and twice per SM at D = 256.
  static constexpr int KW = TILE.kw;
  // Two-block clusters sharing each weight chunk by TMA multicast (wg_gemm_tma_produce).
  static constexpr bool TMA = TILE.cluster;
  // Register A (RS below) and the wide form: where the cluster form's ring is held to a few stages by
  // A's size (a 128-token A that leaves room for fewer than five 8 KB stages but at least three: D =
  // 768), the producer is a whole warpgroup (384 threads; one thread still issues the copies) so that
  // registers move to the consumers with setmaxnreg (producer 40 a thread, consumers 232, as
  // FlashAttention-3 splits them), room for RS_PANELS panels of A in registers. (Decided before the
  // budget below, which depends on it through the barriers.)
  static constexpr bool RS_MAY = TMA && size_t(256) * D + TILE.rs_max_stages * 8192 > kSmemPerBlock &&
                                 size_t(256) * D + TILE.rs_min_stages * 8192 + 4096 <= kSmemPerBlock;
  static constexpr size_t BAR_BYTES = (RS_MAY ? 32 : 16) * 8;  // full[SB] and empty[SB], SB <= 8 (16 with RS)
  static constexpr bool WIDE = RS_MAY;
  static constexpr int THREADS = WIDE ? 384 : 288;  // two consumer warpgroups + the producer warp(group)
  static constexpr size_t SLACK = 128 * sizeof(int64_t) + BAR_BYTES + 1024;  // row offsets, barriers, alignment
  static constexpr size_t BUDGET = kSmemPerBlock - SLACK;       // one block's opt-in limit
  static constexpr int WGM = size_t(128) * D * 2 + 3 * 8192 <= BUDGET ? 2 : 1;  // 128 or 64 tokens per block
  static constexpr int BM = 64 * WGM, WGN = 2 / WGM;
  static constexpr size_t A_BYTES = size_t(BM) * D * 2;
  static constexpr size_t stage_bytes(int bnw) { return size_t(WGN) * bnw * KW * 2; }
  // 128-wide weight chunks (m64n128: half the barriers and less shared-memory traffic per flop than
  // n64) wherever 3 stages of them fit, else 64-wide ones.
  static constexpr int BNW = !THREE && N % (WGN * 128) == 0 && A_BYTES + 3 * stage_bytes(128) <= BUDGET ? 128 : 64;
  static constexpr size_t STAGE = stage_bytes(BNW);
  // The ring: as many stages as fit, within the row's bounds.
  static constexpr int S_FIT = int((BUDGET - A_BYTES) / STAGE);
  static constexpr int S_CAP = TILE.max_stages;
  static constexpr int S = S_FIT < TILE.min_stages ? TILE.min_stages : S_FIT < S_CAP ? S_FIT : S_CAP;
  static constexpr size_t SMEM = SLACK + A_BYTES + S * STAGE;
  // RS: with a 4-stage ring beside 192 KB of A (D = 768) K1 waits on its weight stream's latency.
  // With RS each consumer thread loads its rows' first 64n columns of A as wgmma A fragments (KR = 4n
  // k-steps, 16n registers) once LayerNorm is done, and the ring (stages 0 .. S - 1 first, then SB - S
  // more over A's first n panels, which the layout puts right after the ring) has SB stages. The
  // register budget bounds n: the wide form's 232 registers a consumer thread take n = 6 (16 stages,
  // 128 KB in flight). Only where the ring is held by A's size (S_FIT <= S_CAP: D = 768; not D = 512,
  // whose ring could grow without it).
  static constexpr int RS_PANELS = TILE.rs_panels;  // 64-column panels of A held in registers
  static constexpr size_t RS_BYTES = size_t(BM) * 128 * RS_PANELS;
  static constexpr bool RS = RS_MAY && WGM == 2 && S_FIT <= S_CAP && RS_PANELS * 64 < D && RS_BYTES % STAGE == 0 &&
                             S + RS_BYTES / STAGE <= 16;
  static constexpr int KR = RS ? 4 * RS_PANELS : 0;
  static constexpr int SB = RS ? S + int(RS_BYTES / STAGE) : S;
  // Blocks per SM the register budget is set for.
  static constexpr int MINB = THREE ? 3 : SMEM <= smem_per_block(2) ? 2 : 1;
  static_assert(!THREE || SMEM <= smem_per_block(3), "three blocks an SM");
  static_assert(S <= 8 && (BNW == 64 || BNW == 128), "the warp-specialized product's limits");
  static_assert(A_BYTES + S * STAGE <= BUDGET && N % (WGN * BNW) == 0 && 4 * D % (WGN * BNW) == 0,
                "no Hopper QKV configuration fits");  // (4D: with the gate's block)
};

// The pass's bias from its own normalised rows (PassParams::bias_w, the triangle bias), written into
// the prepared bias that the attention kernel reads (bias_frag, params.h): a consumer warp takes 16
// rows of A and one tile of 8 heads at a time, their products on mma.sync (m16n8k16: A fragments
// from the SW128 tile, bias_w's rows as B fragments from global memory, where every block reads the
// same few KB), and stores each value as the prep kernel would (times sqrt(head_dim), float16,
// saturated). Token (sequence s, position l) gives query s % seq_inner, key l of batch element
// s / seq_inner. Each (head, query, key) has one token, so the stores never overlap; entries past
// L (kp > L) are zeroed by the launch.
template <class T, int D, int BM>
__device__ __forceinline__ void self_bias_to_frag(const PassParams& p, const T* A, int64_t t0, int rows) {
  constexpr int RW = BM / 16;  // warps over the block's rows; 8 / RW warps over the head tiles
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, r0 = (warp % RW) * 16;
  const int heads = p.heads, kp = p.kp;
  // This lane's two rows (g, g + 8): where their (query, key) lies in a head's plane, -1 past the tokens.
  int64_t at[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = r0 + g + 8 * i;
    at[i] = -1;
    if (r < rows) {
      const int64_t tok = t0 + r, s = tok / p.len, b = s / p.seq_inner;
      const int q = int(s - b * p.seq_inner), l = int(tok - s * p.len);
      at[i] = b * p.bias_frag_stride_b + (int64_t(q >> 4) * (kp >> 6) + (l >> 6)) * 1024 + bias_block_pos(q & 15, l & 63);
    }
  }
  const T* w = static_cast<const T*>(p.bias_w);
  __half* out = const_cast<__half*>(p.bias_frag);
  const float root_hd = float(kLog2e) / p.scale_log2;
  for (int h0 = (warp / RW) * 8; h0 < heads; h0 += 64 / RW) {
    const int n = h0 + g;  // the head of this lane's B fragments (zeros past the heads)
    const T* wn = w + int64_t(n < heads ? n : 0) * D + 2 * t;
    float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 8
    for (int k0 = 0; k0 < D; k0 += 16) {
      uint32_t a[4];
      a_frag_sw128<BM>(a, A, r0, k0);
      const uint32_t b0 = n < heads ? *reinterpret_cast<const uint32_t*>(wn + k0) : 0u;
      const uint32_t b1 = n < heads ? *reinterpret_cast<const uint32_t*>(wn + k0 + 8) : 0u;
      mma16816<T>(c, a, b0, b1);
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {  // c[e]: row g + 8 (e >> 1), head h0 + 2t + (e & 1)
      const int h = h0 + 2 * t + (e & 1);
      if (h < heads && at[e >> 1] >= 0)
        out[at[e >> 1] + int64_t(h) * kp * kp] = __float2half_rn(fminf(fmaxf(c[e] * root_hd, -65504.f), 65504.f));
    }
  }
}

// The body of K1 (ln_qkv_sm90_kernel); TMA: the cluster form (ln_qkv_sm90_tma_kernel),
// `wmap` the QKV weight's tensor map. EXTRAS (has_extras): the q/k/v bias, and nq = 4D columns with
// the gate; the plain variant's product has 3D columns, compile-time.
template <class T, int D, bool TMA, bool EXTRAS, bool THREE = false>
__device__ __forceinline__ void ln_qkv_sm90_body(const PassParams& p, const void* wmap) {
  using C = QkvSm90<T, D, THREE>;
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
  // Each 16-byte vector goes out as one STG.E.128 (st_global_16), addressed from the block's first
  // row with 32-bit offsets and checked against its row count, so no store recomputes a 64-bit
  // product and compare.
  // nq = 3D columns, or 4D with the gate (W_qkv then holds the gate's weight as rows 3D .. 4D - 1).
  const int nq = EXTRAS ? p.nq : C::N;
  constexpr int NFIX = EXTRAS ? 0 : C::N;
  T* const qkv = static_cast<T*>(p.scratch) + t0 * nq;
  const int rows = tokens - t0 < BM ? int(tokens - t0) : BM;
  // The gate's block (columns 3D on) goes out as its factor sigmoid(g) (gate_of), 8 values a vector.
  auto store = [&](int r, int c, uint4 v) {
    if (EXTRAS && c >= 3 * D) {
      using P2 = Pack2<T>;
      auto* pr = reinterpret_cast<typename P2::type*>(&v);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 g = P2::unpack(pr[i]);
        pr[i] = P2::make(gate_of<T>(g.x), gate_of<T>(g.y));
      }
    }
    if (r < rows) st_global_16(qkv + (r * nq + c), v);
  };

  // 1. Request the tile's raw rows (straight into their SW128 places; rows past the end read as 0).
  for (int r = threadIdx.x; r < BM; r += 256) xo[r] = t0 + r < tokens ? x_offset(p, (t0 + r) / L, (t0 + r) % L) : -1;
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
        wg_gemm_tma_produce<C::WGN * C::BNW, D, SB, C::KW, NFIX, C::S>(wmap, smem_u32(ws), full, empty, cluster_rank(),
                                                                       nq);
      cluster_sync();
    } else if (!C::WIDE || threadIdx.x < 288) {  // (one producer warp: `full` counts its 32 lanes)
      wg_gemm_ws_produce<T, C::WGN * C::BNW, D, C::S, C::KW, NFIX>(static_cast<const T*>(p.w_qkv), ws, full, empty, nq);
    }
    return;
  }
  if constexpr (C::WIDE) setmaxnreg_inc<232>();
#ifdef AXIAL_FUSED_PHASE_CLOCK
  long long phase_[2] = {}, phase_last_ = clock64();
#endif
  request_rows_sw128<T, D, BM>(p, A, xo);
  cp_async_wait<0>();
  named_sync(1, 256);
  AXIAL_PHASE(0);
  layernorm_sw128<T, D, BM>(p, A);
  named_sync(1, 256);  // every row normalised and fenced before either warpgroup reads A
  if (EXTRAS && p.bias_w) self_bias_to_frag<T, D, BM>(p, A, t0, rows);
  AXIAL_PHASE(1);
#ifdef AXIAL_FUSED_PHASE_CLOCK
  if (blockIdx.x < 2 && (threadIdx.x & 127) == 0)
    printf("k1 clocks D %d block %d wg %d: rows %lld layernorm %lld\n", D, int(blockIdx.x), int(threadIdx.x >> 7),
           phase_[0], phase_[1]);
#endif
  wg_gemm_ws_consume<T, C::WGM, C::WGN, C::BNW, D, SB, C::KW, NFIX, TMA, KR, C::S>(
      A, ws, full, empty, store, nq, EXTRAS ? static_cast<const T*>(p.qkv_bias) : nullptr, p.qkv_bias_from);
  if constexpr (TMA) cluster_sync();
}

// Both forms start without waiting for the grid before them: launched after the prep kernel with
// programmatic dependent launch (Spec::launch_k1), their launch overlaps its tail, since they read
// neither of its outputs (the key bits, the prepared bias) nor write what it reads, and each thread
// waits for it only at its end, so that the attention kernel, which waits for K1, finds the
// prepared terms too. Otherwise they are launched plainly and the wait returns at once.
template <class T, int D, bool EXTRAS = false, bool THREE = false>
__global__ void __launch_bounds__(QkvSm90<T, D, THREE>::THREADS, QkvSm90<T, D, THREE>::MINB)
    ln_qkv_sm90_kernel(const __grid_constant__ PassParams p) {
#if AXIAL_FUSED_SM90
  pdl_launch_dependents();
  ln_qkv_sm90_body<T, D, false, EXTRAS, THREE>(p, nullptr);
  pdl_wait();
#else
  __trap();
#endif
}

// K1 in clusters (QkvSm90::TMA): pairs of blocks (launched with a cluster attribute; grid rounded up
// to even; a block past the tokens still takes part in the copies and stores nothing).
template <class T, int D, bool EXTRAS = false>
__global__ void __launch_bounds__(QkvSm90<T, D>::THREADS, QkvSm90<T, D>::MINB)
    ln_qkv_sm90_tma_kernel(const __grid_constant__ PassParams p, const __grid_constant__ CUtensorMap wmap) {
#if AXIAL_FUSED_SM90
  pdl_launch_dependents();
  ln_qkv_sm90_body<T, D, true, EXTRAS>(p, &wmap);
  pdl_wait();
#else
  __trap();
#endif
}

}  // namespace axial_fused
