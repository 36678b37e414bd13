// Hopper (sm_90a) fused pass for sequences of 32 to 128 tokens (path kPathFusedSm90; plan_pass takes
// it automatically there, and at any length <= 128 when forced; docs/design.md, "The Hopper fused kernel").
//
// One block of two warpgroups owns up to 128 tokens: one sequence of length L <= 128, or 128 / L
// whole sequences packed. The block
//   1. loads the tokens' rows of x into shared memory (cp.async, SW128) and normalises them in place
//      (the LayerNorm tile A stays resident: the A operand of every head's projection);
//   2. the two warpgroups take alternate heads and run independently (named barriers, their own
//      keys/values buffers and weight rings), so one's softmax overlaps the other's products. For
//      its head h a warpgroup computes q/k/v of all 128 tokens (wgmma m64n96 twice per k-step, A
//      from shared memory, the head's 96 rows of W_qkv streamed through its cp.async ring, which
//      runs ahead across heads); q stays in registers as the next product's A operand; k goes to
//      shared memory in SW128 rows of which the first 32 columns are used, v transposed (SW128,
//      K-major over keys). Then, for rows 0-63 and 64-127 in turn: S = q k^T (wgmma, A from
//      registers); masked softmax of the whole row in registers (all keys at once: no online
//      rescaling); O_h = P V (wgmma, P from registers); O_h / rowsum into the O tile's columns of
//      head h (SW128);
//   3. out = O @ W_out^T + bias + x (wg_gemm over both rings; bias and residual loaded ahead).
// Nothing but x, the weights and out (and the mask and bias, where given) touches global memory.
// head_dim 32 with an even number of heads and D <= 256 (the D = 128/4, 192/6, 256/8 specializations;
// FusedSm90::SERVED); bf16/fp16.
// Its parts shared with the attention kernel's headers: row_softmax (online_softmax.cuh),
// mask_other_sequences (attn_terms.cuh), store_head_rows (attn_epilogue.cuh).
#pragma once
#include "axial_fused/common/logits.cuh"
#include "axial_fused/sm90/attn_epilogue.cuh"
#include "axial_fused/sm90/attn_terms.cuh"
#include "axial_fused/sm90/layernorm_sw128.cuh"
#include "axial_fused/sm90/online_softmax.cuh"
#include "axial_fused/sm90/tile_size.h"
#include "axial_fused/sm90/wg_gemm.cuh"

