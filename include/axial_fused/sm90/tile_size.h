// The sm_90a kernels' tuning, one constexpr function a kernel: the per-specialization choices (tile
// widths, stages, clusters, panels) and the limits the planner and launcher read. Each kernel's traits
// struct (QkvSm90, AttnSm90, OutGemmSm90, FusedSm90) takes its row from here and derives the shared-
// memory layout from it; `python -m axial_fused.info --tiles` prints what each compiled
// specialization gets. Why each choice wins: docs/performance.md and docs/alternatives.md.
#pragma once
#include "axial_fused/common/hardware.h"

namespace axial_fused {

// ---- K1: LayerNorm + QKV (ln_qkv_sm90[_tma]_kernel) ------------------------------------------------
// The three-block form (64-wide chunks, up to 8 stages) exists at D up to this; the planner takes it
// where its waves fill the SMs better than two blocks' (KernelPlan::k1_per_sm).
constexpr int kQkvThreeMaxDim = 128;
// The cluster form (two blocks sharing each weight chunk by TMA multicast: half the weight's L2
// reads) from this D on, where the weight is a large share of the traffic.
constexpr int kQkvClusterMinDim = 512;
constexpr int kQkvCluster = 2;  // blocks a cluster

struct QkvSm90Tile {
  int kw;             // weight chunk depth in columns (32: 64-byte rows, SW64)
  bool cluster;       // the TMA cluster form
  int min_stages, max_stages;  // the weight ring: as many stages as fit, within these
  int rs_panels;      // register-A form: 64-column panels of A held in registers (where the ring is held by A)
  int rs_min_stages;  // ... taken where A leaves room for at least this many 8 KB stages but fewer than
  int rs_max_stages;  //     this many
};
constexpr QkvSm90Tile qkv_sm90_tile(int d, bool three) {
  return {32, d >= kQkvClusterMinDim, 3, three ? 8 : 4, 6, 3, 5};
}

// ---- the attention (attn_sm90_kernel, attn_sm90_otma_kernel, attn_sm90_split_kernel) -----------------
// From this D on, the split form: the attention alone (128 queries a block, 64 where the sequence is
// no longer), then the output projection as a GEMM of its own (out_gemm_sm90_kernel).
constexpr int kSplitMinDim = 512;

struct AttnSm90Tile {
  bool pair;           // two 64-query blocks an SM (head_dim 32, D a multiple of 128)
  int bm, bn;          // queries a block, keys a tile
  int max_stages;      // the K/V ring's stages a warpgroup, at most
  int out_kw, out_bnw;  // the output projection's weight chunks: depth, width
  int max_out_stages;  // ... and its stages, at most
  int out_tma_max_dim;  // the output weight by tensor maps at D up to this (the otma kernel)
  bool kv_tma;         // the otma kernel's q/k/v tiles by tensor maps too (pair form)
};
// split: 0, the fused form; else the split form's queries a block.
constexpr AttnSm90Tile attn_sm90_tile(int d, int heads, int split) {
  const int hd = d / heads;
  const bool pair = !split && hd == 32 && d % 128 == 0;
  const int bm = split ? split : pair || d > 256 ? 64 : 128;
  const int wgn = 2 / (bm / 64);  // warpgroups side by side in the output projection
  return {pair, bm, hd == 32 && !pair ? 128 : 64, 4, 32, d % (128 * wgn) == 0 ? 128 : 64, 6, 256, pair};
}

// ---- the split form's output projection (out_gemm_sm90_kernel) ---------------------------------------
struct OutGemmSm90Tile {
  int bm, bn, bnw, kw;  // token rows, output columns and their wgmma width, weight depth a stage
  int min_stages, max_stages;
};
constexpr OutGemmSm90Tile out_gemm_sm90_tile(int d) { return {128, d % 256 == 0 ? 256 : 128, 128, 64, 3, 8}; }

// ---- the Hopper fused kernel (fused_sm90_kernel) -----------------------------------------------------
struct FusedSm90Tile {
  int bm;                       // token rows a block (whole sequences, packed)
  int max_dim;                  // D up to this (the LayerNorm and output tiles stay resident)
  int min_stages, max_stages;   // the weight ring a warpgroup
  int out_bnw;                  // the output projection's weight chunk width
  int min_out_stages, max_out_stages;
};
constexpr FusedSm90Tile fused_sm90_tile(int) { return {128, 256, 2, 4, 64, 3, 6}; }

}  // namespace axial_fused
