// Which compilation of this binary's device code the driver loaded for the current device. The
// Hopper kernels' bodies exist only in the sm_90a compilation (AXIAL_FUSED_SM90; elsewhere they
// trap), so the planner may launch them only where that compilation is the one that runs: not on
// other GPUs, and not where the driver JIT-compiled the compute_80 PTX instead (a build without
// 90a, or CUDA_FORCE_PTX_JIT=1).
#include <cuda_runtime.h>

#include <string>

#include "axial_fused/common/device.cuh"

namespace axial_fused {
namespace {
__global__ void compilation_probe_kernel(int* out) { *out = AXIAL_FUSED_SM90; }
}  // namespace

bool sm90a_code_loaded() {
  const bool built = (std::string(";") + AXIAL_FUSED_ARCH_LIST + ";").find(";90a;") != std::string::npos;
  if (!built) return false;
  cudaFuncAttributes attr;
  if (cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(&compilation_probe_kernel)) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.ptxVersion == 90;  // JIT-compiled from compute_80: 80
}

}  // namespace axial_fused
