// The pair-bias kernel's instantiations and launch (include/axial_fused/common/pair_bias.cuh).
#include <cstdint>

#include "axial_fused/common/pair_bias.cuh"
#include "axial_fused/pair_bias.h"

namespace axial_fused {
namespace {

// One wave: as many blocks as fit on the device at once (each warp's ring then runs on across its
// groups of tokens), or fewer where there are fewer groups.
template <class T, int HMAX, bool VEC>
cudaError_t launch_one(const PairBiasParams& p, cudaStream_t stream) {
  const auto kernel = pair_bias_kernel<T, HMAX, VEC>;
  const size_t smem = pair_bias_smem<HMAX>(p.c);
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  int dev = 0, sms = 0, per_sm = 0;
  if (e == cudaSuccess) e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kPairBiasThreads, smem);
  if (e != cudaSuccess) return e;
  const int64_t wave = int64_t(sms) * (per_sm > 0 ? per_sm : 1);
  const int64_t blocks = (p.tokens + kPairBiasThreads - 1) / kPairBiasThreads;
  kernel<<<unsigned(blocks < wave ? blocks : wave), kPairBiasThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

// The vector loads when a row is whole 128-byte chunks and x is 16-byte aligned.
template <class T, int HMAX>
cudaError_t launch_heads(const PairBiasParams& p, cudaStream_t stream) {
  const bool vec = p.c % (128 / int(sizeof(T))) == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
  return vec ? launch_one<T, HMAX, true>(p, stream) : launch_one<T, HMAX, false>(p, stream);
}

template <class T>
cudaError_t launch_typed(const PairBiasParams& p, cudaStream_t stream) {
  if (p.heads <= 4) return launch_heads<T, 4>(p, stream);
  if (p.heads <= 8) return launch_heads<T, 8>(p, stream);
  if (p.heads <= 16) return launch_heads<T, 16>(p, stream);
  return launch_heads<T, 32>(p, stream);
}

}  // namespace

cudaError_t launch_pair_bias(int dtype, const void* x, const void* ln_w, const void* ln_b, const void* w, void* out,
                             int64_t tokens, int64_t plane, int c, int heads, float eps, cudaStream_t stream) {
  if (tokens == 0) return cudaSuccess;
  if (c < 1 || c > kPairBiasMaxC || heads < 1 || heads > kPairBiasMaxHeads || plane < 1) return cudaErrorInvalidValue;
  const PairBiasParams p{x, ln_w, ln_b, w, out, tokens, plane, c, heads, eps};
  switch (dtype) {
    case kFloat32: return launch_typed<float>(p, stream);
    case kFloat16: return launch_typed<__half>(p, stream);
    case kBFloat16: return launch_typed<__nv_bfloat16>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace axial_fused
