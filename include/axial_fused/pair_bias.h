// The pair-bias kernel's launch (csrc/pair_bias.cu), declared without torch headers for the binding.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace axial_fused {

// bias[b, h, i, j] = LayerNorm(x[b, i, j, :]) . w[h, :] for x [B, I, J, c] (contiguous), w [heads, c],
// into out [B, heads, I, J] (contiguous), all of one dtype (DType); plane = I * J.
// Serves 1 <= c <= kPairBiasMaxC and 1 <= heads <= kPairBiasMaxHeads.
constexpr int kPairBiasMaxC = 1024, kPairBiasMaxHeads = 32;
cudaError_t launch_pair_bias(int dtype, const void* x, const void* ln_w, const void* ln_b, const void* w, void* out,
                             int64_t tokens, int64_t plane, int c, int heads, float eps, cudaStream_t stream);

}  // namespace axial_fused
