// What the planner knows of a compiled specialization (SpecInfo, SpecCaps) and what it decides for
// one pass (KernelPlan: every kernel the pass launches, by name). csrc/pass.cpp plans; the
// specialization's launcher (launch.cuh, Spec::launch) runs exactly the kernels the plan names.
// Plain C++ beside the CUDA headers: the binding's host files include it.
#pragma once
#include <cuda.h>  // CUtensorMap
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "axial_fused/params.h"

namespace axial_fused {

// Every kernel a pass can launch. One kernel a role: the prepared terms, K1 (LayerNorm + QKV into the
// scratch), the attention (which also projects its output, except the split form), the projection.
enum Kernel : int {
  kNoKernel = 0,
  // one-kernel paths: LayerNorm, QKV, attention and the output projection in one block
  kFusedSm90,       // fused_sm90_kernel: wgmma, 128-row blocks (sm_90a)
  kFusedMma,        // fused_pass_kernel: mma.sync
  // the two-kernel path's prepared terms (a mask, a bias read through its strides)
  kTermsPrep,       // terms_prep_kernel<T, false>: key bits in the mma.sync attention's order
  kTermsPrepSm90,   // terms_prep_kernel<T, true>: key bits and bias in the Hopper attention's order
  // K1
  kLnQkvMma,        // ln_qkv_kernel: mma.sync
  kLnQkvSm90,       // ln_qkv_sm90_kernel: wgmma, two blocks an SM
  kLnQkvSm90Three,  // ln_qkv_sm90_kernel<.., THREE>: three blocks an SM
  kLnQkvSm90Tma,    // ln_qkv_sm90_tma_kernel: two-block clusters sharing the weight by TMA multicast
  // K2: attention (+ the output projection)
  kAttnOutMma,      // attn_out_kernel: mma.sync attention and projection
  kAttnOutMmaWg,    // attn_out_kernel<.., SM90>: mma.sync attention, projection on wgmma
  kAttnSm90,        // attn_sm90_kernel: wgmma, the K/V tiles by cp.async
  kAttnSm90Tma,     // attn_sm90_otma_kernel: the output weight (and K/V tiles) by TMA
  kAttnSm90Split64, // attn_sm90_split_kernel, 64 queries a block: attention alone, into the scratch
  kAttnSm90Split128,// ... 128 queries a block
  // the split form's projection
  kOutGemmSm90,     // out_gemm_sm90_kernel
  kNumKernels
};

inline const char* kernel_name(int k) {
  static const char* const names[kNumKernels] = {
      "none",           "fused_sm90",       "fused_mma",     "terms_prep",      "terms_prep_sm90",
      "ln_qkv_mma",     "ln_qkv_sm90",      "ln_qkv_sm90_three", "ln_qkv_sm90_tma", "attn_out_mma",
      "attn_out_mma_wg", "attn_sm90",       "attn_sm90_tma", "attn_sm90_split64", "attn_sm90_split128",
      "out_gemm_sm90"};
  return k >= 0 && k < kNumKernels ? names[k] : "?";
}

// The kernels of one pass and how they are launched. Decided by plan_pass before anything launches.
struct KernelPlan {
  int path = kPathTwoKernel;  // PassPath
  int group = 1;              // one-kernel paths: sequences per block
  int k1_per_sm = 2;          // the blocks an SM K1's form is sized for (2, or 3: kLnQkvSm90Three)
  bool extras = false;        // the kernels' feature variants (has_extras) rather than their plain ones
  // The prepared terms the attention reads (kTerm* bits: the Hopper attention kernels' TERMS; for
  // attn_out_kernel, kTermMaskMma selects its MASK_MMA form).
  int terms = 0;
  bool pair_bias = false;  // the bias from the pass's LayerNorm output is computed first (pair-bias kernel)
  bool k1_bias = false;    // ... or written by K1 into the prepared bias (the Hopper attention reads it)
  bool bias_prepared = false;  // the attention reads the bias prepared (bias_frag), not as given
  Kernel prep = kNoKernel, k1 = kNoKernel, attn = kNoKernel, proj = kNoKernel;
};

// What a specialization compiled, for the planner: which kernel forms serve it.
struct SpecCaps {
  bool fused_sm90 = false;     // fused_sm90_kernel serves (16-bit, head_dim 32, even heads, D <= 256)
  bool k1_sm90 = false;        // the wgmma K1 (16-bit)
  bool k1_tma = false;         // ... in its TMA cluster form (large D)
  bool k1_three = false;       // ... in its three-block form (D <= kQkvThreeMaxDim)
  bool attn_out_mask_mma = false;  // attn_out_kernel's MASK_MMA form (bfloat16, padded head tiles)
  bool mma_mask = false;       // the Hopper attention takes the mask on the tensor cores (kTermMaskMma)
  bool hopper_attention = false;   // a Hopper attention kernel serves the plain pass
  // Per TERMS value: the Hopper attention forms that serve it (kAttnServes*).
  unsigned char attn[8] = {};
  int64_t split_max_tokens = 0;  // the split form's token limit (the GEMM's tile arithmetic)
};
constexpr unsigned char kAttnServes = 1, kAttnServesTma = 2, kAttnServesSplit = 4;

// The tensor maps of the TMA kernels a plan names, encoded while planning (Spec::encode_maps).
struct TensorMaps {
  CUtensorMap k1_w;           // kLnQkvSm90Tma: W_qkv
  CUtensorMap attn_o, attn_kv;  // kAttnSm90Tma: W_out, and the scratch's K/V rows (its KV_TMA form)
  CUtensorMap gemm_a, gemm_w;   // kOutGemmSm90: the attention output in the scratch, W_out
};

// What each compiled specialization exports to the binding (one per generated kernels/*.cu).
struct SpecInfo {
  int dtype;  // DType
  int dim;
  int heads;
  // Shared-memory bytes the fused kernel needs to hold `rows` tokens of q/k/v (and g: gated).
  size_t (*fused_smem_bytes)(int rows, int math, bool gated);
  // Largest shared-memory request of the two-kernel path.
  size_t (*two_kernel_smem_bytes)(int math);
  // Tokens per block tile (rows of the fused buffer are a multiple of this).
  int (*block_rows)(int math);
  // The tensor maps `plan` needs (none: cudaSuccess); cudaErrorNotSupported where the driver has no
  // encoder, another error where one does not encode.
  cudaError_t (*encode_maps)(const KernelPlan& plan, const PassParams& p, TensorMaps* maps);
  // Launches the kernels `plan` names, in order, on `stream`.
  cudaError_t (*launch)(const KernelPlan& plan, const PassParams& p, const TensorMaps& maps, cudaStream_t stream);
  // cudaSuccess when the current device can run this binary's kernels (e.g. not: no image for its arch).
  cudaError_t (*probe)();
  // The per-specialization tuning rows (tile_size.h), as text: one line a kernel.
  const char* (*tiles)();
  SpecCaps caps;
};

// Adds a compiled specialization to the binding's registry: each generated kernels/*.cu calls it once,
// when the library loads (csrc/pass.cpp).
bool register_spec(const SpecInfo* spec);

// Whether a plan launches a kernel that reads a tensor map.
inline bool plan_needs_maps(const KernelPlan& k) {
  return k.k1 == kLnQkvSm90Tma || k.attn == kAttnSm90Tma || k.proj == kOutGemmSm90;
}

}  // namespace axial_fused
