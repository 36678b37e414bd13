// The block-level steps of the mma.sync kernels (sm_80 and later), from which both of their paths
// are built: layernorm_tile (LN of a tile into shared memory), block_gemm (a product with a weight
// streamed from global memory), attend_tile (online-softmax attention of a warp's 16 queries over a
// tile of keys), and the output projection with its bias + residual epilogue.
#pragma once
#include <type_traits>

#include "axial_fused/common/epilogue.cuh"
#include "axial_fused/common/layernorm.cuh"
#include "axial_fused/common/logits.cuh"
#include "axial_fused/mma_sync/traits.cuh"

namespace axial_fused {

// ---- step 1: LayerNorm of a tile into shared memory ---------------------------------------------

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

// With the output projection's epilogue (OutEpilogue: bias + residual) a warp loads all of its
// addends before its last k chunk's products, then folds them in and stores: out may alias x (the
// in-place column pass), so loads left in the pairs' order would each wait for the store before
// them, one load latency per pair (8 pairs a warp in the short-block form, 16 in the whole one).
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
      // An epilogue with addend() gets all of this warp's addends loaded before the last chunk's
      // products, then folded in and stored (put); see above.
      constexpr bool BATCH = HasAddend<std::decay_t<Epi>>::value;
      typename AddendOf<std::decay_t<Epi>, BATCH>::type add[BATCH ? NT : 1][2];
      const int r0 = rg * 16 + g;
      if constexpr (BATCH) {
        if (kc == KC - 1) load_addends<8 * NT>(epi, add, r0, n0, t);
      }
      warp_mma_nt<Tr::M, BK, NT>(acc, As + rg * 16 * lda + kc * BK, lda, ws + (it & 1) * WN * LDW + (cg * 64 + half) * LDW, LDW);
      if (kc == KC - 1) {
        if constexpr (BATCH) {

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

// (o holds the head's HDK padded columns; their last HDK - HD are zero and not stored.)
template <class Tr>
struct AttnState {
  float o[Tr::HDK / 8][4];
  float m[2];  // running max of the scaled logits (log2 units) of rows g and g+8
  float l[2];  // running sum of probabilities (this thread's columns only; reduced at the end)
  __device__ __forceinline__ void init() {
#pragma unroll
    for (int j = 0; j < Tr::HDK / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
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

// No logit terms: attend_tile's plain form.
struct NoTerms {
  static constexpr bool ACTIVE = false, BY_TILE = false;
  __device__ __forceinline__ float operator()(int, int) const { return 0.f; }
};

// The logit terms of a warp's two rows (rows g and g + 8): row i's query is LogitRow row[i],
// its sequence's keys start at key index lo[i] of the tile's numbering (0, or a packed block's row).
template <class T>
struct RowTerms {
  static constexpr bool ACTIVE = true, BY_TILE = false;
  const PassParams& p;
  LogitRow<T> row[2];
  int lo[2];
  __device__ __forceinline__ float operator()(int i, int col) const { return row[i].term(p, col - lo[i]); }
};

// The logit terms of a warp's two rows in one key tile of the two-kernel attention (one sequence of
// len keys, the tile's keys key0 .. key0 + KN - 1), added to a whole tile of scores at once (add):
// the tile's absent keys as bits (bit k: key key0 + k; from PassParams::key_bits, keys in order: one
// load a tile), and the thread's biases loaded together, STEP key blocks at a time, with the
// bias's dtype chosen once a tile: no branch and no dependent load per score.
template <class T>
struct TileTerms {
  static constexpr bool ACTIVE = true, BY_TILE = true;
  static constexpr int STEP = 4;  // key blocks (8 keys) whose biases are loaded together
  const PassParams& p;
  LogitRow<T> row[2];  // (their bias rows, key l at l; the mask is read from the bits)
  uint64_t absent;
  int key0, len;
  // The bits of the KN keys from key0 (a multiple of KN: 32 or 64) of the sequence whose key_bits row
  // is `bits` (null: no mask).
  template <int KN>
  static __device__ __forceinline__ uint64_t load_bits(const uint16_t* bits, int key0) {
    static_assert(KN == 32 || KN == 64, "key tiles of 32 or 64");
    if (bits == nullptr) return 0;
    if constexpr (KN == 64) return __ldg(reinterpret_cast<const unsigned long long*>(bits) + key0 / 64);
    return __ldg(reinterpret_cast<const unsigned int*>(bits) + key0 / 32);
  }
  // s (the tile's raw scores in the accumulator layout: s[j][e] is row g + 8 (e >> 1), key key0 + 8 j
  // + 2 t + (e & 1)) = s * scale_log2 + term. Keys at or past len hold -inf already and keep it.
  template <int NT>
  __device__ __forceinline__ void add(float (&s)[NT][4], float scale_log2) const {
    const int t = threadIdx.x & 3;
    const uint64_t a = absent >> (2 * t);  // bit 8 j + c: this thread's key 8 j + 2 t + c
    if (row[0].bias == nullptr) {
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[j][e] = fmaf(s[j][e], scale_log2, (a >> (8 * j + (e & 1))) & 1 ? kMaskedLogit : 0.f);
      return;
    }
    if (p.bias_f32) {
      add_bias<float>(s, scale_log2, a);
    } else {
      add_bias<T>(s, scale_log2, a);
    }
  }

 private:
  template <class E, int NT>
  __device__ __forceinline__ void add_bias(float (&s)[NT][4], float scale_log2, uint64_t a) const {
    const int c0 = key0 + 2 * (threadIdx.x & 3);
    const E* r[2] = {static_cast<const E*>(row[0].bias) + c0, static_cast<const E*>(row[1].bias) + c0};
    static_assert(NT % STEP == 0, "whole steps");
    // A tile inside the sequence, both rows' pairs aligned: one load a pair; else one a key, bounded.
    const auto run = [&](auto pairs) {
#pragma unroll
      for (int j0 = 0; j0 < NT; j0 += STEP) {
        float v[STEP][4];
#pragma unroll
        for (int j = 0; j < STEP; ++j)
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const int off = (j0 + j) * 8;
            if constexpr (decltype(pairs)::value) {
              const float2 b = load2(r[i] + off);
              v[j][2 * i] = b.x;
              v[j][2 * i + 1] = b.y;
            } else {
#pragma unroll
              for (int c = 0; c < 2; ++c)
                v[j][2 * i + c] = c0 + off + c < len ? Pack2<E>::to_float(r[i][off + c]) : 0.f;
            }
          }
#pragma unroll
        for (int j = 0; j < STEP; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            s[j0 + j][e] = fmaf(s[j0 + j][e], scale_log2,
                                (a >> (8 * (j0 + j) + (e & 1))) & 1 ? kMaskedLogit : v[j][e] * float(kLog2e));
      }
    };
    const bool aligned = ((reinterpret_cast<uintptr_t>(r[0]) | reinterpret_cast<uintptr_t>(r[1])) & (2 * sizeof(E) - 1)) == 0;
    if (key0 + NT * 8 <= len && aligned) {
      run(std::true_type{});
    } else {
      run(std::false_type{});
    }
  }
};

// Queries: 16 rows at Qs. Keys/values: KN (a tile, BN, unless the short-block form's keys are fewer)
// rows at Ks/Vs, key index of the first = key0; keys outside
// [lo[i], hi[i]) are masked for this thread's row i (g, g+8). Masked keys must hold finite values
// (their probability is 0, and 0 * NaN = NaN): fused_pass_kernel makes sure of it after phase 1.
// Ps: this warp's 16 x LDP scratch for the probabilities (fp32 modes).
// Terms (the mask and bias, Terms::ACTIVE): terms(i, col) is added to the scaled logit of this
// thread's row i and key `col` inside [lo[i], hi[i]) (LogitRow::term).
template <class Tr, int KN = Tr::BN, class Terms = NoTerms>
__device__ __forceinline__ void attend_tile(AttnState<Tr>& st, const typename Tr::T* Qs, int ldq,
                                            const typename Tr::T* Ks, const typename Tr::T* Vs, int ldkv,
                                            int key0, const int (&lo)[2], const int (&hi)[2], float scale_log2,
                                            typename Tr::T* Ps, const Terms& terms = Terms{}) {
  static_assert(KN % 16 == 0 && KN <= Tr::BN, "a key tile of 16 to BN keys");
  constexpr int NT = KN / 8;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float s[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
  warp_mma_nt<Tr::M, Tr::HDK, NT>(s, Qs, ldq, Ks, ldkv);

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
  if constexpr (Terms::BY_TILE) {  // the logits scaled and their terms added here: the rest takes scale 1
    terms.add(s, scale_log2);
    scale_log2 = 1.f;
  } else if constexpr (Terms::ACTIVE) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = key0 + j * 8 + 2 * t + (e & 1), r = e >> 1;
        if (col >= lo[r] && col < hi[r]) s[j][e] = fmaf(s[j][e], scale_log2, terms(r, col));
      }
    }
    scale_log2 = 1.f;
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
  for (int j = 0; j < Tr::HDK / 8; ++j) {
    st.o[j][0] *= alpha[0];
    st.o[j][1] *= alpha[0];
    st.o[j][2] *= alpha[1];
    st.o[j][3] *= alpha[1];
  }
  if constexpr (Tr::M == Mma::Tc16) {
    warp_mma_reg_nn<NT, Tr::HDK / 8>(st.o, s, Vs, ldkv);
  } else {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      store2(Ps + g * Tr::LDP + j * 8 + 2 * t, s[j][0], s[j][1]);
      store2(Ps + (g + 8) * Tr::LDP + j * 8 + 2 * t, s[j][2], s[j][3]);
    }
    __syncwarp();
    warp_mma_nn<Tr::M, KN, Tr::HDK / 8>(st.o, Ps, Tr::LDP, Vs, ldkv);
    __syncwarp();
  }
}

// ---- the output projection ----------------------------------------------------------------------

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

// Output projection of the BM x D attention output in `os` + bias + residual, rows addressed by the
// offsets from row_offsets (which must be visible to all threads: a barrier after writing them).
// (EXTRAS: the residual as PassParams::residual says.)
template <class Tr, bool PRE = false, int SPLIT = 1, bool EXTRAS = false>
__device__ __forceinline__ void out_projection(const PassParams& p, const typename Tr::T* os, typename Tr::T* ws,
                                               bool active, const int64_t* xo, const int64_t* oo) {
  using T = typename Tr::T;
  block_gemm<Tr, Tr::D, Tr::D, PRE, SPLIT>(os, Tr::LDX, static_cast<const T*>(p.w_out), ws, active,
                                           OutEpilogue<T, EXTRAS>(p, xo, oo));
}

}  // namespace axial_fused
