// The mma.sync kernels' tuning (fused_pass_kernel, ln_qkv_kernel, attn_out_kernel; sm_80 and later),
// one constexpr function: the per-specialization choices that Traits derives its layout from.
// `python -m axial_fused.info --tiles` prints what each compiled specialization gets.
#pragma once
#include "axial_fused/common/hardware.h"

namespace axial_fused {

struct MmaTile {
  int bn;          // keys an attention tile
  int bk;          // weight columns a streamed chunk (128 bytes)
  int row_groups;  // warps down a tile, 16 tokens each (BM = 16 x row_groups)
  int max_col_groups;  // warps across: 64-wide output chunks in the projections, heads in attention
  // attn_out_kernel's blocks an SM (its __launch_bounds__): three in 16-bit at head_dim (padded) up to
  // k2_three_max_hdk where three blocks' shared memory fits, so that ptxas holds the registers to 80
  // and a third block's warps hide the latencies two leave exposed; the plain variant only up to
  // k2_three_plain_max_dim.
  int k2_three_max_hdk, k2_three_plain_max_dim;
};
// esz: the element's bytes (2: 16-bit on the tensor cores; 4: float32, tf32 or exact).
constexpr MmaTile mma_tile(int esz, int d) {
  return {esz == 4 ? 32 : 64, 128 / esz, esz == 4 && d >= 512 ? 2 : 4, 2, 16, 64};
}
// Two column groups where the two-kernel attention block still fits one block's shared memory on sm_90.
constexpr size_t kMmaTwoColumnGroupBytes = kSmemPerBlock;
// attn_out_kernel's output projection on wgmma (sm_90a): its weight ring's stages, within these.
constexpr int kAttnOutWgMinStages = 3, kAttnOutWgMaxStages = 6;

}  // namespace axial_fused
