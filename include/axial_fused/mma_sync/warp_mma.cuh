// Warp-level matrix products on 16-row tiles (mma.sync: sm_80 and later), for three math modes that
// share one accumulator layout (the m16n8 accumulator: thread (g = lane/4, t = lane%4) holds rows g and
// g+8, columns 2t and 2t+1 of each 8-column tile):
//   Tc16  bf16/fp16 tensor cores, mma.sync m16n8k16, fragments loaded with ldmatrix;
//   Tf32  tf32 tensor cores, mma.sync m16n8k8, fp32 operands rounded to tf32;
//   Ffma  fp32 accuracy (PyTorch's "highest" float32 matmul precision) as 3xTF32: split tf32
//         operands on the tensor cores.
// All operands come from shared memory; leading dimensions are in elements.
#pragma once
#include "axial_fused/common/device.cuh"

namespace axial_fused {

enum class Mma { Tc16, Tf32, Ffma };

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
// "fast accurate" fp32 GEMM): x = big + small (split_tf32), and
// a b = big_a big_b + big_a small_b + small_a big_b (the small products first; small_a small_b,
// ~2^-22 relative, dropped): about fp32's accuracy at a third of the tf32 rate, where an FFMA loop
// would issue one shared-memory load per two FMAs (docs/design.md, "Numerics").
// Non-finite operands give NaN where FFMA could give inf (x - big is NaN for x = inf); our fp32
// operands are finite unless x is not, and then LayerNorm has already made the row NaN.
struct Tf32Split {
  uint32_t big, small;
};
// The split by truncation: big = x with its low 13 mantissa bits cleared (one LOP3), and small =
// x - big (exact) with its low 13 bits cleared too, where cvt.rna.tf32.f32 is emulated on sm_90a by
// four instructions: 2 instructions a split instead of 7, at ~2^-21 instead of ~2^-22 relative
// error a product. small's mask states the tf32 operand contract (a tf32 operand's low bits are
// implementation-defined); ptxas drops it before the HMMA.
__device__ __forceinline__ Tf32Split split_tf32(float x) {
  const uint32_t big = __float_as_uint(x) & 0xffffe000u;
  return {big, __float_as_uint(x - __uint_as_float(big)) & 0xffffe000u};
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
// output column n and depth k (the Ffma mode's products).
template <int K, int NT, class BAt>
__device__ __forceinline__ void warp_mma_3xtf32(float (&acc)[NT][4], const float* A, int lda, BAt b_at) {
  static_assert(K % 8 == 0, "tf32 tiles are k8");
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  // Not unrolled: with two k steps in flight the fresh accumulators below spill in the fp32 fused
  // kernels (128 registers); one step at a time does not (docs/alternatives.md).
#pragma unroll 1
  for (int k = 0; k < K; k += 8) {
    Tf32Split a[4];
    a_frag_split(a, A, lda, k);
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      // Each k step's three products go into a fresh accumulator, added to acc with a rounded FADD:
      // the tensor cores' fp32 accumulation truncates (rounds toward zero), and accumulating all of K
      // there biases every step the same way (1e-5 relative error at D = 1024 against PyTorch's 5e-7,
      // past the exact-fp32 tolerance); here the truncation is only within 8 terms.
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
  } else {  // Ffma: 3xTF32
    warp_mma_3xtf32<K, NT>(acc, A, lda, [&](int n, int kk) { return B[n * ldb + kk]; });
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
  } else {  // Ffma: 3xTF32
    warp_mma_3xtf32<K, NT>(acc, A, lda, [&](int n, int kk) { return B[kk * ldb + n]; });
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

}  // namespace axial_fused
