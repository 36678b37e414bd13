// Hopper (sm_90a) attention + output projection of the two-kernel path (its second kernel, "K2"), for
// head_dim 32 or 64 in 16-bit: S = q k^T and P V on wgmma with an online softmax, q/k/v read from the
// scratch that ln_qkv_sm90_kernel wrote ([S * L, 3D]: q | k | v per token). docs/design.md, "The Hopper
// attention kernel".
//
// One block of two warpgroups owns BM queries of one sequence (128 for D <= 256, else 64 so that the
// output tile fits). The warpgroups take alternate heads and run independently (named barriers, their
// own query buffers and key/value ring), so one's softmax overlaps the other's products. For its head h
// a warpgroup streams the sequence's keys and values in tiles of BN (128 at head_dim 32, 64 at 64)
// through a ring (cp.async, or tensor-map copies where AttnSm90::KV_TMA), each tile's k and v rows
// copied as they lie in the scratch (RB = 64 or 128 bytes per row, swizzled): k is the K-major B
// operand of S = q k^T, v the N-major B operand of P V (TRANS_B), so nothing is transposed. Per
// tile and 64-query half (a "unit"): S (wgmma, q and k from shared memory), masked online softmax
// in registers (max and sum in log2 units, the scale folded into the exponent), O_h = O_h * alpha +
// P V (wgmma, P from registers), each unit's S issued before the previous unit's P V
// (FlashAttention-3's order; ptxas waits for that P V before the exponentials, so the row maxima
// overlap it). After the last tile O_h / rowsum goes into head h's columns of
// the SW128 output tile, and once every head is done the block runs
// out = O @ W_out^T + bias + x (wg_gemm, its weight ring in the key/value rings' space). With a mask, a
// sequence with no present key runs no key tiles: each head's output is the mean of its values
// (value_sums).
//
// The split form (SPLIT, at D >= 512) runs the attention alone and leaves the output projection to
// out_gemm_sm90_kernel (out_gemm_kernel.cuh).
//
// Named parts (each compile-time, in its own header): the online softmax's state with its update,
// rescale and finalize (online_softmax.cuh: OnlineSoftmax); the logits' terms and the key range
// (attn_terms.cuh: AttnTerms, its Bias); each head's output and the output projection
// (attn_epilogue.cuh: AttnEpilogue); the key / value copies and the chunks' order (attn_pipeline.cuh:
// KvCopy, TileCursor). The ring's schedule and the unit order stay in the body.
#pragma once
#include <cuda.h>  // CUtensorMap (the tensor-map output projection)

#include <type_traits>

#include "axial_fused/common/logits.cuh"
#include "axial_fused/sm90/attn_epilogue.cuh"
#include "axial_fused/sm90/attn_pipeline.cuh"
#include "axial_fused/sm90/attn_terms.cuh"
#include "axial_fused/sm90/online_softmax.cuh"
#include "axial_fused/sm90/tile_size.h"
#include "axial_fused/sm90/wg_gemm.cuh"

