// The mma.sync fused pass (kPathFused; sm_80 and later, every dtype): one block owns `group` whole
// sequences, at most the rows its shared memory holds (Traits::fused_bytes).
//   1. LayerNorm and q/k/v of every token of the group, tile by tile, into shared memory;
//   2. for each tile of BM queries: the attention (column groups of warps take alternate heads; keys
//      are the group's tokens, masked to the query's own sequence), then the output projection with
//      bias and residual straight to out.
// Nothing but x, the weights and out (and the mask and bias, where given) touches global memory.
//
// The short-block form (blocks of at most BM / 2 tokens, e.g. one 32-token sequence a block). The
// whole form would leave the row groups past BM / 2 without work in the attention and the
// output projection, and compute LayerNorm and q/k/v of padding rows with them: warps rg = 2, 3 of
// RG = 4, which are warps 2, 3, 6, 7, the same two of the SM's four schedulers (warp % 4), so half
// the SM's issue slots and tensor cores would wait while the other half ran every product of the
// block. The short-block form gives every warp a share of the real rows: the products in 16 x 32
// parts (block_gemm's SPLIT = 2), the attention one head a warp (NW / (RG / 2) head slots instead
// of CG) over one tile of BM / 2 keys (every key of the block; a 64-key tile would be half masked
// padding at L = 32), the LayerNorm of BM / 2 rows.
#pragma once
#include "axial_fused/mma_sync/block_ops.cuh"

namespace axial_fused {

// EXTRAS: the optional features (has_extras); the plain variant compiles without them.
template <class Tr, bool EXTRAS = false>
__global__ void __launch_bounds__(Tr::THREADS) fused_pass_kernel(const __grid_constant__ PassParams p) {
  pdl_entry();
  using T = typename Tr::T;
  constexpr int D = Tr::D, HD = Tr::HD, HDK = Tr::HDK, HW = Tr::HW, BM = Tr::BM, BN = Tr::BN, LDQKV = Tr::LDQKV;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  int64_t* xo = reinterpret_cast<int64_t*>(smem_raw);             // BM row offsets into x
  int64_t* oo = xo + BM;                                          // BM row offsets into out
  unsigned char* base = smem_raw + Tr::OFF_BYTES;
  T* xs = reinterpret_cast<T*>(base);                             // BM x LDX
  T* ws = reinterpret_cast<T*>(base + Tr::X_BYTES);               // 2 x WN x LDW
  T* ps = reinterpret_cast<T*>(base + Tr::X_BYTES + Tr::W_BYTES);                 // NW x 16 x LDP
  T* qkv = reinterpret_cast<T*>(base + Tr::X_BYTES + Tr::W_BYTES + Tr::P_BYTES);  // rows_alloc x ldq
  // q | k | v (| g: the gate's pre-activation, PassParams::gated) of each token, rows ldq apart, in
  // sections of HW columns, a head's HD columns at h * HDK of its section (Traits::fused_col).
  const bool gated = EXTRAS && p.gated;
  const int ldq = gated ? Tr::LDQKVG : LDQKV;
  const T* qkv_bias = EXTRAS ? static_cast<const T*>(p.qkv_bias) : nullptr;
  auto put_qkv = [&](int r, int c, float a, float b) {
    if (qkv_bias && c >= p.qkv_bias_from) {
      const float2 qb = load2(qkv_bias + (c - p.qkv_bias_from));
      a += qb.x;
      b += qb.y;
    }
    store2(qkv + r * ldq + Tr::fused_col(c), a, b);  // (a pair never straddles two heads: HD is even)
  };

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
  // A block is a chain of latencies (each product would start by waiting for its first weight
  // chunk), so each weight's first chunk is requested before the work that precedes its product,
  // and the first query tile's offsets are computed here, beside the first loads.
  const T* w_qkv = static_cast<const T*>(p.w_qkv);
  request_chunk<Tr, 3 * D, D>(w_qkv, ws, 0);
  if constexpr (Tr::PADDED) {  // the heads' padding columns, which no product writes, are zero
    const int slots = (gated ? 4 : 3) * Tr::HEADS, per_row = slots * (HDK - HD);
    for (int i = threadIdx.x; i < rows_alloc * per_row; i += Tr::THREADS) {
      const int r = i / per_row, j = i % per_row;
      qkv[r * ldq + (j / (HDK - HD)) * HDK + HD + j % (HDK - HD)] = Pack2<T>::make(0.f, 0.f).x;
    }
  }
  offsets(0);
  // The first tile's LayerNorm takes its rows' offsets from offsets(0) (the same BM rows: xo[r] is row
  // r's x offset, -1 past the end) instead of dividing again, at the price of this barrier.
  __syncthreads();
  AXIAL_PHASE(6);  // ("setup": the first requests, the offsets' divisions and this barrier)
  // Phase 1: q/k/v of every token of the group (padding rows are zero, so masked keys are finite).
  const bool short_block = rows <= BM / 2;  // (block-uniform)
  if (short_block) {  // one tile of BM / 2 rows (nothing reads q/k/v rows past them: phase 2's keys)
    layernorm_tile<Tr, BM / 2>(p, xs, [&](int r) -> int64_t { return xo[r]; });
    __syncthreads();
    AXIAL_PHASE(0);
    if (gated) {
      block_gemm<Tr, 4 * D, D, true, 2>(xs, Tr::LDX, w_qkv, ws, true, put_qkv);
    } else {
      block_gemm<Tr, 3 * D, D, true, 2>(xs, Tr::LDX, w_qkv, ws, true, put_qkv);
    }
    AXIAL_PHASE(1);
  } else {
    for (int r0 = 0; r0 < rows_alloc; r0 += BM) {
      if (r0 > 0) request_chunk<Tr, 3 * D, D>(w_qkv, ws, 0);  // (the last product ended synchronised)
      layernorm_tile<Tr>(p, xs, [&](int r) -> int64_t {
        const int rr = r0 + r;
        if (r0 == 0) return xo[r];
        return rr < rows ? x_offset(p, s0 + rr / L, rr % L) : -1;
      });
      __syncthreads();
      AXIAL_PHASE(0);
      auto put = [&](int r, int c, float a, float b) { put_qkv(r0 + r, c, a, b); };
      if (gated) {
        block_gemm<Tr, 4 * D, D, true>(xs, Tr::LDX, w_qkv, ws, true, put);
      } else {
        block_gemm<Tr, 3 * D, D, true>(xs, Tr::LDX, w_qkv, ws, true, put);
      }
      AXIAL_PHASE(1);
    }
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
      T* k = qkv + (i / (D / 2)) * ldq + HW + Tr::fused_col(2 * (i % (D / 2)));
      const float2 v = load2(k + HW);
      if (!(isfinite(v.x) && isfinite(v.y))) {
        store2(k, nan, nan);
        store2(k + HW, 0.f, 0.f);
      }
    }
    __syncthreads();
  }

