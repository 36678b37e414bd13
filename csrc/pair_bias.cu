// The pair-bias kernels' instantiations and launch (include/axial_fused/common/pair_bias.cuh).
#include <cstdint>

#include "axial_fused/common/pair_bias.cuh"
#include "axial_fused/pair_bias.h"

namespace axial_fused {
namespace {

// One wave: as many blocks as fit on the device at once (each warp then runs on across its tokens),
// or fewer where there are fewer warps' worth of tokens (32 tokens a warp for the float32 kernel, 16
// for the tensor-core one).
template <class Kernel>
cudaError_t launch_wave(Kernel kernel, int threads, size_t smem, int64_t warp_tokens, const PairBiasParams& p,
                        cudaStream_t stream) {
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  int dev = 0, sms = 0, per_sm = 0;
  if (e == cudaSuccess) e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem);
  if (e != cudaSuccess) return e;
  const int64_t wave = int64_t(sms) * (per_sm > 0 ? per_sm : 1);
  const int64_t block_tokens = warp_tokens * (threads / 32), blocks = (p.tokens + block_tokens - 1) / block_tokens;
  kernel<<<unsigned(blocks < wave ? blocks : wave), threads, smem, stream>>>(p);
  return cudaGetLastError();
}

// The vector loads when a row is whole 128-byte chunks (float32 kernel) or 32-channel groups (the
// tensor-core kernel) and x is 16-byte aligned.
template <class T, int HMAX>
cudaError_t launch_float(const PairBiasParams& p, cudaStream_t stream) {
  const bool vec = p.c % (128 / int(sizeof(T))) == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
  const size_t smem = pair_bias_smem<HMAX>(p.c);
  return vec ? launch_wave(pair_bias_kernel<T, HMAX, true>, kPairBiasThreads, smem, 32, p, stream)
             : launch_wave(pair_bias_kernel<T, HMAX, false>, kPairBiasThreads, smem, 32, p, stream);
}

template <class T, int NT>
cudaError_t launch_mma(const PairBiasParams& p, cudaStream_t stream) {
  const bool vec = p.c % 32 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0;  // (whole 32-channel groups)
  const size_t smem = pair_bias_mma_smem<NT>(p.c);
  return vec ? launch_wave(pair_bias_mma_kernel<T, NT, true>, kPairBiasMmaThreads, smem, 16, p, stream)
             : launch_wave(pair_bias_mma_kernel<T, NT, false>, kPairBiasMmaThreads, smem, 16, p, stream);
}

template <class T>
cudaError_t launch_typed(const PairBiasParams& p, cudaStream_t stream) {
  if constexpr (sizeof(T) == 2) {
    if (p.heads <= 8) return launch_mma<T, 1>(p, stream);
    if (p.heads <= 16) return launch_mma<T, 2>(p, stream);
    return launch_mma<T, 4>(p, stream);
  } else {
    if (p.heads <= 4) return launch_float<T, 4>(p, stream);
    if (p.heads <= 8) return launch_float<T, 8>(p, stream);
    if (p.heads <= 16) return launch_float<T, 16>(p, stream);
    return launch_float<T, 32>(p, stream);
  }
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
