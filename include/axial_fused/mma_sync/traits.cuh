// The mma.sync kernels' derived constants for one (dtype, math mode, dim, heads): warps, tiles,
// shared-memory layout and bytes, from the choices of tile_size.h (mma_tile).
#pragma once
#include <cstddef>
#include <type_traits>

#include "axial_fused/mma_sync/tile_size.h"
#include "axial_fused/mma_sync/warp_mma.cuh"

namespace axial_fused {

template <class T_, Mma M_, int D_, int HEADS_>
struct Traits {
  using T = T_;
  static constexpr Mma M = M_;
  static constexpr int D = D_, HEADS = HEADS_, HD = D / HEADS;
  static constexpr int ESZ = sizeof(T);
  static constexpr MmaTile TILE = mma_tile(ESZ, D);
  static constexpr int PAD = 16 / ESZ;              // one 16-byte vector per smem row: no ldmatrix bank conflicts
  static constexpr int VEC = 16 / ESZ;              // elements per 16-byte copy
  static constexpr int BN = TILE.bn;                // keys per attention tile
  static constexpr int BK = TILE.bk;                // weight columns per streamed chunk (128 bytes)
  // A head's q / k / v tile is HDK columns wide: head_dim rounded up to the products' tile (k16 x n16
  // for 16-bit; tf32 takes k8), the extra columns zero (head_dim 8 and 24: AF2's extra-MSA stack,
  // AF3's single attention). The fused buffer's row holds q | k | v (| g) in sections of HW columns.
  static constexpr int HDK = M == Mma::Tc16 ? (HD + 15) / 16 * 16 : HD, HW = HEADS * HDK;
  static constexpr bool PADDED = HDK != HD;
  static constexpr int LDX = D + PAD, LDQKV = 3 * HW + PAD, LDH = HDK + PAD, LDW = BK + PAD, LDP = BN + PAD;
  static constexpr int LDQKVG = 4 * HW + PAD;  // the fused buffer's rows with the gate's block
  // Where column c of the QKV product (section c / D, head, offset) lives in the fused buffer's row.
  static constexpr __host__ __device__ int fused_col(int c) { return PADDED ? c / HD * HDK + c % HD : c; }

  // Warps: RG row groups of 16 tokens x CG column groups. In the projections the column groups take
  // different 64-wide output chunks; in attention they take different heads. Two column groups where
  // the two-kernel attention block still fits one block's shared memory on sm_90
  // (kMmaTwoColumnGroupBytes), else one. fp32 at large D uses two row groups (32-token tiles) to fit.
  static constexpr int RG = TILE.row_groups;
  static constexpr size_t k2_bytes(int cg) {
    const size_t w = 2ull * 64 * cg * LDW * ESZ, kv = 4ull * cg * BN * LDH * ESZ;
    return 16ull * RG * LDX * ESZ + 2ull * cg * 16 * RG * LDH * ESZ + (kv > w ? kv : w) +
           (M == Mma::Tc16 ? 0 : 16ull * RG * cg * LDP * ESZ);
  }
  static constexpr int CG =
      (HEADS % 2 == 0 && TILE.max_col_groups >= 2 && 2ull * 16 * RG * sizeof(int64_t) + k2_bytes(2) <= kMmaTwoColumnGroupBytes) ? 2 : 1;
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
  static constexpr size_t fused_bytes(int rows, bool gated = false) {
    return OFF_BYTES + X_BYTES + W_BYTES + P_BYTES + size_t(rows) * (gated ? LDQKVG : LDQKV) * ESZ;
  }
  static constexpr size_t K1_BYTES = X_BYTES + W_BYTES;
  static constexpr size_t K2_BYTES = OFF_BYTES + k2_bytes(CG);
  // attn_out_kernel's minimum blocks an SM (its __launch_bounds__; EXTRAS: its features' variant):
  // three where mma_tile allows it and three blocks' shared memory fits (docs/alternatives.md).
  static constexpr int k2_min_blocks(bool extras) {
    return M == Mma::Tc16 && HDK <= TILE.k2_three_max_hdk && K2_BYTES <= smem_per_block(3) &&
                   (extras || D <= TILE.k2_three_plain_max_dim)
               ? 3
               : 1;
  }

  static_assert(D % 64 == 0, "dim must be a multiple of 64");
  static_assert(D % HEADS == 0 && HD % 8 == 0 && HD <= 128, "head_dim must be a multiple of 8, at most 128");
  static_assert(std::is_same<T, float>::value == (M != Mma::Tc16), "tensor-core 16-bit mode iff 16-bit storage");
};

}  // namespace axial_fused
