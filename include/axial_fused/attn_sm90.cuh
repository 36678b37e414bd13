// Hopper (sm_90a) attention + output projection of the two-kernel path (its second kernel, "K2"), for
// head_dim 32 or 64 in 16-bit: S = q k^T and P V on wgmma with an online softmax, q/k/v read from the
// scratch that ln_qkv_sm90_kernel wrote ([S * L, 3D]: q | k | v per token). docs/design.md, "The Hopper
// attention kernel".
//
// One block of two warpgroups owns BM queries of one sequence (128 for D <= 256, else 64 so that the
// output tile fits). The warpgroups take alternate heads and run independently (named barriers, their
// own query buffers and key/value ring), so one's softmax overlaps the other's products. For its head h
// a warpgroup streams the sequence's keys and values in tiles of BN (128 at head_dim 32, 64 at 64)
// through a cp.async ring, each tile's k and v rows copied as they lie in the scratch (RB = 64 or 128
// bytes per row, swizzled): k is the K-major B operand of S = q k^T, v the N-major B operand of P V
// (TRANS_B), so nothing is transposed. Per tile and 64-query half: S (wgmma, q and k from shared
// memory), masked online softmax in registers (max and sum in log2 units, the scale folded into the
// exponent), O_h = O_h * alpha + P V (wgmma, P from registers). After the last tile O_h / rowsum goes
// into head h's columns of the SW128 output tile, and once every head is done the block runs
// out = O @ W_out^T + bias + x (wg_gemm, its weight ring in the key/value rings' space).
#pragma once
#include "axial_fused/wgmma.cuh"