namespace axial_fused {

// SPLIT (at D >= 512, kSplitMinDim): the attention alone, each head's output written into its own q
// columns of the scratch (those rows' q of that head are read by this block only, and already read),
// and the output projection left to out_gemm_sm90_kernel. Why: at D > 256 the fused form keeps all
// heads' output O[BM][D] in shared memory for the projection, which holds a block to 64 queries (96
// KB of O at D = 768), so every 64 queries re-read the sequence's keys and values and the whole W_out,
// and its ring to 3 stages. Split, a block takes 128 queries (each key / value tile serves both
// halves) with a 4-stage ring, for O written and read once more; 64 where the sequence is no longer
// (a second half would be all padding). Below kSplitMinDim the fused form (docs/alternatives.md).
// (SPLIT: 0, the fused form; else the split form's queries per block, 64 or 128.) The choices are
// attn_sm90_tile's (tile_size.h); the layout below is derived from them.
// TERMS (attn_sm90_body): with kTermMaskMma each key tile's stage also holds the mask's B rows (BN x
// 16 bytes), and each warpgroup a 2 KB A tile of ones for the mask's k-step; with kTermBias as well,
// each warp has a slot for its next unit's bias block (BSLOT) where it fits beside the ring.
template <class T, int D, int HEADS, int SPLIT = 0, int TERMS = 0>
struct AttnSm90 {
  static constexpr bool MROWS = (TERMS & kTermMaskMma) != 0;
  static constexpr int HD = D / HEADS;
  // At head_dim 32 (where D is a multiple of 128: two 64-row warpgroups side by side in the output
  // projection), two blocks per SM of 64 queries, 64-key tiles and at most 128 registers (PAIR): the
  // kernel waits on latencies at two warps per scheduler, and one block's output projection overlaps
  // the other's attention. Elsewhere one block per SM of 128 queries (64 where D > 256), 128-key
  // tiles at head_dim 32.
  static constexpr AttnSm90Tile TILE = attn_sm90_tile(D, HEADS, SPLIT);
  static constexpr bool PAIR = TILE.pair;
  static constexpr int BM = TILE.bm;  // queries per block
  static constexpr int MT = BM / 64;  // 64-row halves
  static constexpr int BN = TILE.bn;  // keys per tile
  static constexpr int RB = HD * 2;                              // bytes per row of one head's q, k or v
  static constexpr size_t OFFS = SPLIT ? 0 : 2ull * BM * sizeof(int64_t);  // row offsets of x and out
  static constexpr size_t ONES = MROWS ? 2 * 2048 : 0;                     // the mask's A tiles
  static constexpr size_t O_BYTES = SPLIT ? 0 : size_t(BM) * D * 2;  // attention output tile, SW128
  static constexpr size_t Q_BYTES = size_t(BM) * RB;            // one head's queries
  static constexpr size_t MROW_BYTES = MROWS ? size_t(BN) * 16 : 0;   // the mask's B rows of a tile
  static constexpr size_t STAGE = 2ull * BN * RB + MROW_BYTES;  // one key tile: k rows, v rows, mask rows
  // The mask's B descriptor reads its rows' two 8-column halves at the same bytes (leading offset 0),
  // but spans 16 columns (BN x 32 bytes) as the sanitizer counts it: the last stage's would end
  // MROW_BYTES past the ring, so the allocation keeps that much after it.
  static constexpr size_t MROW_TAIL = MROW_BYTES;
  // KV_BARS (KV_TMA below): each warpgroup's mbarriers of its copy groups, one a ring stage.
  static constexpr size_t KV_BARS = PAIR ? 64 : 0;
  // Per warpgroup: two query buffers (this head's, the next one's) and SW ring stages.
  static constexpr size_t FIXED0 = 1024 + OFFS + ONES + KV_BARS + O_BYTES + 2 * 2 * Q_BYTES + MROW_TAIL;
  static constexpr int MINB = PAIR && FIXED0 + 2 * 2 * STAGE <= smem_per_block(2) ? 2 : 1;
  static constexpr size_t SMEM_MAX = smem_per_block(MINB);
  // Output projection: WGM x WGN warpgroups over the BM x D output, OUT_BNW-wide weight chunks of
  // OUT_KW columns, its stages in the ring's and the bias slots' space.
  static constexpr int WGM = MT, WGN = 2 / MT, OUT_KW = TILE.out_kw;
  static constexpr int OUT_BNW = TILE.out_bnw;
  static constexpr size_t OUT_STAGE = size_t(WGN) * OUT_BNW * OUT_KW * 2;
  static constexpr int fit_stages(size_t fixed) {
    const int n = fixed < SMEM_MAX ? int((SMEM_MAX - fixed) / (2 * STAGE)) : 0;
    return n > TILE.max_stages ? TILE.max_stages : n;
  }
  // The bias slots (right after the ring): a warp's 16 queries x BN keys in float16, for one query half
  // (MT = 1), beside the mask on the tensor cores (not with the bias alone: docs/alternatives.md),
  // where the kernel still serves with them.
  static constexpr size_t BIAS_WANT =
      (TERMS & kTermBias) && (TERMS & kTermMaskMma) && MT == 1 ? 2ull * 64 * BN * 2 : 0;
  static constexpr int SW_B = fit_stages(FIXED0 + BIAS_WANT);
  static constexpr bool BSLOT = BIAS_WANT > 0 && SW_B >= (SPLIT ? 3 : 2) &&
                                (SPLIT || (2 * SW_B * STAGE + BIAS_WANT) / OUT_STAGE >= 3);
  static constexpr size_t BIAS_BYTES = BSLOT ? BIAS_WANT : 0;
  static constexpr size_t FIXED = FIXED0 + BIAS_BYTES;
  static constexpr int SW = fit_stages(FIXED);
  static constexpr size_t RING = 2 * SW * STAGE;
  static constexpr int OUT_FIT = int((RING + BIAS_BYTES) / OUT_STAGE);
  static constexpr int OUT_S = OUT_FIT < TILE.max_out_stages ? OUT_FIT : TILE.max_out_stages;
  static constexpr size_t SMEM = FIXED + RING;
  // The output projection's weight by tensor-map copies (wg_gemm_tma: thread 0 issues them, full /
  // empty mbarriers per stage, no cp.async and no block barrier per step; the mbarriers where the
  // first warpgroup's queries were, free by then), at D up to TILE.out_tma_max_dim (above it the
  // cp.async ring: docs/alternatives.md).
  static constexpr bool OUT_TMA = !SPLIT && D <= TILE.out_tma_max_dim && OUT_KW == 32 && WGM * WGN == 2 && OUT_BNW >= 64 &&
                                  WGN * OUT_BNW <= 256 && OUT_S <= 8;
  // The tensor-map output projection's kernel at PAIR: its queries, keys and values by tensor-map
  // copies too, from the warpgroup's thread 0, each copy group completing on its mbarrier (no copy
  // instructions in the threads, no cp.async wait or proxy fence a tile). Not in the 128-query blocks
  // (256x4, 192x6), whose two-stage ring has no room to run ahead (docs/alternatives.md).
  static constexpr bool KV_TMA = TILE.kv_tma && KV_BARS > 0 && OUT_TMA;
  static constexpr bool SERVED =
      (HD == 32 || HD == 64) && (SPLIT ? SW >= 3 : D % (64 * WGN) == 0 && SW >= 2 && OUT_S >= 3);
  static_assert(!SERVED || (O_BYTES % 1024 == 0 && Q_BYTES % 1024 == 0 && STAGE % 1024 == 0 && BN <= 128),
                "1024-byte aligned tiles; a thread a key's mask row");
};

// O (64 x HD) += P (64 x BN, A fragments) V (BN x HD at v_base, N-major): BN / 16 wgmma k-steps, not
// committed.
template <class T, int HD, int BN, int RB>
__device__ __forceinline__ void pv_issue(float (&o)[HD / 2], const uint32_t (&pa)[BN / 16][4], uint32_t v_base) {
  const uint64_t vd = swz_desc<RB>(v_base);
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) WgmmaRS<T, HD>::template mma<1>(o, pa[kk], desc_plus(vd, kk * 16 * RB), 1);
}


