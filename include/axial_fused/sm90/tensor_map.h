// Host side of the tensor-memory accelerator: CUtensorMap encoding for the sm_90a kernels' TMA copies,
// through the driver's encoder found at run time (the extension links no libcuda).
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace axial_fused {

// A 16-bit tensor of RANK dimensions (dims innermost first, strides in bytes of dimensions 1..) as a
// tensor map with boxes of `box` elements and the given swizzle; cudaErrorNotSupported where the
// driver has no encoder.
template <class T, int RANK>
inline cudaError_t encode_map(CUtensorMap* map, const void* w, const cuuint64_t (&dims)[RANK],
                              const cuuint64_t (&strides)[RANK - 1], const cuuint32_t (&box)[RANK],
                              CUtensorMapSwizzle swizzle) {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found;
#if CUDART_VERSION >= 12050
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
#else  // toolkits 12.0-12.4 (a source build against an older torch): the unversioned query
    const cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &found);
#endif
    if (e != cudaSuccess || found != cudaDriverEntryPointSuccess) fn = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  if (encode == nullptr) return cudaErrorNotSupported;
  cuuint32_t unit[RANK];
  for (int d = 0; d < RANK; ++d) unit[d] = 1;
  const CUresult r =
      encode(map, std::is_same<T, __half>::value ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, RANK,
             const_cast<void*>(w), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
             CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}
// A [rows, cols] row-major tensor with boxes of box_cols x box_rows.
template <class T>
inline cudaError_t encode_map_2d(CUtensorMap* map, const void* w, int64_t rows, int cols, int box_cols, int box_rows,
                                 CUtensorMapSwizzle swizzle) {
  return encode_map<T, 2>(map, w, {cuuint64_t(cols), cuuint64_t(rows)}, {cuuint64_t(cols) * sizeof(T)},
                          {cuuint32_t(box_cols), cuuint32_t(box_rows)}, swizzle);
}
// A weight with the swizzle of its box rows (32 columns: 64 bytes; 64: 128), the stage layout wgmma
// reads (swz_desc<64> or <128>).
template <class T>
inline cudaError_t encode_weight_map(CUtensorMap* map, const void* w, int rows, int cols, int box_cols, int box_rows) {
  return encode_map_2d<T>(map, w, rows, cols, box_cols, box_rows,
                          box_cols == 32 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B);
}

}  // namespace axial_fused