namespace axial_fused {

template <class T, int D, int HEADS>
struct AttnSm90 {
  static constexpr int HD = D / HEADS;
  static constexpr int BM = D <= 256 ? 128 : 64, MT = BM / 64;  // queries per block; 64-row halves
  static constexpr int BN = HD == 32 ? 128 : 64;                // keys per tile
  static constexpr int RB = HD * 2;                              // bytes per row of one head's q, k or v
  static constexpr size_t OFFS = 2ull * BM * sizeof(int64_t);
  static constexpr size_t O_BYTES = size_t(BM) * D * 2;         // attention output tile, SW128
  static constexpr size_t Q_BYTES = size_t(BM) * RB;            // one head's queries
  static constexpr size_t STAGE = 2ull * BN * RB;               // one key tile: k rows, then v rows
  static constexpr size_t SMEM_MAX = 227 * 1024;
  // Per warpgroup: two query buffers (this head's, the next one's) and SW ring stages.
  static constexpr size_t FIXED = 1024 + OFFS + O_BYTES + 2 * 2 * Q_BYTES;
  static constexpr int SW_FIT = FIXED < SMEM_MAX ? int((SMEM_MAX - FIXED) / (2 * STAGE)) : 0;
  static constexpr int SW = SW_FIT > 4 ? 4 : SW_FIT;
  static constexpr size_t RING = 2 * SW * STAGE;
  // Output projection: WGM x WGN warpgroups over the BM x D output, 64-column weight chunks.
  static constexpr int WGM = MT, WGN = 2 / MT, OUT_BNW = 64;
  static constexpr size_t OUT_STAGE = size_t(WGN) * OUT_BNW * 128;
  static constexpr int OUT_S = int(RING / OUT_STAGE) < 6 ? int(RING / OUT_STAGE) : 6;
  static constexpr size_t SMEM = FIXED + RING;
  static constexpr bool SERVED = (HD == 32 || HD == 64) && D % (64 * WGN) == 0 && SW >= 2 && OUT_S >= 3;
  static_assert(!SERVED || (O_BYTES % 1024 == 0 && Q_BYTES % 1024 == 0 && STAGE % 1024 == 0), "1024-byte aligned tiles");
};

// cp.async.wait_group with a run-time count (0 to 3).
__device__ __forceinline__ void cp_async_wait_upto(int n) {
  if (n <= 0) cp_async_wait<0>();
  else if (n == 1) cp_async_wait<1>();
  else if (n == 2) cp_async_wait<2>();
  else cp_async_wait<3>();
}

template <class T, int D, int HEADS>
__global__ void __launch_bounds__(256, 1) attn_sm90_kernel(const __grid_constant__ PassParams p) {
#if AXIAL_FUSED_SM90
  using C = AttnSm90<T, D, HEADS>;
  static_assert(C::SERVED, "attn_sm90_kernel instantiated for a configuration it does not serve");
  constexpr int BM = C::BM, MT = C::MT, BN = C::BN, HD = C::HD, RB = C::RB, SW = C::SW, CH = RB / 16;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  int64_t* xo = reinterpret_cast<int64_t*>(smem_raw);  // BM row offsets into x (-1: past the end)
  int64_t* oo = xo + BM;                               // ... into out
  unsigned char* base = smem_raw + C::OFFS;
  base += (1024 - (smem_u32(base) & 1023)) & 1023;
  T* O = reinterpret_cast<T*>(base);
  unsigned char* qbuf = base + C::O_BYTES;                   // [wg][2] query buffers
  unsigned char* ring = qbuf + 2 * 2 * C::Q_BYTES;           // [wg][SW] key/value stages; later W_out's ring

  const int L = p.len, tid = threadIdx.x, wg = tid >> 7, wtid = tid & 127, warp = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int nqt = (L + BM - 1) / BM, nkt = (L + BN - 1) / BN;
  const int64_t s = blockIdx.x / nqt;
  const int q0 = int(blockIdx.x % nqt) * BM;
  const T* qkv = static_cast<const T*>(p.scratch) + s * L * (3 * D);

  for (int r = tid; r < BM; r += 256) {
    const bool ok = q0 + r < L;
    xo[r] = ok ? x_offset(p, s, q0 + r) : -1;
    oo[r] = ok ? out_offset(p, s, q0 + r) : -1;
  }

  // This warpgroup's heads h = 2 i + wg, i < nh; chunk j = i * nkt + kt is head i's key tile kt (with
  // the head's queries when kt = 0). LA = chunks in flight ahead of the one in use: at most SW - 1, and
  // at most nkt so a query buffer is refilled only after its head is done.
  const int nh = (HEADS - wg + 1) / 2, nj = nh * nkt, la = SW - 1 < nkt ? SW - 1 : nkt;
  unsigned char* wq = qbuf + wg * 2 * C::Q_BYTES;
  unsigned char* wring = ring + wg * SW * C::STAGE;
  // Rows [row0, row0 + n) of column block `col` of the scratch into an RB-row swizzled tile (rows past
  // L read as zeros).
  auto copy_rows = [&](unsigned char* dst, int row0, int n, int col) {
    for (int v = wtid; v < n * CH; v += 128) {
      const int r = v / CH, c = v % CH, row = row0 + r;
      const bool ok = row < L;
      cp_async16(dst + r * RB + ((c ^ swz_row<RB>(r)) << 4), ok ? qkv + int64_t(row) * (3 * D) + col + c * 8 : qkv, ok);
    }
  };
  auto load = [&](int j) {
    if (j < nj) {
      const int i = j / nkt, kt = j % nkt, h = 2 * i + wg;
      if (kt == 0) copy_rows(wq + (i & 1) * C::Q_BYTES, q0, BM, h * HD);
      unsigned char* st = wring + (j % SW) * C::STAGE;
      copy_rows(st, kt * BN, BN, D + h * HD);
      copy_rows(st + BN * RB, kt * BN, BN, 2 * D + h * HD);
    }
    cp_async_commit();  // possibly empty: one group per chunk
  };
  for (int j = 0; j < la; ++j) load(j);

  const uint32_t q_base = smem_u32(wq), r_base = smem_u32(wring);
  for (int i = 0; i < nh; ++i) {
    const int h = 2 * i + wg;
    float o[MT][HD / 2], m_run[MT][2], l_run[MT][2];
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int e = 0; e < HD / 2; ++e) o[m][e] = 0.f;
      m_run[m][0] = m_run[m][1] = -INFINITY;
      l_run[m][0] = l_run[m][1] = 0.f;
    }
    for (int kt = 0; kt < nkt; ++kt) {
      const int j = i * nkt + kt;
      cp_async_wait_upto(la - 1);  // this thread's copies of chunk j have landed
      fence_proxy_async();
      warpgroup_sync(wg);  // everyone's have; chunk j - 1's products are done, its stage is free
      load(j + la);
      const uint32_t k_base = r_base + (j % SW) * C::STAGE, v_base = k_base + BN * RB, qb = q_base + (i & 1) * C::Q_BYTES;
      const bool partial = kt * BN + BN > L;
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        float sc[BN / 2];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk)
          Wgmma<T, BN>::mma(sc, swz_desc<RB>(qb + m * 64 * RB + kk * 32), swz_desc<RB>(k_base + kk * 32), kk > 0);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(sc);
        if (partial) {  // keys past the end of the sequence
#pragma unroll
          for (int jb = 0; jb < BN / 8; ++jb)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              if (kt * BN + 8 * jb + 2 * t + (e & 1) >= L) sc[4 * jb + e] = -INFINITY;
        }
        // Online softmax: row g (e = 0, 1) and row g + 8 (e = 2, 3) of this warp's 16; a row's BN scores
        // are spread over the quad's four threads.
        float mx[2] = {-INFINITY, -INFINITY}, rs[2] = {0.f, 0.f}, mu[2], alpha[2];
#pragma unroll
        for (int jb = 0; jb < BN / 8; ++jb) {
          mx[0] = fmaxf(mx[0], fmaxf(sc[4 * jb], sc[4 * jb + 1]));
          mx[1] = fmaxf(mx[1], fmaxf(sc[4 * jb + 2], sc[4 * jb + 3]));
        }
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
          mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
          const float m_new = fmaxf(m_run[m][hr], mx[hr] * p.scale_log2);
          mu[hr] = m_new == -INFINITY ? 0.f : m_new;  // a row with nothing unmasked yet stays all-zero
          alpha[hr] = exp2_ftz(m_run[m][hr] - mu[hr]);
          m_run[m][hr] = m_new;
        }
