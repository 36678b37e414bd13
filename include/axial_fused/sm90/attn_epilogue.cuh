// The epilogue of the Hopper attention kernel (attn_kernel.cuh): each head's output, normalised by
// its softmax's row sums (and times the gate's factors), into its columns of the block's output tile
// or (SPLIT) of the scratch; a head with no present key's output from its value sums; the output
// projection. And the Hopper fused kernel's store of a head's output (fused_kernel.cuh).
#pragma once
#include "axial_fused/sm90/wg_gemm.cuh"

namespace axial_fused {

// The fused kernel's store of a head's output: this thread's rows r0 and r1 = r0 + 8 of a 64 x HD
// accumulator o (wgmma layout; t: its column pair in the quad) times inv0 and inv1 (1 / rowsum) into
// head h's columns of the SW128 output tile O (BM rows).
template <class T, int BM, int HD>
__device__ __forceinline__ void store_head_rows(T* O, const float (&o)[HD / 2], int r0, int r1, int h, int t,
                                                float inv0, float inv1) {
#pragma unroll
  for (int jb = 0; jb < HD / 8; ++jb) {
    const int c = h * HD + 8 * jb + 2 * t;
    store2(O + sw128_index<BM>(r0, c), o[4 * jb] * inv0, o[4 * jb + 1] * inv0);
    store2(O + sw128_index<BM>(r1, c), o[4 * jb + 2] * inv1, o[4 * jb + 3] * inv1);
  }
}

// T, D, HD: the pass; BM: the block's queries (MT = BM / 64 halves); SPLIT, EXTRAS: as attn_sm90_body.
// The kernel's registers (row offsets, thread coordinates) are passed in rather than held: held here,
// they shift the kernel's machine code.
template <class T, int D, int HD, int BM, int SPLIT, bool EXTRAS>
struct AttnEpilogue {
  static constexpr int MT = BM / 64, HEADS = D / HD;

  // The gate's factors (K1 stores sigmoid(g) after q, k and v in the scratch's rows) of warpgroup wg's
  // heads into their places in the output tile, by cp.async (not committed): each head's output is
  // multiplied by them as it is stored there (store_head), by the threads that store it.
  __device__ __forceinline__ static void gate_copy(T* O, const T* qkv, int ld, int q0, int L, int wg, int wtid) {
    constexpr int PPR = HD / 8;  // 16-byte pieces of a head's row
#pragma unroll
    for (int i = 0; i < (HEADS + 1) / 2; ++i) {
      const int h = 2 * i + wg;
      if (h < HEADS) {
#pragma unroll
        for (int v = wtid; v < BM * PPR; v += 128) {
          const int r = v / PPR, c = h * HD + (v % PPR) * 8;
          const bool ok = q0 + r < L;
          cp_async16_shared(smem_u32(O + sw128_index<BM>(r, c)), ok ? qkv + int64_t(q0 + r) * ld + 3 * D + c : qkv, ok);
        }
      }
    }
  }