// cp.async.wait_group with a run-time count (0 to 3).
__device__ __forceinline__ void cp_async_wait_upto(int n) {
  if (n <= 0) cp_async_wait<0>();
  else if (n == 1) cp_async_wait<1>();
  else if (n == 2) cp_async_wait<2>();
  else cp_async_wait<3>();
}

// The kernel's body; OTMA (AttnSm90::OUT_TMA): the output projection's weight by tensor-map copies
// from `omap` (W_out with boxes of OUT_KW x WGN * OUT_BNW).
// SPLIT: the attention alone (AttnSm90's SPLIT).
// EXTRAS: the features (has_extras): the gate's factor on each head's output (the scratch's rows
// are p.nq long), the optional residual; TERMS (kTermBias | kTermMask, EXTRAS only): the logits'
// terms, prepared by terms_prep_kernel (p.bias_frag, p.key_bits), which initialise each unit's
// score accumulators right before its S product, which accumulates onto them: the softmax runs
// unchanged. (Requested any earlier, even at the end of the previous unit, ptxas serializes every
// wgmma of the kernel: C7513, non-wgmma instructions defining a wgmma's input registers.)
template <class T, int D, int HEADS, bool OTMA = false, int SPLIT = 0, bool EXTRAS = false, int TERMS = 0>
__device__ __forceinline__ void attn_sm90_body(const PassParams& p, const void* omap = nullptr,
                                               [[maybe_unused]] const void* kvmap = nullptr) {
#if AXIAL_FUSED_SM90  // (sm_90a device code only, as the kernels' bodies: the host pass never sees it)
  using C = AttnSm90<T, D, HEADS, SPLIT, TERMS>;
  using Terms = AttnTerms<C, TERMS>;  // the logits' terms and the key range (attn_terms.cuh)
  using Epilogue = AttnEpilogue<T, D, C::HD, C::BM, SPLIT, EXTRAS>;  // each head's output (attn_epilogue.cuh)
  constexpr bool TB = Terms::TB, TM = Terms::TM, TMM = Terms::TMM;
  static_assert(C::SERVED, "attn_sm90_kernel instantiated for a configuration it does not serve");
  static_assert(!OTMA || C::OUT_TMA, "the tensor-map output projection needs its mbarriers");
  static_assert(EXTRAS || TERMS == 0, "the terms are an EXTRAS variant's");
  static_assert(!TMM || (TM && std::is_same<T, __nv_bfloat16>::value), "the tensor cores' mask: bfloat16's range");
  constexpr int BM = C::BM, MT = C::MT, BN = C::BN, HD = C::HD, RB = C::RB, SW = C::SW, CH = RB / 16;
  // KVT (AttnSm90::KV_TMA): the queries, keys and values by tensor-map copies from `kvmap` (the
  // scratch as [sequences, L, ld], boxes of HD x 64 x 1, rows past L read as zeros).
  constexpr bool KVT = OTMA && C::KV_TMA;
#ifdef AXIAL_FUSED_PHASE_CLOCK
  long long phase_[9] = {}, phase_last_ = clock64();
#endif
  extern __shared__ __align__(16) unsigned char smem_raw[];
  int64_t* xo = reinterpret_cast<int64_t*>(smem_raw);  // BM row offsets into x (-1: past the end)
  int64_t* oo = xo + BM;                               // ... into out
  [[maybe_unused]] const uint32_t ones = smem_u32(smem_raw + C::OFFS);  // TMM: [wg] the mask's A tiles
  [[maybe_unused]] const uint32_t kv_bars = smem_u32(smem_raw + C::OFFS + C::ONES);  // KVT: [wg][SW <= 4] mbarriers
  unsigned char* base = smem_raw + C::OFFS + C::ONES + C::KV_BARS;
  base += (1024 - (smem_u32(base) & 1023)) & 1023;
  T* O = reinterpret_cast<T*>(base);
  unsigned char* qbuf = base + C::O_BYTES;                   // [wg][2] query buffers
  unsigned char* ring = qbuf + 2 * 2 * C::Q_BYTES;  // [wg][SW] key/value stages; later W_out's ring
  [[maybe_unused]] const uint32_t bslot = smem_u32(ring + C::RING);  // BSLOT: [wg][warp] the next unit's bias

  const int L = p.len, tid = threadIdx.x, wg = warp_uniform(tid >> 7), wtid = tid & 127;
  const int warp = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int nqt = (L + BM - 1) / BM;
  const int64_t s = blockIdx.x / nqt;
  Terms terms;
  [[maybe_unused]] uint32_t mrow = 0;  // TMM: this thread's mask rows, a bit a key tile (Terms::load_mask)
  terms.load_mask(p, s, L, wtid, mrow);
  // Key tiles a head runs: with the mask, those up to the sequence's last present key; none where no
  // key is present (`uniform`: each head's output is the mean of its values, value_sums).
  const int key_end = terms.key_end(L);
  const bool uniform = TM && key_end == 0;
  const int nkt = (key_end + BN - 1) / BN;
  const int q0 = int(blockIdx.x % nqt) * BM;
  const int ld = EXTRAS ? p.nq : 3 * D;  // the scratch's row length
  const T* qkv = static_cast<const T*>(p.scratch) + s * L * ld;

  if constexpr (SPLIT == 0) {
    for (int r = tid; r < BM; r += 256) {
      const bool ok = q0 + r < L;
      xo[r] = ok ? x_offset(p, s, q0 + r) : -1;
      oo[r] = ok ? out_offset(p, s, q0 + r) : -1;
    }
  }
  if constexpr (TMM) Terms::write_ones(ones + wg * 2048, wtid);  // this warpgroup's A tile of the mask's k-step

  // This warpgroup's heads h = 2 i + wg, i < nh; chunk j = i * nkt + n is head i's n-th key tile (with
  // the head's queries when n = 0). A head takes its tiles in the order nkt - 1, 0, 1, ..., nkt - 2:
  // the one tile that can run past the sequence's end comes first, so only a head's first units mask
  // (the online softmax does not depend on the order). A chunk's keys are needed by its units' S
  // products, its values by their P V, which runs during the next unit: with one query half that is
  // the next chunk's, so its values may come a chunk later than its keys (LAG = 1). That lets a
  // two-stage ring run a chunk ahead; with three stages one chunk ahead, LAG = 0 (two chunks ahead:
  // docs/alternatives.md). The copy group requested as chunk j starts holds chunk j + la's keys (in stage
  // (j + la) % SW) and chunk j + la - LAG's values (in theirs). la = chunks requested ahead: chunk
  // j - 1's keys are free once its S products are done and chunk j - 2's values once its last P V is
  // (chunk j - 1's last P V is still in flight during chunk j's first unit), so at most SW - 2 + LAG;
  // and at most nkt so a query buffer is refilled only after its head is done.
  constexpr int LAG = MT == 1 && SW == 2 ? 1 : 0, LA = SW - 2 + LAG;  // (nkt >= 1: la = 0 only where LA = 0)
  const int nh = (HEADS - wg + 1) / 2, la = LA < nkt ? LA : nkt;
  const uint32_t q_base = smem_u32(qbuf) + wg * 2 * C::Q_BYTES, r_base = smem_u32(ring) + wg * SW * C::STAGE;
  // Rows [row0, row0 + NR) of column block `col` of the scratch into an RB-row swizzled tile at `dst`
  // (rows past L read as zeros; KvCopy). Each thread copies the same 16-byte piece lc of rows lr,
  // lr + RPP, ... of every tile (the swizzle repeats every 8 rows), so its offsets are computed once here.
  using Copy = KvCopy<T, C>;
  constexpr int RPP = Copy::RPP;
  const int lr = wtid / CH, lc = wtid % CH;
  const T* src0 = qkv + int64_t(lr) * ld + lc * 8;
  const uint32_t dst0 = lr * RB + ((lc ^ swz_row<RB>(lr)) << 4);
  auto copy_rows = [&](uint32_t dst, int row0, auto rows_c, int col) {
    Copy::template rows<decltype(rows_c)::value>(qkv, src0, ld, dst0, lr, L, dst, row0, col);
  };
  using QRows = std::integral_constant<int, BM>;
  using KRows = std::integral_constant<int, BN>;
  // The chunks' keys and values are each requested strictly in order (TileCursor), and a whole
  // tile's rows are copied without predicates.
  using Cursor = TileCursor<SW>;
  Cursor kc, vc;
  // KVT: the copy group being requested (its mbarrier kv_bars + wg * 32 + 8 gs; groups as the cp.async
  // ones below), and rows [row0, row0 + rows) of column block `col` into it, by boxes of 64 rows.
  [[maybe_unused]] int gs = 0;
  [[maybe_unused]] auto tma_rows = [&](uint32_t dst, int row0, int rows, int col) {
    for (int b = 0; b < rows / 64; ++b)
      tma_load_3d(dst + b * 64 * RB, kvmap, col, row0 + b * 64, int(s), kv_bars + wg * 32 + 8 * gs);
  };
  // The next chunk's keys (with its head's queries at its first tile, and with LAG = 0 its values,
  // each row's k and v copied together).
  auto load_keys = [&] {
    if (kc.i < nh) {
      const int kt = kc.tile(nkt), h = 2 * kc.i + wg;
      if constexpr (!KVT) {
        if (kc.n == 0) copy_rows(q_base + (kc.i & 1) * C::Q_BYTES, q0, QRows{}, h * HD);
      }
      const uint32_t st = r_base + kc.s * C::STAGE;
      if constexpr (KVT) {
        if (wtid == 0) {
          if (kc.n == 0) tma_rows(q_base + (kc.i & 1) * C::Q_BYTES, q0, BM, h * HD);
          tma_rows(st, kt * BN, BN, D + h * HD);
          if constexpr (LAG == 0) tma_rows(st + BN * RB, kt * BN, BN, 2 * D + h * HD);
        }
      } else if (kt * BN + BN <= L) {
        const T* from = src0 + int64_t(kt * BN) * ld + D + h * HD;
#pragma unroll
        for (int pass = 0; pass < BN / RPP; ++pass) {
          cp_async16_shared(st + dst0 + pass * RPP * RB, from + pass * RPP * ld);
          if constexpr (LAG == 0) cp_async16_shared(st + BN * RB + dst0 + pass * RPP * RB, from + D + pass * RPP * ld);
        }
      } else {
        copy_rows(st, kt * BN, KRows{}, D + h * HD);
        if constexpr (LAG == 0) copy_rows(st + BN * RB, kt * BN, KRows{}, 2 * D + h * HD);
      }
      if constexpr (TMM) Terms::mask_rows(st + 2 * BN * RB, kt, wtid, mrow);  // the tile's mask rows
      kc.next(nkt);
    }
  };
  auto load_values = [&] {  // LAG = 1: the next chunk's values
    if (vc.i < nh) {
      const int kt = vc.tile(nkt), col = 2 * D + (2 * vc.i + wg) * HD;
      const uint32_t st = r_base + vc.s * C::STAGE + BN * RB;
      if constexpr (KVT) {
        if (wtid == 0) tma_rows(st, kt * BN, BN, col);
      } else if (kt * BN + BN <= L) {
        const T* from = src0 + int64_t(kt * BN) * ld + col;
#pragma unroll
        for (int pass = 0; pass < BN / RPP; ++pass) cp_async16_shared(st + dst0 + pass * RPP * RB, from + pass * RPP * ld);
      } else {
        copy_rows(st, kt * BN, KRows{}, col);
      }
      vc.next(nkt);
    }
  };
  auto load = [&](bool values = true) {  // one copy group (possibly empty: one per chunk)
    if constexpr (KVT) {  // its bytes expected on its mbarrier first
      if (wtid == 0) {
        uint32_t bytes = kc.i < nh ? (kc.n == 0 ? BM * RB : 0) + (LAG == 0 ? 2 : 1) * BN * RB : 0;
        if (LAG == 1 && values && vc.i < nh) bytes += BN * RB;
        mbar_arrive_expect_tx(kv_bars + wg * 32 + 8 * gs, bytes);
      }
    }
    load_keys();
    if (LAG == 1 && values) load_values();
    if constexpr (KVT) {
      gs = gs + 1 == SW ? 0 : gs + 1;
    } else {
      cp_async_commit();
    }
  };
  // The gate's factors of this warpgroup's heads into their places in the output tile (by which
  // store_head multiplies each head's output). They are first needed at the end of the first head, so
  // they join the second copy group requested before the head starts where there is one, else they
  // go first, in their own.
  auto gate_copy = [&] { Epilogue::gate_copy(O, qkv, ld, q0, L, wg, wtid); };
  const bool gated = EXTRAS && SPLIT == 0 && p.gated, gate_late = !KVT && gated && la >= 2;  // (la >= 2: nkt >= 2)
  if (gated && !gate_late) {
    gate_copy();
    cp_async_commit();
  }
  if constexpr (KVT) {
    static_assert(SW <= 4 && LA > 0, "four mbarriers a warpgroup; a group requested at each chunk start");
    if (wtid == 0) {
      for (int k = 0; k < SW; ++k) mbar_init(kv_bars + wg * 32 + 8 * k, 1);
      fence_mbar_init_cluster();
    }
    warpgroup_sync(wg);  // the mbarriers initialised
    for (int j = 0; j < la; ++j) load(LAG == 0 || j > 0);
  } else for (int j = 0; j < la; ++j) {
    if (C::BSLOT && j > 0) cp_async_commit();  // (empty: the place of a unit's bias group, bias.issue)
    if (j == 1 && gate_late) gate_copy();
    load(LAG == 0 || j > 0);  // (with LAG, the first group holds chunk 0's keys alone)
  }

  // TB: where this warp's units read their bias; BSLOT: the bias of a warp's next unit is copied into
  // its slot while this one runs (bias.issue): bc is that unit, bhead its head's first block.
  [[maybe_unused]] const typename Terms::Bias bias(p, s, wg, warp, lane, bslot);
  // (the warp's bias block of unit (h, kt, M), as a lambda: the kernel's machine code depends on it)
  [[maybe_unused]] auto bias_block = [&](int h, int kt, int M) { return bias.block(p, h, kt, M, q0, warp, lane); };
  [[maybe_unused]] Cursor bc;
  [[maybe_unused]] const __half* bhead = C::BSLOT ? bias_block(wg, 0, 0) : nullptr;
  // TERMS (INIT): the unit (head h, key tile kt, query half M)'s terms into the score accumulators
  // acc, which its S product then accumulates onto: the bias (per 64-key chunk, this warp's 16 x 64
  // block: four coalesced 16-byte loads a thread, or BSLOT: from the slot), and kMaskedRaw for the
  // absent keys (p.key_bits: one bit each, in fragment order, frag_pos). (A lambda here: as a function
  // of AttnTerms, the kernel's machine code shifts.)
  [[maybe_unused]] auto load_terms = [&](float (&acc)[BN / 2], int h, int kt, int M) {
    if constexpr (C::BSLOT) {  // this unit's bias group (the chunk's group came after it; KVT: none)
      if constexpr (KVT) {
        cp_async_wait<0>();
      } else {
        cp_async_wait<1>();
      }
    }
#pragma unroll
    for (int ch = 0; ch < BN / 64; ++ch) {
      const int k0 = kt * BN + ch * 64 + t * 16;
      const uint32_t absent = TM && !TMM ? __ldg(terms.kbits + k0 / 16) : 0u;
      [[maybe_unused]] const __half* blk = TB && !C::BSLOT ? bias_block(h, kt, M) + ch * 1024 : nullptr;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint4 u = make_uint4(0u, 0u, 0u, 0u);
        if constexpr (C::BSLOT) u = ld_shared_16(bias.my_slot + ch * 2048 + j * 512);
        else if constexpr (TB) u = __ldg(reinterpret_cast<const uint4*>(blk + j * 256));
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
        const int i = j >> 1;
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          const int jb = 4 * (j & 1) + jj;  // the 8-key block within the chunk
          float2 v = make_float2(0.f, 0.f);
          if constexpr (TB) v = __half22float2(*reinterpret_cast<const __half2*>(&w[jj]));
          if constexpr (TM && !TMM) {
            v.x = absent >> (2 * jb) & 1u ? kMaskedRaw : v.x;
            v.y = absent >> (2 * jb + 1) & 1u ? kMaskedRaw : v.y;
          }
          acc[4 * (ch * 8 + jb) + 2 * i] = v.x, acc[4 * (ch * 8 + jb) + 2 * i + 1] = v.y;
        }
      }
    }
  };
  constexpr bool INIT = Terms::INIT;
  float sc[BN / 2];  // a unit's scores (with INIT, from its terms on)

  if constexpr (C::BSLOT) {
    if (!uniform) bias.issue(p, bc, bhead, nh, nkt);  // the first unit's
  }
  // Copy groups newer than the one a chunk start waits for: the la - 1 chunks' groups after it and,
  // with BSLOT, the la units' bias groups between them (the first of them in the prologue); a
  // compile-time count where the head has more tiles than LA (every head but the shortest ones).
  const int waits = C::BSLOT ? 2 * la - 1 : la - 1;
  constexpr int WAITS = C::BSLOT ? 2 * LA - 1 : LA - 1;
  // KVT: copy group g's mbarrier and phase.
  [[maybe_unused]] auto wait_group = [&](int g) { mbar_wait(kv_bars + wg * 32 + 8 * (g % SW), uint32_t(g / SW) & 1u); };
  auto wait_chunk = [&] {
    if constexpr (LA > 0) {
      if (la == LA) {
        cp_async_wait<WAITS>();
      } else {
        cp_async_wait_upto(waits);
      }
    }
  };
  static_assert(!C::BSLOT || (MT == 1 && SW <= 4), "one bias slot a warp; at most three groups newer");

  using Softmax = OnlineSoftmax<T, BN, MT>;
  // A sequence with no present key (`uniform`): head h's output from its values' column sums
  // (Epilogue::value_sums), the warps' partial sums through this warpgroup's ring (idle in such a block).
  auto value_sums = [&](int h, float (&o)[MT][HD / 2]) {
    float* part = reinterpret_cast<float*>(ring + wg * SW * C::STAGE);  // [warp][HD]
    Epilogue::value_sums(qkv, ld, L, part, wg, wtid, warp, lane, t, h, o);
  };

  auto store_head = [&](int h, const float (&o)[MT][HD / 2], const Softmax& sm) {
    Epilogue::store_head(p, O, qkv, ld, q0, L, warp, g, t, h, o, sm);
  };

  AXIAL_PHASE(0);
  if (uniform) {
    for (int i = 0; i < nh; ++i) {
      float o[MT][HD / 2];
      Softmax sm;
      sm.reset();
      value_sums(2 * i + wg, o);
      AXIAL_PHASE(7);
      sm.uniform(L, t == 0);
      store_head(2 * i + wg, o, sm);
      AXIAL_PHASE(5);
    }
  } else for (int i = 0; i < nh; ++i) {
    const int h = 2 * i + wg;
    const uint32_t qb = q_base + (i & 1) * C::Q_BYTES;
    Softmax sm;
    sm.reset();
    float o[MT][HD / 2];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int e = 0; e < HD / 2; ++e) o[m][e] = 0.f;
    // The head runs as units u = (key tile kt, query half m) in FlashAttention-3's intra-warpgroup
    // order: unit u issues S(u) and then P(u-1) V(u-1), and waits for S(u) only. (ptxas puts the wait
    // for P V before the exponentials, which write registers that held S's accumulators: only the row
    // maxima overlap P V.)
    // P of the unit in softmax and of the one whose P V is in flight: with two query halves the
    // units alternate between the buffers in a fixed order; with one, the new P is copied over.
    uint32_t p_buf[2][BN / 16][4];
    float alpha[2];
    const auto rescale = Softmax::rescaler(alpha);  // (an output half times alpha)
    uint32_t v_prev = 0;  // the previous unit's values; its query half is (m + MT - 1) % MT
    // Waits for the head's n-th chunk's keys and chunk n - LAG's values, requests the next copy group;
    // returns the chunk's stage.
    auto tile_start = [&](int n) {
      const int j = i * nkt + n;
      if constexpr (KVT) {
        if constexpr (TMM) fence_proxy_async();  // the mask rows this thread wrote
        warpgroup_sync(wg);  // chunk j - 1's S and chunk j - 2's P V are done: their rows are free
        load();
        wait_group(j);  // chunk j's keys and chunk j - LAG's values
      } else if constexpr (LA == 0) {  // no room to run ahead (SW = 2, LAG = 0): load the chunk now, into chunk j - 2's stage
        warpgroup_sync(wg);
        load();
        cp_async_wait<0>();
        fence_proxy_async();
        warpgroup_sync(wg);
      } else {
        wait_chunk();  // this thread's copies of them have landed
        fence_proxy_async();
        warpgroup_sync(wg);  // everyone's have; chunk j - 1's S and chunk j - 2's P V are done: their rows are free
        load();
      }
      AXIAL_PHASE(1);
      return j % SW;
    };
    // One unit (query half M of key tile kt). FIRST (the head's first unit), M and MASK (a unit of the
    // head's first tile, the only one that can run past L) are compile-time: a wgmma under a run-time
    // branch makes ptxas serialize every wgmma of the kernel.
    auto unit = [&](auto first_c, auto m_c, auto mask_c, int stage, int kt) {
      constexpr bool FIRST = decltype(first_c)::value, MASK = decltype(mask_c)::value;
      constexpr int M = decltype(m_c)::value;
      constexpr int CUR = MT == 2 ? M : 0, PREV = MT == 2 ? 1 - M : 1;  // the last unit's P ends in p_buf[1]
      const uint32_t k_base = r_base + stage * C::STAGE;
      if constexpr (INIT) load_terms(sc, h, kt, M);
      wgmma_fence();
      const uint64_t qd = swz_desc<RB>(qb + M * 64 * RB), kd = swz_desc<RB>(k_base);
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk)
        Wgmma<T, BN>::mma(sc, desc_plus(qd, kk * 32), desc_plus(kd, kk * 32), INIT || kk > 0);
      if constexpr (TMM) Terms::template mask_kstep<T>(sc, ones + wg * 2048, k_base + 2 * BN * RB);
      wgmma_commit();
      if constexpr (!FIRST) {  // the previous unit's O += P V, in flight during this unit's row maxima
        pv_issue<T, HD, BN, RB>(o[(M + MT - 1) % MT], p_buf[PREV], v_prev);
        wgmma_commit();
      }
      if constexpr (C::BSLOT) bias.issue(p, bc, bhead, nh, nkt);  // (the slot's pieces are in sc by now)
      if constexpr (!FIRST) {
        wgmma_wait<1>();
      } else {
        wgmma_wait<0>();
      }
      fence_regs(sc);
      AXIAL_PHASE(2);
      if constexpr (MASK) {
        if (kt * BN + BN > L) mask_keys<BN>(sc, L - kt * BN);
      }
      sm.template update<M>(sc, p_buf[CUR], alpha, p.scale_log2);
      AXIAL_PHASE(3);
      if constexpr (!FIRST) {
        wgmma_wait<0>();
        keep_regs(p_buf[PREV]);
#pragma unroll
        for (int mm = 0; mm < MT; ++mm) fence_regs(o[mm]);
      }
      rescale(o[M]);
      if constexpr (MT == 1) {
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
          for (int e = 0; e < 4; ++e) p_buf[1][kk][e] = p_buf[0][kk][e];
      }
      v_prev = k_base + BN * RB;
      AXIAL_PHASE(4);
    };
    using Half0 = std::integral_constant<int, 0>;
    using Half1 = std::integral_constant<int, MT - 1>;
    {  // the last key tile first (it may be partial), then tiles 0 .. nkt - 2
      const int stage = tile_start(0);
      unit(std::true_type{}, Half0{}, std::true_type{}, stage, nkt - 1);
      if constexpr (MT == 2) unit(std::false_type{}, Half1{}, std::true_type{}, stage, nkt - 1);
    }
    for (int n = 1; n < nkt; ++n) {
      const int stage = tile_start(n);
      unit(std::false_type{}, Half0{}, std::false_type{}, stage, n - 1);
      if constexpr (MT == 2) unit(std::false_type{}, Half1{}, std::false_type{}, stage, n - 1);
    }
    // Drain: the last unit's P V (with LAG, once the last chunk's values, the oldest group in flight, are in).
    if constexpr (KVT) {
      if constexpr (LAG == 1) wait_group(i * nkt + nkt);  // (the group the next head's first chunk waits for too)
      if (gated && i == 0) {  // the gate's factors (this warpgroup's copies), first read below
        cp_async_wait<0>();
        warpgroup_sync(wg);
      }
    } else if constexpr (LAG == 1) {
      wait_chunk();
      fence_proxy_async();
      warpgroup_sync(wg);
    }
    wgmma_fence();
    pv_issue<T, HD, BN, RB>(o[MT - 1], p_buf[1], v_prev);
    wgmma_commit();
    wgmma_wait<0>();
    keep_regs(p_buf[1]);
