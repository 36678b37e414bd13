// The pair-bias kernel's instantiations and launch (include/axial_fused/common/pair_bias.cuh).
#include <cstdint>

#include "axial_fused/common/pair_bias.cuh"
#include "axial_fused/pair_bias.h"

namespace axial_fused {
namespace {

template <class T, int NPL, bool VEC>
cudaError_t launch_one(const PairBiasParams& p, cudaStream_t stream) {
  const size_t smem = size_t(2 + p.heads) * p.c * sizeof(float);
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(pair_bias_kernel<T, NPL, VEC>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
  }
  const int64_t per_block = int64_t(kPairBiasWarps) * kPairBiasTokens;
  const int64_t blocks = (p.tokens + per_block - 1) / per_block;
  pair_bias_kernel<T, NPL, VEC>
      <<<unsigned(blocks < kPairBiasBlocks ? blocks : kPairBiasBlocks), 32 * kPairBiasWarps, smem, stream>>>(p);
  return cudaGetLastError();
}

// NPL = the channels a lane holds; the vector form when they are exactly 32 * NPL and x is aligned.
template <class T, int NPL>
cudaError_t launch_npl(const PairBiasParams& p, cudaStream_t stream) {
  const bool vec = p.c == 32 * NPL && reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
  return vec ? launch_one<T, NPL, true>(p, stream) : launch_one<T, NPL, false>(p, stream);
}

template <class T>
cudaError_t launch_typed(const PairBiasParams& p, cudaStream_t stream) {
  if (p.c <= 64) return launch_npl<T, 2>(p, stream);
  if (p.c <= 128) return launch_npl<T, 4>(p, stream);
  if (p.c <= 256) return launch_npl<T, 8>(p, stream);
  if (p.c <= 512) return launch_npl<T, 16>(p, stream);
  return launch_npl<T, 32>(p, stream);
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