namespace axial_fused {

template <class T, int D, int HEADS>
struct FusedSm90 {
  static constexpr FusedSm90Tile TILE = fused_sm90_tile(D);
  static constexpr int HD = D / HEADS, BM = TILE.bm, KC = D / 64, NQKV = 3 * HD;
  static constexpr size_t A_BYTES = size_t(BM) * D * 2;        // LayerNorm tile, SW128
  static constexpr size_t O_BYTES = A_BYTES;                   // attention output tile, SW128
  static constexpr size_t K_BYTES = size_t(BM) * 64 * 2;       // one head's keys, SW128 rows (columns 32-63 unused)
  static constexpr size_t V_BYTES = size_t(HD) * BM * 2;       // one head's values, transposed, SW128
  static constexpr size_t STAGE = size_t(NQKV) * 128;          // 96 weight rows x 64 columns
  static constexpr size_t OFFS = 2 * BM * sizeof(int64_t);
  // Each warpgroup has its own keys, values and weight ring (it runs its own heads).
  static constexpr size_t FIXED = 1024 + OFFS + A_BYTES + O_BYTES + 2 * (K_BYTES + V_BYTES);
  // Weight ring stages per warpgroup: as many as the rest of the block's shared memory holds.
  static constexpr int SW_FIT = FIXED < kSmemPerBlock ? int((kSmemPerBlock - FIXED) / (2 * STAGE)) : 0;
  static constexpr int SW = SW_FIT > TILE.max_stages ? TILE.max_stages : SW_FIT;
  static constexpr size_t RING = 2 * SW * STAGE;
  // Output projection: chunks of OUT_BNW weight rows, as many stages as the rings hold, within bounds.
  static constexpr int OUT_BNW = TILE.out_bnw;
  static constexpr int OUT_FIT = int(RING / (OUT_BNW * 128));
  static constexpr int OUT_S = OUT_FIT < TILE.max_out_stages ? OUT_FIT : TILE.max_out_stages;
  static constexpr size_t SMEM = FIXED + RING;
  // Where the kernel exists: head_dim 32, an even number of heads (the two warpgroups split them), D <= 256
  // (the LayerNorm and output tiles stay resident); plan_pass checks the same.
  static constexpr bool SERVED = HD == 32 && HEADS % 2 == 0 && D <= TILE.max_dim && SW >= TILE.min_stages &&
                                 OUT_S >= TILE.min_out_stages;
  static_assert(!SERVED || (STAGE % 1024 == 0 && K_BYTES % 1024 == 0 && V_BYTES % 1024 == 0 && A_BYTES % 1024 == 0),
                "1024-byte aligned operand tiles");
};

// EXTRAS: the q/k/v bias, the mask and the bias of the logits, the optional residual (not the gate:
// the planner does not route a gated pass here).
template <class T, int D, int HEADS, bool EXTRAS = false>
__device__ __forceinline__ void fused_sm90_body(const PassParams& p) {
#if AXIAL_FUSED_SM90  // (sm_90a device code only, as the kernels' bodies: the host pass never sees it)
  using C = FusedSm90<T, D, HEADS>;
  static_assert(C::SERVED, "fused_sm90_kernel instantiated for a configuration it does not serve");
  constexpr int BM = C::BM, HD = C::HD, KC = C::KC, SW = C::SW;
  constexpr int NJ = HEADS / 2 * KC;  // weight chunks per warpgroup
#ifdef AXIAL_FUSED_PHASE_CLOCK
  long long phase_[9] = {}, phase_last_ = clock64();
#endif
  extern __shared__ __align__(16) unsigned char smem_raw[];
  int64_t* xo = reinterpret_cast<int64_t*>(smem_raw);  // BM row offsets into x (-1: no token)
  int64_t* oo = xo + BM;                               // BM row offsets into out
  unsigned char* base = smem_raw + C::OFFS;
  base += (1024 - (smem_u32(base) & 1023)) & 1023;
  T* A = reinterpret_cast<T*>(base);
  T* O = reinterpret_cast<T*>(base + C::A_BYTES);
  unsigned char* own = base + C::A_BYTES + C::O_BYTES;  // per warpgroup: Ks, Vt
  T* ring = reinterpret_cast<T*>(own + 2 * (C::K_BYTES + C::V_BYTES));
  const T* wqkv = static_cast<const T*>(p.w_qkv);

  const int L = p.len, tid = threadIdx.x, wg = warp_uniform(tid >> 7), wtid = tid & 127;
  const int warp = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t s0 = int64_t(blockIdx.x) * p.group;
  const int rows = int(p.num_seq - s0 < p.group ? p.num_seq - s0 : p.group) * L;
  T* Ks = reinterpret_cast<T*>(own + wg * (C::K_BYTES + C::V_BYTES));
  T* Vt = reinterpret_cast<T*>(own + wg * (C::K_BYTES + C::V_BYTES) + C::K_BYTES);
  char* wring = reinterpret_cast<char*>(ring) + wg * SW * C::STAGE;

  // 1. Row offsets, then the raw rows straight into their SW128 places (rows past `rows` read as 0).
  for (int r = tid; r < BM; r += 256) {
    const bool ok = r < rows;
    xo[r] = ok ? x_offset(p, s0 + r / L, r % L) : -1;
    oo[r] = ok ? out_offset(p, s0 + r / L, r % L) : -1;
  }
  __syncthreads();
  request_rows_sw128<T, D, BM>(p, A, xo);

  // This warpgroup's QKV weight ring: its j-th chunk (j = i * KC + kc) holds head h = 2 i + wg's 96
  // rows (q, k, v of the head) x columns [64 kc, 64 kc + 64), SW128; SW - 1 chunks run ahead, across heads.
  auto load = [&](int j) {
    if (j < NJ) {
      const int h = 2 * (j / KC) + wg, k0 = (j % KC) * 64;
      char* dst = wring + (j % SW) * C::STAGE;
      for (int v = wtid; v < C::NQKV * 8; v += 128) {
        const int r = v >> 3, c = v & 7, part = r / HD;  // part 0: q, 1: k, 2: v
        const int64_t src_row = int64_t(part) * D + h * HD + (r - part * HD);
        cp_async16(dst + r * 128 + ((c ^ (r & 7)) << 4), wqkv + src_row * D + k0 + c * 8, true);
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int s = 0; s < SW - 1; ++s) load(s);

  AXIAL_PHASE(0);
  // LayerNorm in place (all 256 threads), once the rows (older than the SW - 1 weight groups) have landed.
  cp_async_wait<SW - 1>();
  __syncthreads();
  layernorm_sw128<T, D, BM>(p, A);
  __syncthreads();
  AXIAL_PHASE(1);

  const uint32_t a_base = smem_u32(A), k_base = smem_u32(Ks), v_base = smem_u32(Vt), w_base = smem_u32(wring);
  const bool unmasked = L == BM;  // one full 128-token sequence
  const float nan = __int_as_float(0x7fffffff);

  // 2. The two warpgroups take alternate heads and run independently (their own barriers), so one's
  // softmax overlaps the other's products. Each computes its head for all 128 rows: q/k/v (two m64
  // accumulators), then attention for rows 0-63 and 64-127 in turn.
  for (int i = 0; i < HEADS / 2; ++i) {
    const int h = 2 * i + wg;
    float acc[2][48];
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int e = 0; e < 48; ++e) acc[m][e] = 0.f;
    for (int kc = 0; kc < KC; ++kc) {
      const int j = i * KC + kc;
      cp_async_wait<SW - 2>();  // this thread's copies of chunk j have landed
      fence_proxy_async();
      warpgroup_sync(wg);  // everyone's have; this warpgroup's wgmma(j - 1) and its previous head's Ks/Vt reads are done
      load(j + SW - 1);    // into the stage chunk j - 1 used
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const uint64_t b = sw128_desc(w_base + (j % SW) * C::STAGE + kk * 32);
#pragma unroll
        for (int m = 0; m < 2; ++m)
          Wgmma<T, 96>::mma(acc[m], sw128_desc(a_base + m * 64 * 128 + kc * BM * 128 + kk * 32), b, kc > 0 || kk > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
    }
    fence_regs(acc[0]);
    fence_regs(acc[1]);
    if constexpr (EXTRAS) {
      if (p.qkv_bias) {  // accumulator block jb: q (jb < 4), k, v columns of head h (ungated: qkv_bias_from 0)
        const T* qb = static_cast<const T*>(p.qkv_bias);
#pragma unroll
        for (int jb = 0; jb < 12; ++jb) {
          const float2 b = load2(qb + (jb / 4) * D + h * HD + 8 * (jb % 4) + 2 * t);
#pragma unroll
          for (int m = 0; m < 2; ++m) {
            acc[m][4 * jb] += b.x;
            acc[m][4 * jb + 1] += b.y;
            acc[m][4 * jb + 2] += b.x;
            acc[m][4 * jb + 3] += b.y;
          }
        }
      }
    }
    AXIAL_PHASE(2);

    // 2b. q -> A fragments; k -> Ks (SW128, columns 0-31); v -> Vt (transposed, SW128). Accumulator block j
    // holds columns 8j..8j+7 of [q | k | v]: j 0-3 q, 4-7 k, 8-11 v.
    uint32_t qa[2][2][4];
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      acc_to_a<T>(qa[m][0], acc[m], 0, 0);
      acc_to_a<T>(qa[m][1], acc[m], 0, 1);
#pragma unroll
      for (int jb = 0; jb < 4; ++jb) {
        const int c = 8 * jb + 2 * t;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = 64 * m + warp * 16 + g + 8 * half;
          float k0 = acc[m][4 * (4 + jb) + 2 * half], k1 = acc[m][4 * (4 + jb) + 2 * half + 1];
          float v0 = acc[m][4 * (8 + jb) + 2 * half], v1 = acc[m][4 * (8 + jb) + 2 * half + 1];
          // NaN/Inf isolation between packed sequences (as fused_pass_kernel): a non-finite v pair
          // becomes 0 and its k pair NaN, so the token's own sequence still gets NaN scores while the
          // others mask a NaN score to -inf and multiply p = 0 by a finite 0.
          if (p.group > 1 && !(isfinite(v0) && isfinite(v1))) {
            v0 = v1 = 0.f;
            k0 = k1 = nan;
          }
          store2(Ks + sw128_index<BM>(r, c), k0, k1);
          // v transposed: two scalar stores, (head column c, key r) and (c + 1, r).
          const typename Pack2<T>::type vp = Pack2<T>::make(v0, v1);
          Vt[sw128_index<HD>(c, r)] = vp.x;
          Vt[sw128_index<HD>(c + 1, r)] = vp.y;
        }
      }
    }
    fence_proxy_async();
    warpgroup_sync(wg);  // all 128 keys of the head are in Ks / Vt
    AXIAL_PHASE(3);

#pragma unroll 1
    for (int m = 0; m < 2; ++m) {
      // This thread's rows (block-local tokens) and, for the mask, their sequences' first keys.
      const int r0 = 64 * m + warp * 16 + g, r1 = r0 + 8;
      const int c0 = r0 < rows ? r0 : rows - 1, c1 = r1 < rows ? r1 : rows - 1;
      const int lo0 = c0 / L * L, lo1 = c1 / L * L;
      // EXTRAS: the terms of the rows' logits (keys inside their sequences), loaded before S.
      [[maybe_unused]] FragmentTerms<T, EXTRAS ? 16 : 1> tm;
      const bool terms = EXTRAS && (p.mask != nullptr || p.bias != nullptr);
      if constexpr (EXTRAS) {
        if (terms) {  // (a block row's key index in its sequence: the row - its sequence's first row)
          const LogitRow<T> rows[2] = {SeqTerms<T>(p, s0 + c0 / L).row(p, h, c0 - lo0),
                                       SeqTerms<T>(p, s0 + c1 / L).row(p, h, c1 - lo1)};
          tm.load(p, rows, L, [&](int jb, int i) { return 8 * jb + 2 * t - (i ? lo1 : lo0); });
        }
      }

      // 2c. S = q k^T over the block's 128 keys (q selected element-wise: a runtime index into qa
      // would put it in local memory).
      uint32_t q[2][4];
#pragma unroll
      for (int kk = 0; kk < 2; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e) q[kk][e] = m ? qa[1][kk][e] : qa[0][kk][e];
      float s[64];
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) WgmmaRS<T, 128>::mma(s, q[kk], sw128_desc(k_base + kk * 32), kk > 0);
      wgmma_commit();
      wgmma_wait<0>();
      keep_regs(q);
      fence_regs(s);
      AXIAL_PHASE(4);

      // 2d. Masked softmax of whole rows (a row's 128 scores live in the 4 threads of a quad): a key
      // counts only inside its row's sequence, [lo, lo + L).
      if (!unmasked) mask_other_sequences<128>(s, lo0, lo1, L, t);
      float scale = p.scale_log2;
      if constexpr (EXTRAS) {
        if (terms) {  // scaled, terms added (-inf stays -inf): the softmax takes scale 1
          tm.apply(s, scale);
          scale = 1.f;
        }
      }
      float mx[2], sum[2] = {0.f, 0.f};  // the rows' scaled maxima, their sums
      row_softmax<128>(s, scale, mx, sum);

      AXIAL_PHASE(5);
      // 2e. O_h = P V (P from registers, 8 k-steps of 16 keys; Vt: N = 32 head columns, K = keys).
      // All eight fragments are built before the products start: an asynchronous wgmma reads its A
      // registers until it retires, so none may be rewritten in between.
      uint32_t pa[8][4];
#pragma unroll
      for (int kk = 0; kk < 8; ++kk) acc_to_a<T>(pa[kk], s, 0, kk);
      float o[16];
#pragma unroll
      for (int e = 0; e < 16; ++e) o[e] = 0.f;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 8; ++kk)
        WgmmaRS<T, 32>::mma(o, pa[kk], sw128_desc(v_base + (kk >> 2) * HD * 128 + (kk & 3) * 32), kk > 0);
      wgmma_commit();
      wgmma_wait<0>();
      keep_regs(pa);
      fence_regs(o);

      // 2f. O_h / rowsum into the O tile (columns h * 32 ..), the A operand of the output projection.
      store_head_rows<T, BM, HD>(O, o, r0, r1, h, t, 1.f / sum[0], 1.f / sum[1]);
      AXIAL_PHASE(6);
    }
  }

  // 3. out = O @ W_out^T + bias + x, through both rings (all their QKV chunks are consumed).
  cp_async_wait<0>();
  fence_proxy_async();
  __syncthreads();
  AXIAL_PHASE(7);
  wg_gemm<T, 2, 1, C::OUT_BNW, D, D, C::OUT_S>(O, static_cast<const T*>(p.w_out), ring,
                                               OutEpilogue<T, EXTRAS>(p, xo, oo));
#ifdef AXIAL_FUSED_PHASE_CLOCK
  AXIAL_PHASE(8);
  if (blockIdx.x < 2 && wtid == 0)
    printf("phase clocks block %d wg %d: rows %lld ln %lld qkv %lld kv %lld s %lld softmax %lld pv %lld sync %lld out %lld\n",
           int(blockIdx.x), wg, phase_[0], phase_[1], phase_[2], phase_[3], phase_[4], phase_[5], phase_[6], phase_[7],
           phase_[8]);
#endif
#endif  // AXIAL_FUSED_SM90
}

template <class T, int D, int HEADS, bool EXTRAS = false>
__global__ void __launch_bounds__(256, 1) fused_sm90_kernel(const __grid_constant__ PassParams p) {
#if AXIAL_FUSED_SM90
  pdl_entry();
  fused_sm90_body<T, D, HEADS, EXTRAS>(p);
#else
  __trap();
#endif
}

}  // namespace axial_fused
