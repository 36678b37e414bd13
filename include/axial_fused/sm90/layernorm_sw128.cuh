// The Hopper kernels' LayerNorm tile (256 threads, 8 warps; SW128 layout, the wgmma A operand):
// request_rows_sw128 starts copying row r of x (at offset xo[r]; xo[r] < 0: zeros) into its swizzled
// place as one cp.async group; once that group has landed and the block has synchronised,
// layernorm_sw128 normalises the rows in place and fences them for the tensor cores.
#pragma once
#include "axial_fused/common/layernorm.cuh"
#include "axial_fused/sm90/wgmma.cuh"

namespace axial_fused {

template <class T, int D, int BM>
__device__ __forceinline__ void request_rows_sw128(const PassParams& p, T* A, const int64_t* xo) {
  constexpr int CH = D / 8;  // 16-byte chunks per row
  const T* x = static_cast<const T*>(p.x);
  for (int v = threadIdx.x; v < BM * CH; v += 256) {
    const int r = v / CH, k = (v % CH) * 8;
    const int64_t off = xo[r];
    cp_async16(A + sw128_index<BM>(r, k), off >= 0 ? x + off + k : x, off >= 0);
  }
  cp_async_commit();
}

template <class T, int D, int BM>
__device__ __forceinline__ void layernorm_sw128(const PassParams& p, T* A) {
  constexpr int NV = D / 64;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float2 wr[NV], br[NV];  // this lane's LayerNorm weight and bias, loaded once
  load_ln_params<T, D>(p, wr, br);
  // R rows per step, all loaded before any is normalised and reduced together (layernorm_batch).
  constexpr int R = NV <= 4 ? 4 : 2;
  static_assert(BM % (8 * R) == 0, "rows per warp a multiple of R");
  for (int r0 = warp * R; r0 < BM; r0 += 8 * R) {
    float2 v[R][NV];
#pragma unroll
    for (int j = 0; j < R; ++j)
#pragma unroll
      for (int i = 0; i < NV; ++i) v[j][i] = load2(A + sw128_index<BM>(r0 + j, 2 * lane + 64 * i));
    layernorm_batch<D>(p, v, wr, br,
                       [&](int j, int d, float a, float b) { store2(A + sw128_index<BM>(r0 + j, d), a, b); });
  }
  fence_proxy_async();
}

}  // namespace axial_fused
