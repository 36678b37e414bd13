// Warp-level matrix products on 16-row tiles, for three math modes that share one accumulator layout
// (the m16n8 accumulator of mma.sync: thread (g = lane/4, t = lane%4) holds rows g and g+8,
// columns 2t and 2t+1 of each 8-column tile):
//   Tc16  - bf16/fp16 tensor cores, mma.sync m16n8k16, fragments loaded with ldmatrix;
//   Tf32  - tf32 tensor cores, mma.sync m16n8k8, fp32 operands rounded to tf32;
//   Ffma  - fp32 accuracy (PyTorch's "highest" float32 matmul precision): by default 3xTF32, split tf32
//           operands on the tensor cores (session 17); -DAXIAL_FUSED_FP32_3XTF32=0: plain fp32 FMA.
// All operands come from shared memory; leading dimensions are in elements.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace axial_fused {

enum class Mma { Tc16, Tf32, Ffma };

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

template <class T> struct Pack2;
template <> struct Pack2<__half> {
  using type = __half2;
  static __device__ __forceinline__ __half2 make(float a, float b) { return __floats2half2_rn(a, b); }
  static __device__ __forceinline__ float2 unpack(__half2 v) { return __half22float2(v); }
};
template <> struct Pack2<__nv_bfloat16> {
  using type = __nv_bfloat162;
  static __device__ __forceinline__ __nv_bfloat162 make(float a, float b) { return __floats2bfloat162_rn(a, b); }
  static __device__ __forceinline__ float2 unpack(__nv_bfloat162 v) { return __bfloat1622float2(v); }
};
template <> struct Pack2<float> {
  using type = float2;
  static __device__ __forceinline__ float2 make(float a, float b) { return make_float2(a, b); }
  static __device__ __forceinline__ float2 unpack(float2 v) { return v; }
};

// Store two adjacent values (8-byte or 4-byte aligned pair).
template <class T> __device__ __forceinline__ void store2(T* p, float a, float b) {
  *reinterpret_cast<typename Pack2<T>::type*>(p) = Pack2<T>::make(a, b);
}
template <class T> __device__ __forceinline__ float2 load2(const T* p) {
  return Pack2<T>::unpack(*reinterpret_cast<const typename Pack2<T>::type*>(p));
}

// ---- raw instructions ---------------------------------------------------------------------------

// 16 bytes to global memory in one instruction (STG.E.128). K1's `*reinterpret_cast<uint4*>(p) = v`
// compiles to four 32-bit stores (st.global.u32 in the PTX, session 8): four times the store
// instructions and L2 write requests, each a partial sector.
__device__ __forceinline__ void st_global_16(void* p, uint4 v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}

