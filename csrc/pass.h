// What the two halves of the binding share: the registry of compiled specializations, the device
// facts the planner reads, the planner, and run_pass (one pass's PassParams set-up and launch).
// csrc/pass.cpp implements them; csrc/ops.cpp (argument checks, the operators and their
// registration, the C entry points the Python package reads) calls them.
// LibTorch's stable ABI only (torch/csrc/stable, torch/headeronly): the binary runs on every torch
// from TORCH_TARGET_VERSION on (setup.py), so nothing here may name ATen, c10 or torch/extension.h.
#pragma once
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "axial_fused/params.h"
#include "axial_fused/plan.h"

namespace axial_fused {

using torch::stable::Tensor;
using torch::headeronly::ScalarType;

// Every compiled specialization (one per generated kernels/*.cu, register_spec), by dim, heads, dtype.
const std::vector<const SpecInfo*>& registry();
// DType of a torch dtype, -1 for one without kernels.
int dtype_code(ScalarType t);
// The compiled specialization for (dtype, dim, heads), or nullptr.
const SpecInfo* find_spec(int dtype, int64_t dim, int64_t heads);

// What the planner needs to know of a device.
struct DeviceInfo {
  int sms = 0;
  int smem_optin = 0;  // bytes of shared memory a block may opt in to
  int arch = 0;        // compute capability major * 10 + minor
  bool sm90a = false;  // the loaded code of the Hopper kernels is sm_90a's (sm90a_code_loaded)
};
const DeviceInfo& device_info(int device);
// Whether the code the driver loaded for the current device is an sm_90a compilation (the Hopper
// kernels' real bodies): false on other GPUs, in a build without 90a, and where the driver JIT-compiled
// the compute_80 PTX instead (csrc/device_probe.cu).
bool sm90a_code_loaded();

// What the planner is asked: one pass of `num_seq` sequences of `len` tokens and its features.
struct PassRequest {
  int64_t num_seq = 0;
  int len = 0;
  int math = kExactFp32;      // MathMode (float32)
  bool gated = false;         // the sigmoid gate: a fourth block of the QKV product
  bool extras = false;        // any optional feature (has_extras): the kernels' feature variants
  bool mask = false;          // a key mask
  bool bias = false;          // a logit bias, given
  bool bias_from_ln = false;  // a logit bias from the pass's own LayerNorm output (PassWeights::bias_w)
  bool tensor_maps = true;    // the TMA kernels may be named (false: their maps did not encode here)
  int forced = -1;            // -1: automatic; else the PassPath a test or benchmark forces
};
// The path override, for tests and benchmarks: -1 automatic, else a PassPath (set_path_override).
extern std::atomic<int> g_path_override;
// Every kernel of the pass, named before anything launches (KernelPlan, plan.h); an error where a
// forced path cannot run.
KernelPlan plan_pass(const SpecInfo* spec, const PassRequest& r, const DeviceInfo& dev);
// The plan as one line of text: "path=two_kernel group=1 ... attn=attn_sm90_tma terms=mask".
std::string plan_text(const KernelPlan& k);

// Held by value (a reference count each): packing may replace a weight by a contiguous copy.
// qkv_b [3D], gate_w [D, D], gate_b [D] and bias_w [heads, D] (the logit bias from the pass's own
// LayerNorm output, PassParams::bias_w) are optional (undefined: absent).
struct PassWeights {
  Tensor norm_w, norm_b, qkv_w, out_w, out_b;
  Tensor qkv_b, gate_w, gate_b, bias_w;
};
// A call's inputs besides x and the weights: the key mask ([B, H, W], bool or uint8; undefined:
// none), the pass's logit bias ([1 or B, heads, L, L], float32 or x's dtype; undefined: none), and
// whether the pass adds its input (residual) or returns the update alone.
struct PassExtras {
  Tensor mask, bias;
  bool residual = true;
};
// One pass from `in` to `out` (which may be the same tensor) on the current stream; axis 0: rows
// (sequences along W), axis 1: columns (sequences along H). The inputs are checked and packed.
void run_pass(const SpecInfo* spec, const Tensor& in, const Tensor& out, const PassWeights& w, int64_t axis,
              double eps, const PassExtras& extras);

// The current CUDA stream of `device` (the shim's; never a stream id cast to a handle).
cudaStream_t current_stream(int device);

}  // namespace axial_fused