  // A sequence with no present key (`uniform`): every logit is kMaskedRaw, so each query attends
  // uniformly to the L keys and head h's output is the same for all queries: its values' column sums
  // over 1 / L. The warpgroup sums them on the CUDA cores (no key tiles, no S product, no softmax): a
  // thread one 16-byte piece of every RPS-th row, eight rows' loads issued before their sums, reduced
  // across the lanes, then the warps through this warpgroup's ring (idle in such a block), into this
  // thread's accumulator entries of each head's output (o[m][4 jb + 2 hr + e] holds column
  // 8 jb + 2 t + e), which store_head divides by L. The gate's factors (gate_copy) are waited for
  // before the barrier, so that every thread's copies are visible to store_head.
  // (qkv: the sequence's scratch rows, ld apart; part: [4 warps][HD] floats of this warpgroup;
  // wtid, warp, lane, t: this thread's place in it.)
  __device__ __forceinline__ static void value_sums(const T* qkv, int ld, int L, float* part, int wg, int wtid,
                                                    int warp, int lane, int t, int h, float (&o)[MT][HD / 2]) {
    constexpr int PPR = HD / 8, RPS = 128 / PPR, BATCH = 8;
    float acc[8] = {};
    const T* v = qkv + 2 * D + h * HD + (wtid % PPR) * 8;
    for (int r0 = wtid / PPR; r0 < L; r0 += BATCH * RPS) {
      uint4 u[BATCH];
#pragma unroll
      for (int k = 0; k < BATCH; ++k) {
        const int r = r0 + k * RPS;
        u[k] = r < L ? *reinterpret_cast<const uint4*>(v + int64_t(r) * ld) : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int k = 0; k < BATCH; ++k) {
        const uint32_t w[4] = {u[k].x, u[k].y, u[k].z, u[k].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 f = Pack2<T>::unpack(*reinterpret_cast<const typename Pack2<T>::type*>(&w[j]));
          acc[2 * j] += f.x, acc[2 * j + 1] += f.y;
        }
      }
    }
#pragma unroll
    for (int off = PPR; off < 32; off *= 2)
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], off);
    if (lane < PPR) {
#pragma unroll
      for (int e = 0; e < 8; ++e) part[warp * HD + lane * 8 + e] = acc[e];
    }
    cp_async_wait<0>();
    warpgroup_sync(wg);
#pragma unroll
    for (int jb = 0; jb < HD / 8; ++jb)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int c = 8 * jb + 2 * t + e;
        const float sum = part[c] + part[HD + c] + part[2 * HD + c] + part[3 * HD + c];
#pragma unroll
        for (int m = 0; m < MT; ++m) o[m][4 * jb + e] = o[m][4 * jb + 2 + e] = sum;
      }
    warpgroup_sync(wg);  // (the partial sums read before the next head's are written)
  }

  // Head h's output O_h / rowsum (sm.finalize) into its columns of the SW128 output tile O (SPLIT: of
  // the scratch's q, rows ld apart from qkv, as 16-byte vectors; rows past the sequence's end L are
  // not written). q0: the block's first query; warp, g, t: this thread's warp, row and column in it.
  template <class Softmax>
  __device__ __forceinline__ static void store_head(const PassParams& p, T* O, const T* qkv, int ld, int q0, int L,
                                                    int warp, int g, int t, int h, const float (&o)[MT][HD / 2],
                                                    const Softmax& sm) {
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      float inv[2];
      sm.finalize(m, inv);
      const int r0 = 64 * m + warp * 16 + g;
      if constexpr (SPLIT != 0) {
        // With the gate: gf[e] = sigmoid(g) of output element e, from the query's scratch row.
        float gf[HD / 2];
#pragma unroll
        for (int e = 0; e < HD / 2; ++e) gf[e] = 1.f;
        if constexpr (EXTRAS) {
          if (p.gated) {
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
              const int q = q0 + r0 + 8 * hr < L ? q0 + r0 + 8 * hr : L - 1;
#pragma unroll
              for (int jb = 0; jb < HD / 8; ++jb) {
                const float2 gv = load2(qkv + int64_t(q) * ld + 3 * D + h * HD + 8 * jb + 2 * t);
                gf[4 * jb + 2 * hr] = gv.x;
                gf[4 * jb + 2 * hr + 1] = gv.y;
              }
            }
          }
        }
        float ov[HD / 2];  // (a copy: writing the accumulators themselves makes ptxas fence the wgmma)
#pragma unroll
        for (int e = 0; e < HD / 2; ++e) ov[e] = o[m][e] * inv[(e >> 1) & 1] * gf[e];
        T* const o_rows = const_cast<T*>(qkv) + int64_t(q0) * ld;
        auto put = [&](int r, int c, uint4 v) {
          if (q0 + r < L) st_global_16(o_rows + int64_t(r) * ld + c, v);
        };
        store_vec8<T, HD>(ov, r0, h * HD, t, put);
      } else {
#pragma unroll
        for (int jb = 0; jb < HD / 8; ++jb) {
          const int c = h * HD + 8 * jb + 2 * t;
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            T* const at = O + sw128_index<BM>(r0 + 8 * hr, c);
            float f0 = inv[hr], f1 = inv[hr];
            if constexpr (EXTRAS) {
              if (p.gated) {  // the gate's factors, copied here (gate_copy)
                const float2 gv = load2(at);
                f0 *= gv.x, f1 *= gv.y;
              }
            }
            store2(at, o[m][4 * jb + 2 * hr] * f0, o[m][4 * jb + 2 * hr + 1] * f1);
          }
        }
      }
    }
  }

  // out = O @ W_out^T + bias + x (epi: OutEpilogue), the weight streamed through the rings' space at
  // `ring` (C: the kernel's AttnSm90, its WGM x WGN warpgroups, OUT_BNW-wide chunks, OUT_S stages).
  // OTMA: the weight by tensor-map copies from `omap`, its full / empty mbarriers at `qbuf` (the first
  // warpgroup's queries, done with).
  template <class C, bool OTMA, class Epi>
  __device__ __forceinline__ static void project(const PassParams& p, T* O, const void* omap, unsigned char* ring,
                                                 unsigned char* qbuf, Epi&& epi) {
    if constexpr (OTMA) {
      const uint32_t ofull = smem_u32(qbuf), oempty = ofull + 64;
      out_tma_barriers<C::OUT_S>(ofull, oempty);
      wg_gemm_tma<T, C::WGM, C::WGN, C::OUT_BNW, D, D, C::OUT_S, C::OUT_KW>(O, omap, smem_u32(ring), ofull, oempty,
                                                                           epi);
    } else {
      wg_gemm<T, C::WGM, C::WGN, C::OUT_BNW, D, D, C::OUT_S, C::OUT_KW>(O, static_cast<const T*>(p.w_out),
                                                                       reinterpret_cast<T*>(ring), epi);
    }
  }
};

}  // namespace axial_fused