  // Phase 2: attention for BM queries at a time (column groups take alternate heads), then the
  // output projection. In the short-block form the first RG / 2 row groups take the rows and every
  // warp of them one of NW / (RG / 2) head slots.
  const int arg = short_block ? warp % (Tr::RG / 2) : rg, slot = short_block ? warp / (Tr::RG / 2) : cg;
  const int slots = short_block ? Tr::NW / (Tr::RG / 2) : Tr::CG;
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
      const bool terms = EXTRAS && (p.mask != nullptr || p.bias != nullptr);
      for (int h = slot; h < Tr::HEADS; h += slots) {
        AttnState<Tr> st;
        st.init();
        auto attend = [&](const auto& tm) {
          if (short_block) {  // all the block's keys in one tile of BM / 2 (<= BN) keys, from key 0
            static_assert(BM / 2 <= BN, "the short-block form's key tile");
            attend_tile<Tr, BM / 2>(st, qkv + rw * ldq + h * HDK, ldq, qkv + HW + h * HDK, qkv + 2 * HW + h * HDK,
                                    ldq, 0, lo, hi, p.scale_log2, ps + warp * 16 * Tr::LDP, tm);
          } else {
            for (int kt = klo; kt < khi; kt += BN) {
              attend_tile<Tr>(st, qkv + rw * ldq + h * HDK, ldq, qkv + kt * ldq + HW + h * HDK,
                              qkv + kt * ldq + 2 * HW + h * HDK, ldq, kt, lo, hi, p.scale_log2,
                              ps + warp * 16 * Tr::LDP, tm);
            }
          }
        };
        if (terms) {
          const SeqTerms<T> seq_a(p, s0 + ra / L), seq_b(p, s0 + rb / L);  // this thread's rows' sequences
          attend(RowTerms<T>{p, {seq_a.row(p, h, ra % L), seq_b.row(p, h, rb % L)}, {lo[0], lo[1]}});
        } else {
          attend(NoTerms{});
        }
        if (gated) {  // o * sigmoid(g), g in the query row's gate columns
          st.store_to([&](int r, int c, float a, float b) {
            const float2 gv = load2(qkv + (rw + r) * ldq + 3 * HW + h * HDK + c);
            store2(xs + (arg * 16 + r) * Tr::LDX + h * HD + c, a * gate_of<T>(gv.x), b * gate_of<T>(gv.y));
          });
        } else {
          st.store(xs + arg * 16 * Tr::LDX + h * HD, Tr::LDX);
        }
      }
    }
    AXIAL_PHASE(2);
    __syncthreads();
    AXIAL_PHASE(3);
    if (short_block) {
      out_projection<Tr, true, 2, EXTRAS>(p, xs, ws, active, xo, oo);
    } else {
      out_projection<Tr, true, 1, EXTRAS>(p, xs, ws, active, xo, oo);
    }
    AXIAL_PHASE(4);
  }
#ifdef AXIAL_FUSED_PHASE_CLOCK
  if (blockIdx.x < 2 && (threadIdx.x & 31) == 0 && warp < 2)  // (warp 1: the second row group)
    printf("fused clocks block %d warp %d: setup %lld ln %lld qkv %lld pre-attention %lld attention %lld sync %lld "
           "out %lld\n",
           int(blockIdx.x), warp, phase_[6], phase_[0], phase_[1], phase_[5], phase_[2], phase_[3], phase_[4]);
#endif
}

}  // namespace axial_fused