template <class T> __device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <> __device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <> __device__ __forceinline__ void mma16816<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ void mma1688_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The Ffma mode's products on the tf32 tensor cores with split operands (3xTF32, as CUTLASS's
// "fast accurate" fp32 GEMM; the default since session 17, -DAXIAL_FUSED_FP32_3XTF32=0 restores the
// FFMA loops): x = big + small with big = tf32(x) and small = tf32(x - big) (split_tf32), and
// a b = big_a big_b + big_a small_b + small_a big_b (the small products first; small_a small_b,
// ~2^-22 relative, dropped): about fp32's accuracy at a third of the tf32 rate, against the FFMA
// loop's one LDS per two FMAs. Seed fp32's block spent 19k of ~43k cycles in the FFMA QKV product
// and 9k in the output projection (session 16's phase clocks); 3xTF32 took seed fp32's kernels
// 45.6 -> 37.3 us (session 17; the float64-reference tests pass at the exact-fp32 tolerance), and
// 32.1 with the truncating split below.
// Non-finite operands give NaN where FFMA could give inf (x - big is NaN for x = inf); our fp32
// operands are finite unless x is not, and then LayerNorm has already made the row NaN.
#ifndef AXIAL_FUSED_FP32_3XTF32
#define AXIAL_FUSED_FP32_3XTF32 1
#endif
struct Tf32Split {
  uint32_t big, small;
};
// The split (session 17): big = x with its low 13 mantissa bits cleared (one LOP3), and small =
// x - big (exact) with its low 13 bits cleared too, where cvt.rna.tf32.f32 is emulated on sm_90a by
// four instructions (add, infinity test, select, mask) and was done twice: 2 instructions a split
// instead of 7, at ~2^-21 instead of ~2^-22 relative error a product (small truncated). small's mask
// states the tf32 operand contract (a tf32 operand's low bits are implementation-defined); ptxas
// drops it before the HMMA (sm_90a: the same instruction count as without it). A warp splits 20
// values a k step; seed fp32's kernels 37.5 -> 32.1 us, and the float32 GPU tests pass at D up to
// 1024 (session 17, measured before the mask was written). -DAXIAL_FUSED_TF32_SPLIT_TRUNC=0:
// CUTLASS's rounded split.
#ifndef AXIAL_FUSED_TF32_SPLIT_TRUNC
#define AXIAL_FUSED_TF32_SPLIT_TRUNC 1
#endif
__device__ __forceinline__ Tf32Split split_tf32(float x) {
#if AXIAL_FUSED_TF32_SPLIT_TRUNC
  const uint32_t big = __float_as_uint(x) & 0xffffe000u;
  return {big, __float_as_uint(x - __uint_as_float(big)) & 0xffffe000u};
#else
  const uint32_t big = to_tf32(x);
  return {big, to_tf32(x - __uint_as_float(big))};
#endif
}
// The m16n8k8 A fragment (rows g and g + 8, columns k + t and k + t + 4 of A), split.
__device__ __forceinline__ void a_frag_split(Tf32Split (&a)[4], const float* A, int lda, int k) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  a[0] = split_tf32(A[g * lda + k + t]);
  a[1] = split_tf32(A[(g + 8) * lda + k + t]);
  a[2] = split_tf32(A[g * lda + k + t + 4]);
  a[3] = split_tf32(A[(g + 8) * lda + k + t + 4]);
}
// c += a b in 3xTF32 (a: the A fragment's four values, b0 / b1: the B fragment's two).
__device__ __forceinline__ void mma1688_3xtf32(float (&c)[4], const Tf32Split (&a)[4], Tf32Split b0, Tf32Split b1) {
  const uint32_t ab[4] = {a[0].big, a[1].big, a[2].big, a[3].big};
  const uint32_t as[4] = {a[0].small, a[1].small, a[2].small, a[3].small};
  mma1688_tf32(c, ab, b0.small, b1.small);
  mma1688_tf32(c, as, b0.big, b1.big);
  mma1688_tf32(c, ab, b0.big, b1.big);
}

// ---- warp tile products -------------------------------------------------------------------------

// acc[NT] (16 x 8*NT) += A (16 x K, fp32, row-major) B in 3xTF32, where b_at(n, k) is B's element for
// output column n and depth k (the Ffma products' default form).
template <int K, int NT, class BAt>
__device__ __forceinline__ void warp_mma_3xtf32(float (&acc)[NT][4], const float* A, int lda, BAt b_at) {
  static_assert(K % 8 == 0, "tf32 tiles are k8");
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  // Not unrolled: with two k steps in flight the fresh accumulators below spilled 20-36 bytes in the
  // fp32 fused kernels (128 registers); one step a time has none and measured faster (seed fp32
  // kernels 37.9 -> 37.3 us, session 17).
#pragma unroll 1
  for (int k = 0; k < K; k += 8) {
    Tf32Split a[4];
    a_frag_split(a, A, lda, k);
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      // Each k step's three products go into a fresh accumulator, added to acc with a rounded FADD:
      // the tensor cores' fp32 accumulation truncates (rounds toward zero), and accumulating all of K
      // there biased every step the same way (session 17: 1.0e-5 relative error at D = 1024 against
      // PyTorch's 5e-7, past the exact-fp32 tolerance; the truncation is then only within 8 terms).
      float c[4] = {0.f, 0.f, 0.f, 0.f};
      mma1688_3xtf32(c, a, split_tf32(b_at(j * 8 + g, k + t)), split_tf32(b_at(j * 8 + g, k + t + 4)));
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[j][i] += c[i];
    }
  }
}

