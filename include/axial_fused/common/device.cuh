// Device code every kernel shares: 16-bit pairs, raw loads and stores, cp.async, programmatic
// dependent launch, token addressing through the pass's strides, and small math helpers.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#ifdef AXIAL_FUSED_PHASE_CLOCK
#include <cstdio>
#endif

#include "axial_fused/params.h"

// 1 in the sm_90a device compilation (wgmma, TMA, clusters, setmaxnreg), else 0: the Hopper kernels'
// bodies compile to a trap elsewhere, and the host launches them only on compute capability 9.0.
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define AXIAL_FUSED_SM90 1
#else
#define AXIAL_FUSED_SM90 0
#endif


// Instrumentation, the build's one switch: with -DAXIAL_FUSED_PHASE_CLOCK (AXIAL_FUSED_NVCC_FLAGS) the
// first blocks of the fused kernels, of every wg_gemm and of K1's consumers (their rows' loads and
// LayerNorm, then the product's phases), and the first and last of the Hopper attention kernel's,
// print the clock cycles they spent in each phase.
// AXIAL_PHASE(i) adds the cycles since its last call to the local counter phase_[i] (declared with
// phase_last_ where the counting starts); without the switch it is nothing.
#ifdef AXIAL_FUSED_PHASE_CLOCK
#define AXIAL_PHASE(i)                 \
  do {                                 \
    const long long now_ = clock64();  \
    phase_[i] += now_ - phase_last_;   \
    phase_last_ = now_;                \
  } while (0)
#else
#define AXIAL_PHASE(i) \
  do {                 \
  } while (0)
#endif


namespace axial_fused {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

template <class T> struct Pack2;
template <> struct Pack2<__half> {
  using type = __half2;
  static __device__ __forceinline__ __half2 make(float a, float b) { return __floats2half2_rn(a, b); }
  static __device__ __forceinline__ float2 unpack(__half2 v) { return __half22float2(v); }
  static __device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half from_float(float v) { return __float2half_rn(v); }
};
template <> struct Pack2<__nv_bfloat16> {
  using type = __nv_bfloat162;
  static __device__ __forceinline__ __nv_bfloat162 make(float a, float b) { return __floats2bfloat162_rn(a, b); }
  static __device__ __forceinline__ float2 unpack(__nv_bfloat162 v) { return __bfloat1622float2(v); }
  static __device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 from_float(float v) { return __float2bfloat16_rn(v); }
};
template <> struct Pack2<float> {
  using type = float2;
  static __device__ __forceinline__ float2 make(float a, float b) { return make_float2(a, b); }
  static __device__ __forceinline__ float2 unpack(float2 v) { return v; }
  static __device__ __forceinline__ float to_float(float v) { return v; }
  static __device__ __forceinline__ float from_float(float v) { return v; }
};

// Store two adjacent values (8-byte or 4-byte aligned pair).
template <class T> __device__ __forceinline__ void store2(T* p, float a, float b) {
  *reinterpret_cast<typename Pack2<T>::type*>(p) = Pack2<T>::make(a, b);
}
template <class T> __device__ __forceinline__ float2 load2(const T* p) {
  return Pack2<T>::unpack(*reinterpret_cast<const typename Pack2<T>::type*>(p));
}

// ---- raw instructions ---------------------------------------------------------------------------

// 16 bytes to global memory in one instruction (STG.E.128): a plain uint4 assignment compiles to four
// 32-bit stores, four times the store instructions and L2 write requests, each a partial sector.
__device__ __forceinline__ void st_global_16(void* p, uint4 v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

// 16 bytes to shared memory at an address already converted (smem_u32).
__device__ __forceinline__ void st_shared_16(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

// 16 bytes from shared memory at an address already converted (smem_u32).
__device__ __forceinline__ uint4 ld_shared_16(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
  return v;
}

// ---- asynchronous global -> shared copies -------------------------------------------------------

// 16 bytes; when !valid the destination is zero-filled and nothing is read. To a shared-memory
// address already converted (smem_u32), or to a pointer.
__device__ __forceinline__ void cp_async16_shared(uint32_t smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  cp_async16_shared(smem_u32(smem), gmem, valid);
}
// ... always a full copy.
__device__ __forceinline__ void cp_async16_shared(uint32_t smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }


// ---- programmatic dependent launch --------------------------------------------------------------

// griddepcontrol.wait: wait until the grid before this one has finished and its writes are visible;
// griddepcontrol.launch_dependents: let the next grid launch. For a kernel launched with the
// programmatic stream-serialization attribute (launch_with_smem's PDL) the launch and block
// scheduling overlap the previous grid's tail; without the attribute the wait returns at once. Only
// the sm_90a build has the instructions.
__device__ __forceinline__ void pdl_wait() {
#if AXIAL_FUSED_SM90
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if AXIAL_FUSED_SM90
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
// Every kernel but the Hopper K1 begins with pdl_entry(): nothing is read before the grid before it
// is done. (The Hopper K1 reads nothing the prep kernel before it writes, so it waits at its end
// instead: ln_qkv_sm90_kernel.)
__device__ __forceinline__ void pdl_entry() {
  pdl_wait();
  pdl_launch_dependents();
}

// ---- addressing ---------------------------------------------------------------------------------

__device__ __forceinline__ int64_t token_offset(int64_t s, int64_t l, int64_t inner, int64_t so, int64_t si, int64_t st) {
  const int64_t outer = s / inner;
  return outer * so + (s - outer * inner) * si + l * st;
}
__device__ __forceinline__ int64_t x_offset(const PassParams& p, int64_t s, int64_t l) {
  return token_offset(s, l, p.seq_inner, p.x_stride_outer, p.x_stride_inner, p.x_stride_tok);
}
__device__ __forceinline__ int64_t out_offset(const PassParams& p, int64_t s, int64_t l) {
  return token_offset(s, l, p.seq_inner, p.o_stride_outer, p.o_stride_inner, p.o_stride_tok);
}

// 2^x on the special-function unit alone (one MUFU.EX2): ex2.approx with subnormal results flushed
// to zero. exp2f() compiles to the non-ftz form, which wraps the MUFU in a compare and two
// predicated multiplies to keep subnormals; a probability below 2^-126 is 0 at any of our
// precisions. exp2_ftz(-inf) = 0 and exp2_ftz(NaN) = NaN, as exp2f.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The sigmoid gate's factor sigmoid(g) for its pre-activation g (the QKV product's fourth block, its
// bias included), for a T result. The two-kernel paths' K1 stores the factor itself in the scratch's
// gate columns (off the attention kernel's busy special-function unit); the fused kernels apply it to
// their own product.
// bfloat16: 0.5 + 0.5 tanh(g / 2), one special-function op (tanh.approx, absolute error about 2^-12
// here, a sixteenth of bfloat16's unit at 1). Elsewhere 1 / (1 + exp(-g)) by two (__fdividef: one
// reciprocal, no IEEE division's slow path; 0 where exp(-g) overflows, as the sigmoid's limit), as
// float16's unit at 1 is 2^-11.
template <class T>
__device__ __forceinline__ float gate_of(float g) {
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    float t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(0.5f * g));
    return fmaf(0.5f, t, 0.5f);
  } else {
    return __fdividef(1.f, 1.f + __expf(-g));
  }
}

// The sums over a warp of N values at once, step by step across them (N shuffle chains overlapped).
template <int N>
__device__ __forceinline__ void warp_sum_rows(float (&v)[N]) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] += __shfl_xor_sync(0xffffffffu, v[j], o);
}

}  // namespace axial_fused
