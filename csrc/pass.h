// What the two halves of the binding share: the registry of compiled specializations, the device
// facts the planner reads, the planner, and run_pass (one pass's PassParams set-up and launch).
// csrc/pass.cpp implements them; csrc/ops.cpp (argument checks, the operators and their
// registration, the Python module) calls them.
#pragma once
#include <torch/extension.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "axial_fused/params.h"

namespace axial_fused {

// Every compiled specialization (one per generated kernels/*.cu), in build order.
const std::vector<const SpecInfo*>& registry();
// DType of a torch dtype, -1 for one without kernels.
int dtype_code(at::ScalarType t);
// The compiled specialization for (dtype, dim, heads), or nullptr.
const SpecInfo* find_spec(int dtype, int64_t dim, int64_t heads);
// Whether this binary holds sm_90a code (the Hopper wgmma kernels); a plain sm_90 build does not.
bool built_with_sm90a();

// What the planner needs to know of a device.
struct DeviceInfo {
  int sms = 0;
  int smem_optin = 0;  // bytes of shared memory a block may opt in to
  int arch = 0;        // compute capability major * 10 + minor
  bool sm90a = false;  // arch 90 and this binary holds sm_90a code: the Hopper kernels can run
};
const DeviceInfo& device_info(int device);

struct Plan {
  int path;   // PassPath
  int group;  // sequences per block (the fused paths)
};
// The path override, for tests and benchmarks: -1 automatic, else a PassPath (set_path_override).
extern std::atomic<int> g_path_override;
// gated: the pass has the sigmoid gate (its q/k/v buffers hold a fourth block).
Plan plan_pass(const SpecInfo* spec, int64_t num_seq, int len, int math, const DeviceInfo& dev, int forced,
               bool gated = false);

// Held by value (a reference count each): packing may replace a weight by a contiguous copy.
// qkv_b [3D], gate_w [D, D] and gate_b [D] are optional (undefined: absent).
struct PassWeights {
  at::Tensor norm_w, norm_b, qkv_w, out_w, out_b;
  at::Tensor qkv_b, gate_w, gate_b;
};
// A call's inputs besides x and the weights: the key mask ([B, H, W], bool or uint8; undefined:
// none), the pass's logit bias ([1 or B, heads, L, L], float32 or x's dtype; undefined: none), and
// whether the pass adds its input (residual) or returns the update alone.
struct PassExtras {
  at::Tensor mask, bias;
  bool residual = true;
};
// One pass from `in` to `out` (which may be the same tensor) on the current stream; axis 0: rows
// (sequences along W), axis 1: columns (sequences along H). The inputs are checked and packed.
void run_pass(const SpecInfo* spec, const at::Tensor& in, const at::Tensor& out, const PassWeights& w, int64_t axis,
              double eps, const PassExtras& extras);

}  // namespace axial_fused