// acc[NT] (16 x 8*NT) += A (16 x K, row-major) * B^T, with B (8*NT x K, row-major): both operands
// K-contiguous, as for x @ W^T with an nn.Linear weight and for q @ k^T.
template <Mma M, int K, int NT, class T>
__device__ __forceinline__ void warp_mma_nt(float (&acc)[NT][4], const T* A, int lda, const T* B, int ldb) {
  const int lane = threadIdx.x & 31;
  if constexpr (M == Mma::Tc16) {
    static_assert(K % 16 == 0 && NT % 2 == 0, "Tc16 tiles are k16 x n16");
    const T* a_ptr = A + (lane & 15) * lda + (lane >> 4) * 8;
    const T* b_ptr = B + ((lane & 7) + ((lane >> 4) << 3)) * ldb + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int k = 0; k < K; k += 16) {
      uint32_t a[4];
      ldsm_x4(a, a_ptr + k);
#pragma unroll
      for (int j = 0; j < NT; j += 2) {
        uint32_t b[4];  // b0,b1 of n-tile j, then of n-tile j+1
        ldsm_x4(b, b_ptr + j * 8 * ldb + k);
        mma16816<T>(acc[j], a, b[0], b[1]);
        mma16816<T>(acc[j + 1], a, b[2], b[3]);
      }
    }
  } else if constexpr (M == Mma::Tf32) {
    static_assert(K % 8 == 0, "Tf32 tiles are k8");
    const int g = lane >> 2, t = lane & 3;
#pragma unroll 4
    for (int k = 0; k < K; k += 8) {
      uint32_t a[4] = {to_tf32(A[g * lda + k + t]), to_tf32(A[(g + 8) * lda + k + t]),
                       to_tf32(A[g * lda + k + t + 4]), to_tf32(A[(g + 8) * lda + k + t + 4])};
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const T* b = B + (j * 8 + g) * ldb + k;
        mma1688_tf32(acc[j], a, to_tf32(b[t]), to_tf32(b[t + 4]));
      }
    }
  } else if constexpr (AXIAL_FUSED_FP32_3XTF32 != 0) {  // Ffma's exact-fp32 products as 3xTF32
    warp_mma_3xtf32<K, NT>(acc, A, lda, [&](int n, int kk) { return B[n * ldb + kk]; });
  } else {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll 4
    for (int k = 0; k < K; ++k) {
      const float a0 = A[g * lda + k], a1 = A[(g + 8) * lda + k];
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const float b0 = B[(j * 8 + 2 * t) * ldb + k], b1 = B[(j * 8 + 2 * t + 1) * ldb + k];
        acc[j][0] = fmaf(a0, b0, acc[j][0]);
        acc[j][1] = fmaf(a0, b1, acc[j][1]);
        acc[j][2] = fmaf(a1, b0, acc[j][2]);
        acc[j][3] = fmaf(a1, b1, acc[j][3]);
      }
    }
  }
}