#pragma unroll
    for (int mm = 0; mm < MT; ++mm) fence_regs(o[mm]);
    store_head(h, o, sm);
  }
  if constexpr (SPLIT == 0) {  // (SPLIT: the projection is out_gemm_sm90_kernel's)
    // out = O @ W_out^T + bias + x, the weight streamed through the rings' space.
    AXIAL_PHASE(5);
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();
    AXIAL_PHASE(6);
    Epilogue::template project<C, OTMA>(p, O, omap, ring, qbuf, OutEpilogue<T, EXTRAS>(p, xo, oo));
    AXIAL_PHASE(8);
  }
#ifdef AXIAL_FUSED_PHASE_CLOCK
  // (the first two blocks, and the last, which with a padded mask is a sequence with no present key:
  // its value sums in `sums`, its stores in drain+o)
  if ((blockIdx.x < 2 || blockIdx.x == gridDim.x - 1) && wtid == 0)
    printf("attn_sm90 clocks L %d block %d wg %d: prologue %lld tile-wait %lld s %lld softmax %lld pv-wait %lld "
           "drain+o %lld sync %lld sums %lld projection %lld\n", L, int(blockIdx.x), wg, phase_[0], phase_[1],
           phase_[2], phase_[3], phase_[4], phase_[5], phase_[6], phase_[7], phase_[8]);
