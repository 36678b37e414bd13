// The mma.sync two-kernel pass (kPathTwoKernel; sm_80 and later; on Hopper for what the sm90 kernels
// do not serve), for sequences whose q/k/v do not fit one block's shared memory, or where spreading a
// sequence's queries over several blocks pays:
//   ln_qkv_kernel    LN + QKV for a tile of BM tokens -> the q/k/v scratch ([tokens, 3D]);
//   attn_out_kernel  attention for a tile of BM queries of one sequence (keys and values streamed from
//                    the scratch, two stages) + output projection + bias + residual. SM90 (16-bit on
//                    sm_90a): the same attention, with the output tile in the SW128 layout so that the
//                    projection runs on wgmma (wg_gemm).
#pragma once
#include "axial_fused/mma_sync/block_ops.cuh"
#include "axial_fused/sm90/wg_gemm.cuh"

namespace axial_fused {

// EXTRAS (has_extras): the q/k/v bias and the gate's block (nq = 4D); the plain variant compiles without them.
template <class Tr, bool EXTRAS = false>
__global__ void __launch_bounds__(Tr::THREADS) ln_qkv_kernel(const __grid_constant__ PassParams p) {
  pdl_entry();
  using T = typename Tr::T;
  constexpr int D = Tr::D;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* xs = reinterpret_cast<T*>(smem_raw);
  T* ws = reinterpret_cast<T*>(smem_raw + Tr::X_BYTES);
  T* qkv = static_cast<T*>(p.scratch);
  const T* qkv_bias = EXTRAS ? static_cast<const T*>(p.qkv_bias) : nullptr;
  const int nq = EXTRAS ? p.nq : 3 * D;
  const int64_t L = p.len, tokens = p.num_seq * L, t0 = int64_t(blockIdx.x) * Tr::BM;

  layernorm_tile<Tr>(p, xs, [&](int r) -> int64_t {
    const int64_t tk = t0 + r;
    return tk < tokens ? x_offset(p, tk / L, tk % L) : -1;
  });
  __syncthreads();
  auto put = [&](int r, int c, float a, float b) {
    if (t0 + r >= tokens) return;
    if (qkv_bias && c >= p.qkv_bias_from) {
      const float2 qb = load2(qkv_bias + (c - p.qkv_bias_from));
      a += qb.x;
      b += qb.y;
    }
    if (EXTRAS && c >= 3 * D) a = gate_of<T>(a), b = gate_of<T>(b);  // the gate's block: its factor
    store2(qkv + (t0 + r) * nq + c, a, b);
  };
  if (EXTRAS && p.gated) {  // the gate's block too: nq = 4D columns
    block_gemm<Tr, 4 * D, D>(xs, Tr::LDX, static_cast<const T*>(p.w_qkv), ws, true, put);
  } else {
    block_gemm<Tr, 3 * D, D>(xs, Tr::LDX, static_cast<const T*>(p.w_qkv), ws, true, put);
  }
}

// Shared-memory layout of attn_out_kernel. Generic: [row offsets][xs: BM x LDX][q][p][k/v, later W].
// SM90 (16-bit): the attention output tile is SW128 (1024-aligned) so the output projection runs on
// wgmma, with the weight streamed through the k/v region (wg_gemm, kAttnOutWg{Min,Max}Stages).
template <class Tr, bool SM90>
struct AttnOutLayout {
  static constexpr int OWGN = Tr::THREADS >= 256 ? 2 : 1;  // warpgroups (1 or 2), side by side along N (Hopper)
  static constexpr int OBNW = (Tr::D % 128 == 0 ? 128 : 64) / OWGN;  // columns per warpgroup and weight chunk
  static constexpr size_t O_STAGE = size_t(OWGN) * OBNW * 128, O_STAGES = kAttnOutWgMinStages * O_STAGE;
  // Weight stages of the output projection: the minimum, or as many (up to the maximum) as the k/v
  // region already holds (deeper look-ahead hides L2 latency; at D = 768 the region holds 4).
  static constexpr int KV_HOLDS = int(Tr::KV_BYTES / O_STAGE);
  static constexpr int OS = SM90 && KV_HOLDS > kAttnOutWgMinStages
                                ? (KV_HOLDS < kAttnOutWgMaxStages ? KV_HOLDS : kAttnOutWgMaxStages)
                                : kAttnOutWgMinStages;
  static constexpr size_t X = SM90 ? size_t(Tr::BM) * Tr::D * Tr::ESZ : Tr::X_BYTES;
  static constexpr size_t Q = SM90 ? (Tr::Q_BYTES + 1023) / 1024 * 1024 : Tr::Q_BYTES;
  static constexpr size_t P = Tr::P_BYTES;
  static constexpr size_t KV = SM90 && O_STAGES > Tr::KV_BYTES ? O_STAGES : Tr::KV_BYTES;
  static constexpr size_t BYTES = Tr::OFF_BYTES + (SM90 ? 1024 : 0) + X + Q + P + KV;
  static_assert(!SM90 || (Tr::M == Mma::Tc16 && Tr::BM == 64 && Tr::THREADS % 128 == 0 && BYTES <= kSmemPerBlock),
                "Hopper attn_out layout");
};

// EXTRAS: the mask, the bias, the gate and the optional residual (has_extras). MASK_MMA (EXTRAS,
// bfloat16 with padded head tiles; a mask and no bias): the mask on the tensor cores (below).
template <class Tr, bool SM90, bool EXTRAS = false, bool MASK_MMA = false>
__global__ void __launch_bounds__(Tr::THREADS, Tr::k2_min_blocks(EXTRAS))
    attn_out_kernel(const __grid_constant__ PassParams p) {
  static_assert(!MASK_MMA || (EXTRAS && Tr::PADDED && std::is_same<typename Tr::T, __nv_bfloat16>::value),
                "the mask on the tensor cores: bfloat16 with padded head tiles");
  pdl_entry();
#if !AXIAL_FUSED_SM90
  if constexpr (SM90) {
    __trap();
    return;
  }
#endif
  using T = typename Tr::T;
  using Lay = AttnOutLayout<Tr, SM90>;
  constexpr int D = Tr::D, HD = Tr::HD, HDK = Tr::HDK, BM = Tr::BM, BN = Tr::BN, LDH = Tr::LDH, VEC = Tr::VEC;
  constexpr int CG = Tr::CG;
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
  const int ld = EXTRAS ? p.nq : 3 * D;  // scratch row length: 3D, or 4D with the gate
  const T* base = static_cast<const T*>(p.scratch) + s * L * ld;

  row_offsets<Tr>(p, xo, oo, [&](int r, int64_t& ss, int64_t& l) {
    ss = s;
    l = q0 + r;
    return q0 + r < L;
  });

  // The mask on the tensor cores (MASK_MMA): column HD of a head's q rows holds 1.0 and of its k rows
  // kMaskedRaw for an absent key (0 for a present one), so that S's product adds kMaskedRaw to an
  // absent key's raw score, which is then kMaskedRaw exactly (|q.k| < 2^76), as in the Hopper
  // attention kernel (kTermMaskMma): no instruction per score.
  const uint16_t* mask_bits = MASK_MMA ? p.key_bits + s * (p.kp / 16) : nullptr;

  const int rw = q0 + rg * 16;
  const bool active = rw < L;
  const int lo[2] = {0, 0}, hi[2] = {L, L};
  const bool terms = EXTRAS && !MASK_MMA && (p.mask != nullptr || p.bias != nullptr), gated = EXTRAS && p.gated;
  const int qa = min(rw + ((threadIdx.x & 31) >> 2), L - 1), qb = min(qa + 8, L - 1);  // this thread's queries
  const SeqTerms<T> seq = EXTRAS ? SeqTerms<T>(p, s) : SeqTerms<T>();
  const uint16_t* key_bits = EXTRAS && !MASK_MMA && p.key_bits ? p.key_bits + s * (p.kp / 16) : nullptr;  // the mask
  AttnState<Tr> st;
  // Head group hg's key tile kt, in stage buf: this warp's queries against it for head hg CG + cg;
  // after the last tile the head's output (times sigmoid(g), the gate's factor in the query's
  // scratch row) into the output tile.
  const auto step = [&](int hg, int kt, int buf) {
    const int h = hg * CG + cg;
    if (!active || h >= Tr::HEADS) return;
    if (kt == 0) st.init();
    const T* ks = kv + (buf * CG + cg) * 2 * BN * LDH;
    const T* qt = qs + ((hg & 1) * CG + cg) * BM * LDH + rg * 16 * LDH;
    if (terms) {
      const TileTerms<T> tt{p, {seq.row(p, h, qa), seq.row(p, h, qb)}, TileTerms<T>::template load_bits<BN>(key_bits, kt * BN),
                            kt * BN, L};
      attend_tile<Tr>(st, qt, LDH, ks, ks + BN * LDH, LDH, kt * BN, lo, hi, p.scale_log2, ps + warp * 16 * Tr::LDP, tt);
    } else {
      attend_tile<Tr>(st, qt, LDH, ks, ks + BN * LDH, LDH, kt * BN, lo, hi, p.scale_log2, ps + warp * 16 * Tr::LDP);
    }
    if (kt == nkt - 1) {
      auto put = [&](int r, int c, float a, float b) {
        if (gated) {
          const int q = min(rw + r, L - 1);
          const float2 gv = load2(base + int64_t(q) * ld + 3 * D + h * HD + c);
          a *= gv.x;
          b *= gv.y;
        }
        if constexpr (SM90) {
          store2(xs + sw128_index<BM>(rg * 16 + r, h * HD + c), a, b);
        } else {
          store2(xs + (rg * 16 + r) * Tr::LDX + h * HD + c, a, b);
        }
      };
      st.store_to(put);
    }
  };

  // Head tiles: CH real 16-byte chunks a row, CHK with the padding (head_dim rounded up to 16).
  constexpr int CH = HD / VEC, CHK = HDK / VEC;
  static_assert(Tr::HEADS % CG == 0, "whole head groups");
  // f(v) for v < N, v = threadIdx.x + i THREADS: a fixed number of steps, each predicated.
  const auto slots = [](auto n, auto&& f) {
    constexpr int N = decltype(n)::value;
#pragma unroll
    for (int i = 0; i < (N + Tr::THREADS - 1) / Tr::THREADS; ++i) {
      const int v = threadIdx.x + i * Tr::THREADS;
      if (N % Tr::THREADS == 0 || v < N) f(v);
    }
  };
  // The padding columns of every q, k and v row of both stages, never copied over: zero (q's column
  // HD 1.0 with MASK_MMA, and k's column HD left to put_mask, a tile at a time), written once; the
  // block barrier before the first tile publishes them.
  if constexpr (CHK > CH) {
    constexpr int QROWS = 2 * CG * BM, ROWS = QROWS + 2 * CG * 2 * BN;
    slots(std::integral_constant<int, ROWS * (CHK - CH)>{}, [&](int v) {
      const int row = v / (CHK - CH), c = HD + v % (CHK - CH) * VEC;
      const bool q = row < QROWS, k = !q && ((row - QROWS) / BN) % 2 == 0;  // (stage rows: k tile, v tile)
      if (MASK_MMA && k && c == HD) return;
      T* dst = q ? qs + row * LDH + c : kv + (row - QROWS) * LDH + c;
      st_shared_16(smem_u32(dst), make_uint4(MASK_MMA && q && c == HD ? kOneBf16Bits : 0u, 0u, 0u, 0u));
    });
  }
  // Head group hg's key tile kt into stage buf (with the group's queries when kt = 0).
  auto load = [&](int hg, int kt, int buf) {
    if (kt == 0) {
      slots(std::integral_constant<int, CG * BM * CH>{}, [&](int v) {
        const int c2 = v / (BM * CH), r = v / CH % BM, c = v % CH * VEC, row = q0 + r;
        const bool ok = row < L;
        cp_async16(qs + (((hg & 1) * CG + c2) * BM + r) * LDH + c,
                   ok ? base + int64_t(row) * ld + (hg * CG + c2) * HD + c : base, ok);
      });
    }
    slots(std::integral_constant<int, CG * BN * CH>{}, [&](int v) {
      const int c2 = v / (BN * CH), r = v / CH % BN, c = v % CH * VEC, row = kt * BN + r;
      const bool ok = row < L;
      T* ks = kv + ((buf * CG + c2) * 2 * BN + r) * LDH + c;
      const T* src = ok ? base + int64_t(row) * ld + D + (hg * CG + c2) * HD + c : base;
      cp_async16(ks, src, ok);
      cp_async16(ks + BN * LDH, ok ? src + D : base, ok);
    });
    cp_async_commit();
  };
  // MASK_MMA: a tile's absent bits, loaded before the step ahead of it and written into k's column HD
  // of its stage after that step (the load's latency behind the step's attention).
  const auto tile_bits = [&](int kt) -> uint64_t {
    return MASK_MMA ? __ldg(reinterpret_cast<const unsigned long long*>(mask_bits) + kt * BN / 64) : 0;
  };
  const auto put_mask = [&](uint64_t bits, int buf) {
    static_assert(!MASK_MMA || BN == 64, "a tile's bits in one word");
    slots(std::integral_constant<int, CG * BN>{}, [&](int v) {
      const int c2 = v / BN, r = v % BN;
      st_shared_16(smem_u32(kv + ((buf * CG + c2) * 2 * BN + r) * LDH + HD),
                   make_uint4(bits >> r & 1 ? kMaskedRawBf16Bits : 0u, 0u, 0u, 0u));
    });
  };
  load(0, 0, 0);
  if (MASK_MMA) put_mask(tile_bits(0), 0);
  // (hg, kt): this step's head group and key tile, (ng, nk) the next one's; stage it & 1.
  for (int it = 0, hg = 0, kt = 0; hg < HG; ++it) {
    const int ng = kt + 1 == nkt ? hg + 1 : hg, nk = kt + 1 == nkt ? 0 : kt + 1;
    uint64_t next_bits = 0;
    if (ng < HG) {
      load(ng, nk, (it + 1) & 1);
      if (MASK_MMA) next_bits = tile_bits(nk);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    step(hg, kt, it & 1);
    if (MASK_MMA && ng < HG) put_mask(next_bits, (it + 1) & 1);
    __syncthreads();
    hg = ng;
    kt = nk;
  }
  if constexpr (SM90) {
    wg_gemm<T, 1, Lay::OWGN, Lay::OBNW, D, D, Lay::OS>(xs, static_cast<const T*>(p.w_out), kv,
                                                       OutEpilogue<T, EXTRAS>(p, xo, oo));
  } else {
    out_projection<Tr, false, 1, EXTRAS>(p, xs, kv, active, xo, oo);
  }
}

}  // namespace axial_fused