// acc[NT] (16 x 8*NT) += A (16 x K, row-major) * B, with B (K x 8*NT, row-major): as for p @ v.
template <Mma M, int K, int NT, class T>
__device__ __forceinline__ void warp_mma_nn(float (&acc)[NT][4], const T* A, int lda, const T* B, int ldb) {
  const int lane = threadIdx.x & 31;
  if constexpr (M == Mma::Tc16) {
    static_assert(K % 16 == 0 && NT % 2 == 0, "Tc16 tiles are k16 x n16");
    const T* a_ptr = A + (lane & 15) * lda + (lane >> 4) * 8;
    const T* b_ptr = B + ((lane & 7) + (((lane >> 3) & 1) << 3)) * ldb + (lane >> 4) * 8;
#pragma unroll
    for (int k = 0; k < K; k += 16) {
      uint32_t a[4];
      ldsm_x4(a, a_ptr + k);
#pragma unroll
      for (int j = 0; j < NT; j += 2) {
        uint32_t b[4];
        ldsm_x4_trans(b, b_ptr + k * ldb + j * 8);
        mma16816<T>(acc[j], a, b[0], b[1]);
        mma16816<T>(acc[j + 1], a, b[2], b[3]);
      }
    }
  } else if constexpr (M == Mma::Tf32) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll 4
    for (int k = 0; k < K; k += 8) {
      uint32_t a[4] = {to_tf32(A[g * lda + k + t]), to_tf32(A[(g + 8) * lda + k + t]),
                       to_tf32(A[g * lda + k + t + 4]), to_tf32(A[(g + 8) * lda + k + t + 4])};
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        mma1688_tf32(acc[j], a, to_tf32(B[(k + t) * ldb + j * 8 + g]), to_tf32(B[(k + t + 4) * ldb + j * 8 + g]));
      }
    }
  } else if constexpr (AXIAL_FUSED_FP32_3XTF32 != 0) {  // Ffma's exact-fp32 products as 3xTF32
    warp_mma_3xtf32<K, NT>(acc, A, lda, [&](int n, int kk) { return B[kk * ldb + n]; });
  } else {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll 4
    for (int k = 0; k < K; ++k) {
      const float a0 = A[g * lda + k], a1 = A[(g + 8) * lda + k];
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const float b0 = B[k * ldb + j * 8 + 2 * t], b1 = B[k * ldb + j * 8 + 2 * t + 1];
        acc[j][0] = fmaf(a0, b0, acc[j][0]);
        acc[j][1] = fmaf(a0, b1, acc[j][1]);
        acc[j][2] = fmaf(a1, b0, acc[j][2]);
        acc[j][3] = fmaf(a1, b1, acc[j][3]);
      }
    }
  }
}

// Tc16 only: acc[NT] += P * B where P (16 x 8*KT) is held in accumulator layout in registers (the
// softmax probabilities; FlashAttention-2's register reuse), rounded to T, and B (8*KT x 8*NT) is
// row-major in shared memory.
template <int KT, int NT, class T>
__device__ __forceinline__ void warp_mma_reg_nn(float (&acc)[NT][4], const float (&p)[KT][4], const T* B, int ldb) {
  static_assert(KT % 2 == 0 && NT % 2 == 0, "k16 x n16 tiles");
  const int lane = threadIdx.x & 31;
  const T* b_ptr = B + ((lane & 7) + (((lane >> 3) & 1) << 3)) * ldb + (lane >> 4) * 8;
#pragma unroll
  for (int kk = 0; kk < KT / 2; ++kk) {
    uint32_t a[4];
    auto pk = [](float x, float y) {
      typename Pack2<T>::type v = Pack2<T>::make(x, y);
      return *reinterpret_cast<uint32_t*>(&v);
    };
    a[0] = pk(p[2 * kk][0], p[2 * kk][1]);
    a[1] = pk(p[2 * kk][2], p[2 * kk][3]);
    a[2] = pk(p[2 * kk + 1][0], p[2 * kk + 1][1]);
    a[3] = pk(p[2 * kk + 1][2], p[2 * kk + 1][3]);
#pragma unroll
    for (int j = 0; j < NT; j += 2) {
      uint32_t b[4];
      ldsm_x4_trans(b, b_ptr + kk * 16 * ldb + j * 8);
      mma16816<T>(acc[j], a, b[0], b[1]);
      mma16816<T>(acc[j + 1], a, b[2], b[3]);
    }
  }
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

}  // namespace axial_fused