#pragma unroll
        for (int jb = 0; jb < BN / 8; ++jb) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            sc[4 * jb + e] = exp2_ftz(fmaf(sc[4 * jb + e], p.scale_log2, -mu[e >> 1]));
            rs[e >> 1] += sc[4 * jb + e];
          }
        }
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) l_run[m][hr] = l_run[m][hr] * alpha[hr] + rs[hr];
#pragma unroll
        for (int jb = 0; jb < HD / 8; ++jb) {
          o[m][4 * jb] *= alpha[0];
          o[m][4 * jb + 1] *= alpha[0];
          o[m][4 * jb + 2] *= alpha[1];
          o[m][4 * jb + 3] *= alpha[1];
        }
        // O_h += P V: P from registers (all fragments built before the products start: an asynchronous
        // wgmma reads its A registers until it retires), V N-major, 16 keys per k-step.
        uint32_t pa[BN / 16][4];
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) acc_to_a<T>(pa[kk], sc, 0, kk);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
          WgmmaRS<T, HD>::template mma<1>(o[m], pa[kk], swz_desc<RB>(v_base + kk * 16 * RB), 1);
        wgmma_commit();
        wgmma_wait<0>();
        keep_regs(pa);
        fence_regs(o[m]);
      }
    }
    // O_h / rowsum into head h's columns of the output tile.
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      float inv[2];
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        float l = l_run[m][hr];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        inv[hr] = 1.f / l;
      }
      const int r0 = 64 * m + warp * 16 + g;
#pragma unroll
      for (int jb = 0; jb < HD / 8; ++jb) {
        const int c = h * HD + 8 * jb + 2 * t;
        store2(O + sw128_index<BM>(r0, c), o[m][4 * jb] * inv[0], o[m][4 * jb + 1] * inv[0]);
        store2(O + sw128_index<BM>(r0 + 8, c), o[m][4 * jb + 2] * inv[1], o[m][4 * jb + 3] * inv[1]);
      }
    }
  }

  // out = O @ W_out^T + bias + x, the weight streamed through the rings' space.
  cp_async_wait<0>();
  fence_proxy_async();
  __syncthreads();
  wg_gemm<T, C::WGM, C::WGN, C::OUT_BNW, D, D, C::OUT_S>(O, static_cast<const T*>(p.w_out), reinterpret_cast<T*>(ring),
                                                       OutEpilogue<T>(p, xo, oo), [] {});
#else
  __trap();
#endif
}

}  // namespace axial_fused