#endif
#endif  // AXIAL_FUSED_SM90
}

template <class T, int D, int HEADS, bool EXTRAS = false, int TERMS = 0>
__global__ void __launch_bounds__(256, AttnSm90<T, D, HEADS, 0, TERMS>::MINB)
    attn_sm90_kernel(const __grid_constant__ PassParams p) {
#if AXIAL_FUSED_SM90
  pdl_entry();
  attn_sm90_body<T, D, HEADS, false, 0, EXTRAS, TERMS>(p);
#else
  __trap();
#endif
}

// The attention alone (AttnSm90's SPLIT, BM queries a block); out_gemm_sm90_kernel runs the output
// projection after it.
template <class T, int D, int HEADS, int BM, bool EXTRAS = false, int TERMS = 0>
__global__ void __launch_bounds__(256, 1) attn_sm90_split_kernel(const __grid_constant__ PassParams p) {
#if AXIAL_FUSED_SM90
  pdl_entry();
  attn_sm90_body<T, D, HEADS, false, BM, EXTRAS, TERMS>(p);
#else
  __trap();
#endif
}

// The output projection's weight by tensor-map copies (AttnSm90::OUT_TMA), and with KV_TMA the
// queries, keys and values; `omap` and `kvmap` as attn_sm90_body says.
template <class T, int D, int HEADS, bool EXTRAS = false, int TERMS = 0>
__global__ void __launch_bounds__(256, AttnSm90<T, D, HEADS, 0, TERMS>::MINB)
    attn_sm90_otma_kernel(const __grid_constant__ PassParams p, const __grid_constant__ CUtensorMap omap,
                          const __grid_constant__ CUtensorMap kvmap) {
#if AXIAL_FUSED_SM90
  pdl_entry();
  attn_sm90_body<T, D, HEADS, true, 0, EXTRAS, TERMS>(p, &omap, &kvmap);
#else
  __trap();
#endif
}


}  // namespace axial_fused
