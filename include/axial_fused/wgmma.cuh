// Hopper (sm_90a) warpgroup matrix products: wgmma with both operands in shared memory, stored
// K-major with the 128-byte swizzle, and the block-level product `wg_gemm` built on it (a resident A
// tile times a weight streamed from global memory through a ring of cp.async stages).
//
// Shared-memory operand layout ("SW128 K-major"), for 16-bit elements: a tile of R rows x K columns
// is stored as K/64 blocks of R x 64 elements (128 bytes per row); in each block, row r's 16-byte
// chunk c (elements 8c..8c+7) sits at r * 128 + ((c ^ (r % 8)) * 16) bytes. Blocks start on
// 1024-byte boundaries. This is the layout the wgmma descriptor's 128-byte swizzle mode reads with
// no bank conflicts; sw128_index() gives an element's position.
//
// The instructions only exist on sm_90a: their bodies compile to a trap elsewhere, and the host only
// launches kernels that use them on compute capability 9.0.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "axial_fused/warp_mma.cuh"

// The output projections' weight by tensor-map copies (wg_gemm_tma; AttnSm90::OUT_TMA and
// FusedSm90::OUT_TMA say where). 2, the default: the attention kernel at D <= 256, where it measured
// faster (session 12, msa, D = 256: 326.9 -> 316.2 us per pass; at D = 768 (esm) it was slower,
// 241.0 -> 251.6; the Hopper fused kernel at latent unchanged, 75.8 -> 76.0). 1: both kernels at
// every D (the session 11 experiment); 0: neither (cp.async projections only).
#ifndef AXIAL_FUSED_OUT_TMA
#define AXIAL_FUSED_OUT_TMA 2
#endif

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define AXIAL_FUSED_SM90 1
#else
#define AXIAL_FUSED_SM90 0
#endif

namespace axial_fused {

// Programmatic dependent launch (PDL). Each kernel begins with pdl_entry(): wait until the grid
// before it has finished and its writes are visible (griddepcontrol.wait, so nothing is read early),
// then let the next grid launch (griddepcontrol.launch_dependents). A kernel launched with the
// stream-serialization attribute (launch_with_smem) then has its launch and block scheduling overlap
// the previous grid's tail instead of following its end; without the attribute the wait returns at
// once. (Only the sm_90a build has the instructions.) Which launches get the attribute:
// -DAXIAL_FUSED_PDL=2, the default since session 19: the Hopper attention kernel after K1 only
// (vision fused_graph 67.2 -> 65.4 us, its eager call 71.1 -> 67.4; the other shapes within spread).
// =1 (sessions 11-12, 17): every launch (vision's gain, but msa, esm and seed's eager call slower).
// =0: none.
#ifndef AXIAL_FUSED_PDL
#define AXIAL_FUSED_PDL 2
#endif
__device__ __forceinline__ void pdl_entry() {
#if AXIAL_FUSED_PDL && AXIAL_FUSED_SM90
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Development aid: with -DAXIAL_FUSED_PHASE_CLOCK (AXIAL_FUSED_NVCC_FLAGS) each warpgroup of the first
// two blocks prints the clock cycles it spent in each phase: of the Hopper fused kernel, of every
// wg_gemm (the output projections; K1's product with -DAXIAL_FUSED_QKV_WS=0), and of K1's
// warp-specialized consumers (wg_gemm_ws_consume: "k1 clocks"). AXIAL_PHASE(i) adds the cycles since
// the last call to the local counter phase_[i] (declared with phase_last_ where the counting starts).
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


// Element index of (row r, column k) in an SW128 K-major tile of `ROWS` rows.
template <int ROWS>
__device__ __forceinline__ int sw128_index(int r, int k) {
  return (k >> 6) * ROWS * 64 + r * 64 + ((((k >> 3) & 7) ^ (r & 7)) << 3) + (k & 7);
}

// Matrix descriptor and row swizzle for a tile whose rows are exactly RB = 64 or 128 bytes (one
// 16-bit head of 32 or 64 elements per row; 128 is also each 64-column block of an SW128 tile):
// 64- or 128-byte swizzle, 8-row groups 8 * RB bytes apart. Used K-major (rows = M or N, 16-byte
// chunk c of row r at r * RB + ((c ^ swz_row<RB>(r)) * 16)), and N-major for a value tile (rows =
// keys, the K dimension; WgmmaRS with TRANS_B = 1), which is the same byte layout.
template <int RB>
__device__ __forceinline__ int swz_row(int r) {
  static_assert(RB == 64 || RB == 128, "64- or 128-byte rows");
  return RB == 128 ? (r & 7) : ((r >> 1) & 3);
}
// (32-byte rows, the 32-byte swizzle, only as K-major B of one k-step: K1's -DAXIAL_FUSED_QKV_TMA_KW=16.)
template <int RB>
__device__ __forceinline__ uint64_t swz_desc(uint32_t addr) {
  static_assert(RB == 32 || RB == 64 || RB == 128, "32-, 64- or 128-byte rows");
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((8 * RB) >> 4) << 32) |
         (uint64_t(RB == 128 ? 1 : RB == 64 ? 2 : 3) << 62);
}

// Matrix descriptor for an SW128 K-major operand starting at shared address `addr` (8-row groups
// 1024 bytes apart; the leading offset is unused in this mode).
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr) { return swz_desc<128>(addr); }

__device__ __forceinline__ void fence_proxy_async() {
#if AXIAL_FUSED_SM90
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_fence() {
#if AXIAL_FUSED_SM90
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if AXIAL_FUSED_SM90
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if AXIAL_FUSED_SM90
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Keeps the compiler from moving accesses of accumulator registers across the asynchronous wgmma
// issue/wait points.
template <int R>
__device__ __forceinline__ void fence_regs(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D (64 x N, fp32, in registers) = A (64 x 16) * B (N x 16)^T [+ D], A and B from shared memory.
// Accumulator layout: warp w of the warpgroup holds rows 16w..16w+15; in each 8-column block j,
// thread (g = lane / 4, t = lane % 4) holds d[4j..4j+3] = (g, 8j+2t), (g, 8j+2t+1), (g+8, 8j+2t),
// (g+8, 8j+2t+1): the mma.sync m16n8 layout, repeated.
template <class T, int N>
struct Wgmma;

#if AXIAL_FUSED_SM90
template <> struct Wgmma<__nv_bfloat16, 32> {
  static __device__ __forceinline__ void mma(float (&d)[16], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(a), "l"(b), "r"(accumulate));
  }
};

template <> struct Wgmma<__half, 32> {
  static __device__ __forceinline__ void mma(float (&d)[16], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(a), "l"(b), "r"(accumulate));
  }
};

template <> struct Wgmma<__nv_bfloat16, 64> {
  static __device__ __forceinline__ void mma(float (&d)[32], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a), "l"(b), "r"(accumulate));
  }
};

template <> struct Wgmma<__half, 64> {
  static __device__ __forceinline__ void mma(float (&d)[32], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a), "l"(b), "r"(accumulate));
  }
};

template <> struct Wgmma<__nv_bfloat16, 128> {
  static __device__ __forceinline__ void mma(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a), "l"(b), "r"(accumulate));
  }
};

template <> struct Wgmma<__half, 128> {
  static __device__ __forceinline__ void mma(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a), "l"(b), "r"(accumulate));
  }
};

template <> struct Wgmma<__nv_bfloat16, 96> {
  static __device__ __forceinline__ void mma(float (&d)[48], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, %48, %49, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
        : "l"(a), "l"(b), "r"(accumulate));
  }
};

template <> struct Wgmma<__half, 96> {
  static __device__ __forceinline__ void mma(float (&d)[48], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n96k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, %48, %49, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
        : "l"(a), "l"(b), "r"(accumulate));
  }
};

#else
template <class T, int N>
struct Wgmma {
  static __device__ __forceinline__ void mma(float (&)[N / 2], uint64_t, uint64_t, int) { __trap(); }
};
#endif

// D (64 x N, fp32) = A (64 x 16, registers) * B [+ D], B from shared memory: K-major (N x 16, the
// default) or, with TRANS_B = 1, N-major (16 x N: 16 rows of N contiguous elements, e.g. a value tile
// stored as it lies in memory). The A fragment of warp w (rows 16w..16w+15) is the mma.sync m16n8k16 A
// layout: a[0] = (g, 2t..2t+1), a[1] = (g + 8, 2t..), a[2] = (g, 2t+8..), a[3] = (g + 8, 2t+8..), two
// 16-bit values per register.
template <class T, int N>
struct WgmmaRS;

#if AXIAL_FUSED_SM90
template <> struct WgmmaRS<__nv_bfloat16, 32> {
  template <int TRANS_B = 0>
  static __device__ __forceinline__ void mma(float (&d)[16], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(TRANS_B));
  }
};

template <> struct WgmmaRS<__half, 32> {
  template <int TRANS_B = 0>
  static __device__ __forceinline__ void mma(float (&d)[16], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(TRANS_B));
  }
};

template <> struct WgmmaRS<__nv_bfloat16, 64> {
  template <int TRANS_B = 0>
  static __device__ __forceinline__ void mma(float (&d)[32], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(TRANS_B));
  }
};

template <> struct WgmmaRS<__half, 64> {
  template <int TRANS_B = 0>
  static __device__ __forceinline__ void mma(float (&d)[32], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(TRANS_B));
  }
};

template <> struct WgmmaRS<__nv_bfloat16, 128> {
  template <int TRANS_B = 0>
  static __device__ __forceinline__ void mma(float (&d)[64], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(TRANS_B));
  }
};

template <> struct WgmmaRS<__half, 128> {
  template <int TRANS_B = 0>
  static __device__ __forceinline__ void mma(float (&d)[64], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(TRANS_B));
  }
};
#else
template <class T, int N>
struct WgmmaRS {
  template <int TRANS_B = 0>
  static __device__ __forceinline__ void mma(float (&)[N / 2], const uint32_t (&)[4], uint64_t, int) { __trap(); }
};
#endif

template <class T>
__device__ __forceinline__ uint32_t pack2_u32(float a, float b) {
  typename Pack2<T>::type v = Pack2<T>::make(a, b);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Keeps A-fragment registers of an asynchronous wgmma alive (unmodified, not reused) until this point:
// placed after the wgmma_wait that retires the products reading them.
template <int N>
__device__ __forceinline__ void keep_regs(const uint32_t (&a)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" ::"r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]) : "memory");
}

// The A fragments of k-step kk (columns 16kk..16kk+15) from a wgmma accumulator (same layout as its
// rows/columns), starting at 8-column block j0: blocks j0 + 2kk and j0 + 2kk + 1.
template <class T, int R>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&acc)[R], int j0, int kk) {
  const int j = j0 + 2 * kk;
  a[0] = pack2_u32<T>(acc[4 * j], acc[4 * j + 1]);
  a[1] = pack2_u32<T>(acc[4 * j + 2], acc[4 * j + 3]);
  a[2] = pack2_u32<T>(acc[4 * j + 4], acc[4 * j + 5]);
  a[3] = pack2_u32<T>(acc[4 * j + 6], acc[4 * j + 7]);
}

// The maxima of this thread's two rows (g: mx[0], g + 8: mx[1]) of a 64 x (R / 2) wgmma accumulator,
// reduced over the quad that holds each row (NaN-ignoring, as fmaxf).
template <int R>
__device__ __forceinline__ void acc_row_max(const float (&acc)[R], float (&mx)[2]) {
  mx[0] = mx[1] = -INFINITY;
#pragma unroll
  for (int jb = 0; jb < R / 4; ++jb) {
    mx[0] = fmaxf(mx[0], fmaxf(acc[4 * jb], acc[4 * jb + 1]));
    mx[1] = fmaxf(mx[1], fmaxf(acc[4 * jb + 2], acc[4 * jb + 3]));
  }
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
    mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
  }
}

// Moves this warpgroup's registers per thread down to / up to N (every thread of the warpgroup
// executes it; an increase waits until other warpgroups' decreases have freed enough).
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
#if AXIAL_FUSED_SM90
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
#if AXIAL_FUSED_SM90
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

// Barrier over the 128 threads of warpgroup wg alone (named barrier 1 + wg; 0 is __syncthreads).
__device__ __forceinline__ void warpgroup_sync(int wg) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
}
// Named barrier `id` over `count` threads: wait (sync) or only signal (arrive).
__device__ __forceinline__ void named_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// Shared-memory mbarriers (8 bytes each, at shared addresses from smem_u32): init by one thread
// before a block barrier; arrive; wait for the phase of the given parity to complete; and
// cp_async_mbar_arrive, an arrival that fires once all of this thread's earlier cp.async have landed
// (.noinc: the init count includes these arrivals).
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
#if AXIAL_FUSED_SM90
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
#if AXIAL_FUSED_SM90
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
#endif
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
#if AXIAL_FUSED_SM90
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
#endif
}
__device__ __forceinline__ void cp_async_mbar_arrive(uint32_t bar) {
#if AXIAL_FUSED_SM90
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
#endif
}

// Thread-block clusters and the tensor-memory accelerator (K1's cluster form, QkvSm90::TMA): this
// block's rank in its cluster; a barrier over every thread of the cluster (release / acquire); the
// fence that makes mbarrier inits visible cluster-wide; an arrival that also expects `bytes` of
// transactions; an arrival on the mbarrier at the same shared offset in
// cluster block `cta` (default, CTA-scope release semantics, as CUTLASS's ClusterBarrier: the
// arriving warp's wgmma reads of the stage are complete by then; `.release.cluster` would cost a
// GPU-wide MEMBAR per arrival); and a 2-D tensor-map box multicast to the blocks in `mask`, each
// completing its bytes on its own mbarrier at `bar`.
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r = 0;
#if AXIAL_FUSED_SM90
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
#endif
  return r;
}
__device__ __forceinline__ void cluster_sync() {
#if AXIAL_FUSED_SM90
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void fence_mbar_init_cluster() {
#if AXIAL_FUSED_SM90
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#if AXIAL_FUSED_SM90
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t cta) {
#if AXIAL_FUSED_SM90
  asm volatile(
      "{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
      "r"(cta)
      : "memory");
#endif
}
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const void* map, int c0, int c1, uint32_t bar,
                                                      uint16_t mask) {
#if AXIAL_FUSED_SM90
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
      : "memory");
#endif
}

// One box of a 2-D tensor map into this block's shared memory (`dst`), completing on mbarrier `bar`.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void* map, int c0, int c1, uint32_t bar) {
#if AXIAL_FUSED_SM90
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
#endif
}

// Tile stores through shared memory (K1's -DAXIAL_FUSED_QKV_TMA_STORE experiment): stmatrix writes
// four 8 x 8 16-bit matrices from mma-layout fragments (lanes 8k..8k+7 give matrix k's row
// addresses); a tensor-map store copies a staged box to global memory in the background (bulk
// groups: commit, then wait until their shared-memory reads, or the whole writes, are done).
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
#if AXIAL_FUSED_SM90
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
#endif
}
__device__ __forceinline__ void tma_store_2d(const void* map, uint32_t src, int c0, int c1) {
#if AXIAL_FUSED_SM90
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(src), "r"(c0), "r"(c1)
               : "memory");
#endif
}
__device__ __forceinline__ void bulk_commit() {
#if AXIAL_FUSED_SM90
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}
// Waits until at most N bulk groups are pending: READ, their shared-memory reads only.
template <int N, bool READ = false>
__device__ __forceinline__ void bulk_wait() {
#if AXIAL_FUSED_SM90
  if constexpr (READ) {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
  } else {
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
  }
#endif
}

// The 8 consecutive outputs (rounded to T) of one row of 8-column block jb + t (t = lane % 4), from
// the accumulator pairs the quad's four threads hold for blocks jb..jb+3 (h = 0: row g, 2: row g + 8):
// a 4 x 4 transpose within the quad. Lane t holds M[t][i] (its pair of block jb + i) and wants
// M[i][t]: two butterfly rounds (lanes t ^ 2, then t ^ 1), each swapping the two entries whose index
// differs from t in that bit; four shuffles and selects on the lane's bits. The first form (three
// shuffles, each source and slot picked by a runtime index) compiled to chains of selects and
// branches: ~700 instructions per 64 x 128 chunk epilogue. -DAXIAL_FUSED_EPI_BFLY=0 restores it.
#ifndef AXIAL_FUSED_EPI_BFLY
#define AXIAL_FUSED_EPI_BFLY 1
#endif
template <class T, int R>
__device__ __forceinline__ uint4 quad_transpose(const float (&acc)[R], int jb, int h) {
  const int t = threadIdx.x & 3;
  uint32_t v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    typename Pack2<T>::type pr = Pack2<T>::make(acc[4 * (jb + i) + h], acc[4 * (jb + i) + h + 1]);
    v[i] = *reinterpret_cast<uint32_t*>(&pr);
  }
#if AXIAL_FUSED_EPI_BFLY
#pragma unroll
  for (int bit = 2; bit >= 1; bit >>= 1) {
    const bool up = t & bit;  // this lane keeps the entries with that index bit set, sends the others
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (i & bit) continue;
      const uint32_t got = __shfl_xor_sync(0xffffffffu, up ? v[i] : v[i + bit], bit);
      v[i] = up ? got : v[i];
      v[i + bit] = up ? v[i + bit] : got;
    }
  }
  return make_uint4(v[0], v[1], v[2], v[3]);
#else
  auto pick = [&](int i) { return i == 0 ? v[0] : i == 1 ? v[1] : i == 2 ? v[2] : v[3]; };
  // r[k] comes from thread t ^ k: its pair of block jb + t, which belongs in slot t ^ k.
  const uint32_t r0 = pick(t), r1 = __shfl_xor_sync(0xffffffffu, pick(t ^ 1), 1),
                 r2 = __shfl_xor_sync(0xffffffffu, pick(t ^ 2), 2), r3 = __shfl_xor_sync(0xffffffffu, pick(t ^ 3), 3);
  auto slot = [&](int s) {
    const int k = s ^ t;
    return k == 0 ? r0 : k == 1 ? r1 : k == 2 ? r2 : r3;
  };
  return make_uint4(slot(0), slot(1), slot(2), slot(3));
#endif
}

// An epilogue with addend(r, c) -> float2 and store(r, c, y0, y1, addend): wg_gemm loads every addend
// of a column chunk before that chunk's products (OutEpilogue: bias + residual).
template <class E, class = void>
struct HasAddend : std::false_type {};
template <class E>
struct HasAddend<E, std::void_t<decltype(std::declval<const E&>().addend(0, 0))>> : std::true_type {};
// What addend() returns (float2 where there is none: the array is then unused).
template <class E, bool HAS>
struct AddendOf {
  using type = float2;
};
template <class E>
struct AddendOf<E, true> {
  using type = decltype(std::declval<const E&>().addend(0, 0));
};

// One thread's share of copying CN x KW chunks of an N x K weight into swizzled stages (SW64 for
// KW = 32, SW128 for 64) when THREADS threads split each chunk into passes of RPP rows: rows lr,
// lr + RPP, ... and 16-byte piece lc, so the source pointer and stage offset are computed once and a
// chunk costs PASSES cp.async (FITS: the split is exact and every pass has the same swizzle phase).
template <class T, int THREADS, int CN, int K, int KW>
struct ChunkCopy {
  static constexpr int RB = KW * 2, CPR = KW / 8, RPP = THREADS / CPR, PASSES = CN / RPP;
  static constexpr bool FITS = THREADS % CPR == 0 && CN % RPP == 0 && RPP % 8 == 0;
  const T* src;
  uint32_t dst;
  __device__ __forceinline__ ChunkCopy(const T* W, const void* ws, int tid) {
    const int lr = tid / CPR, lc = tid % CPR;
    src = W + int64_t(lr) * K + lc * 8;
    dst = smem_u32(ws) + lr * RB + ((lc ^ swz_row<RB>(lr)) << 4);
  }
  // The chunk at row n0, column k0 of W into the stage `stage` bytes past ws.
  __device__ __forceinline__ void operator()(int n0, int k0, uint32_t stage) const {
    const T* from = src + int64_t(n0) * K + k0;
#pragma unroll
    for (int j = 0; j < PASSES; ++j) cp_async16_shared(dst + stage + j * RPP * RB, from + int64_t(j) * RPP * K);
  }
};

// A warp's 16 x BNW accumulator tile (rows r0, r0 + 8 of the quad layout; t = lane % 4) as 16-byte
// vectors: epi(row, col, uint4) with 8 consecutive outputs rounded to T.
template <class T, int BNW, class Epi>
__device__ __forceinline__ void store_vec8(const float (&acc)[BNW / 2], int r0, int n0, int t, Epi& epi) {
#pragma unroll
  for (int jb = 0; jb < BNW / 8; jb += 4) {
    epi(r0, n0 + (jb + t) * 8, quad_transpose<T>(acc, jb, 0));
    epi(r0 + 8, n0 + (jb + t) * 8, quad_transpose<T>(acc, jb, 2));
  }
}

// One warpgroup's 64 x BNW accumulator tile (rows row0.., columns col0.. of the tensor `map`
// describes) stored through shared memory in rounds of 64 x SUB: stmatrix into one of two staging
// buffers at `buf` (each 64 rows of SUB * 2 bytes, laid out as the map's SUB * 2-byte swizzle),
// then one tensor-map store by the warpgroup's first thread, which the warps do not wait for. Round
// i uses buffer (round0 + i) % 2; before the warpgroup barrier that ends a round, its first thread
// waits until the previous round's store has read the other buffer, which the next round writes.
// Rows past the tensor's end are clipped by the copy engine. `bar`: this warpgroup's named barrier.
// Before the block exits, its first thread must wait for every store (bulk_wait<0>).
template <class T, int BNW, int SUB>
__device__ __forceinline__ void store_tile_tma(const float (&acc)[BNW / 2], uint32_t buf, const void* map, int col0,
                                               int row0, int round0, int bar) {
  static_assert(SUB == 16 || SUB == 32 || SUB == 64, "staging rows of 32, 64 or 128 bytes");
  constexpr int ROWB = SUB * 2, BUFB = 64 * ROWB, XM = ROWB / 16 - 1;  // XM: the swizzle's row-phase mask
  const int lane = threadIdx.x & 31, k = lane >> 3;
  const bool leader = (threadIdx.x & 127) == 0;
  const int row = ((threadIdx.x >> 5) & 3) * 16 + (lane & 7) + 8 * (k & 1);  // matrix k: rows 0-7 or 8-15
#pragma unroll
  for (int i = 0; i < BNW / SUB; ++i) {
    const uint32_t b = buf + ((round0 + i) & 1) * BUFB;
#pragma unroll
    for (int q = 0; q < SUB / 16; ++q) {
      const int j = i * (SUB / 8) + 2 * q;  // accumulator 8-column blocks j (matrices 0, 1) and j + 1 (2, 3)
      uint32_t off = row * ROWB + (2 * q + (k >> 1)) * 16;
      off ^= ((off >> 7) & XM) << 4;  // the copy engine's swizzle: 16-byte piece ^= 128-byte line index
      stmatrix_x4(b + off, pack2_u32<T>(acc[4 * j], acc[4 * j + 1]), pack2_u32<T>(acc[4 * j + 2], acc[4 * j + 3]),
                  pack2_u32<T>(acc[4 * j + 4], acc[4 * j + 5]), pack2_u32<T>(acc[4 * j + 6], acc[4 * j + 7]));
    }
    fence_proxy_async();  // this thread's staging writes, visible to the copy engine
    if (leader) bulk_wait<0, true>();
    named_sync(bar, 128);
    if (leader) {
      tma_store_2d(map, b, col0 + i * SUB, row0);
      bulk_commit();
    }
  }
}

// Epilogues that store whole accumulator tiles (tile(acc, row, col, nc)) instead of 16-byte vectors.
template <class E, class = void>
struct HasTile : std::false_type {};
template <class E>
struct HasTile<E, std::void_t<decltype(&E::template tile<64>)>> : std::true_type {};

// A column chunk's addends (an epilogue with addend(): bias + residual), issued before its products
// so the loads are in flight while they run; r0, n0: this thread's first row and the warpgroup's first
// column of the chunk.
template <int BNW, class Epi, class Add>
__device__ __forceinline__ void load_addends(const Epi& epi, Add (&add)[BNW / 8][2], int r0, int n0, int t) {
#pragma unroll
  for (int j = 0; j < BNW / 8; ++j) {
    add[j][0] = epi.addend(r0, n0 + j * 8 + 2 * t);
    add[j][1] = epi.addend(r0 + 8, n0 + j * 8 + 2 * t);
  }
}

// A column chunk's finished accumulators out through the epilogue (see wg_gemm: VEC8, addends
// folded in, or pairs).
template <class T, int BNW, bool VEC8, bool PREFETCH, class Epi, class Add>
__device__ __forceinline__ void chunk_epilogue(float (&acc)[BNW / 2], Add (&add)[PREFETCH ? BNW / 8 : 1][2], int r0,
                                               int n0, int t, Epi& epi) {
  if constexpr (VEC8) {
    store_vec8<T, BNW>(acc, r0, n0, t, epi);
  } else if constexpr (PREFETCH) {  // the addends folded in, then 16-byte output stores
#pragma unroll
    for (int j = 0; j < BNW / 8; ++j) {
      epi.fold(acc[4 * j], acc[4 * j + 1], add[j][0]);
      epi.fold(acc[4 * j + 2], acc[4 * j + 3], add[j][1]);
    }
    store_vec8<T, BNW>(acc, r0, n0, t, epi);
  } else {
#pragma unroll
    for (int j = 0; j < BNW / 8; ++j) {
      epi(r0, n0 + j * 8 + 2 * t, acc[4 * j], acc[4 * j + 1]);
      epi(r0 + 8, n0 + j * 8 + 2 * t, acc[4 * j + 2], acc[4 * j + 3]);
    }
  }
}

// Y (BM x N) = A @ W^T with wgmma, for a block of WGM * WGN warpgroups (128 or 256 threads).
//   A: BM x K, SW128 K-major in shared memory (1024-byte aligned), BM = 64 * WGM.
//   W: N x K, row-major in global memory (an nn.Linear weight), streamed in chunks of CN = WGN * BNW
//      rows x KW columns through S >= 3 shared stages at `ws` (each CN x KW: SW128 for KW = 64, SW64
//      for KW = 32; 1024-aligned). KW = 32 halves a stage, so wider chunks (or deeper rings, or two
//      blocks per SM) fit beside a large A; the barriers per product stay the same per flop.
// Warpgroup wg computes rows [64 (wg % WGM), +64) and chunk columns [BNW (wg / WGM), +BNW).
// epi(row, col, y[row][col], y[row][col+1]) receives every pair; with VEC8, epi(row, col, uint4)
// receives 8 consecutive outputs (col a multiple of 8) rounded to T, for 16-byte stores; an epilogue
// with addend() (HasAddend) gets its addends loaded before each column chunk's products.
// Pipeline: one wgmma group stays in flight across each barrier (wait_group 1), so a stage is
// refilled two iterations after its use; S - 2 chunks are in flight while one is multiplied.
// prologue() runs once the first S - 2 chunks are requested
// (their cp.async groups are the newest S - 2); A must be written and fenced (fence_proxy_async)
// by the end of it. Ends with all wgmma done; `ws` is free once the caller synchronises.
// With an addend epilogue (the output projections' bias + residual), the addends are folded into the
// accumulators and the outputs stored as 16-byte vectors (store_vec8: one STG.E.128 per 8 outputs)
// instead of one 4-byte store per pair: a quarter of the store instructions in the phase where every
// block stores at once. Measured (session 9): esm's attention kernels 338 / 183 -> 331 / 176 us,
// latent's fused passes 81 -> 79 us.
template <class T, int WGM, int WGN, int BNW, int N, int K, int S, bool VEC8 = false, int KW = 64, class Epi,
          class Prologue>
__device__ __forceinline__ void wg_gemm(const T* A, const T* W, T* ws, Epi&& epi, Prologue&& prologue) {
  static_assert(WGM * WGN <= 2 && (BNW == 32 || BNW == 64 || BNW == 128) && S >= 3, "1-2 warpgroups; n32/64/128 tiles");
  static_assert(KW == 32 || KW == 64, "32- or 64-column weight chunks");
  constexpr int BM = 64 * WGM, CN = WGN * BNW, KC = K / KW, ITERS = (N / CN) * KC, THREADS = 128 * WGM * WGN;
  constexpr int RB = KW * 2, CPR = KW / 8;  // bytes and 16-byte pieces per weight-chunk row
  static_assert(N % CN == 0 && K % 64 == 0, "weight chunks must tile the weight");
  const int wg = threadIdx.x >> 7, wm = wg % WGM, wn = wg / WGM;
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const uint32_t a_base = smem_u32(A) + wm * 64 * 128, w_base = smem_u32(ws) + wn * BNW * RB;

  // Every thread copies the same rows and 16-byte piece of each chunk, so its source pointer and
  // stage offset are computed once and each chunk costs PASSES unrolled cp.async plus one 64-bit add
  // (ncu had put 69% of esm K1's stall samples in the general copy loop's index arithmetic, branches
  // and barrier). Measured (session 8): esm K1 434 -> 413 us, esm's attention kernels 389 / 215 ->
  // 364 / 186, latent's fused kernel 87.5 -> 81 us per pass (docs/performance.md).
  // -DAXIAL_FUSED_WG_LOAD_HOIST=0 restores the general loop.
#ifndef AXIAL_FUSED_WG_LOAD_HOIST
#define AXIAL_FUSED_WG_LOAD_HOIST 1
#endif
  using Copy = ChunkCopy<T, THREADS, CN, K, KW>;
  constexpr bool HOIST = AXIAL_FUSED_WG_LOAD_HOIST && Copy::FITS;
  const Copy copy(W, ws, threadIdx.x);

  auto load = [&](int it) {
    if (it < ITERS) {
      const int n0 = (it / KC) * CN, k0 = (it % KC) * KW;
      if constexpr (HOIST) {
        copy(n0, k0, (it % S) * (CN * RB));
      } else {
        char* dst = reinterpret_cast<char*>(ws) + (it % S) * CN * RB;
        for (int v = threadIdx.x; v < CN * CPR; v += THREADS) {
          const int r = v / CPR, c = v % CPR;
          cp_async16(dst + r * RB + ((c ^ swz_row<RB>(r)) << 4), W + int64_t(n0 + r) * K + k0 + c * 8, true);
        }
      }
    }
    cp_async_commit();  // possibly empty: keeps the group count per iteration uniform
  };

  float acc[BNW / 2];
#pragma unroll
  for (int i = 0; i < BNW / 2; ++i) acc[i] = 0.f;
#pragma unroll
  for (int s = 0; s < S - 2; ++s) load(s);
#ifdef AXIAL_FUSED_PHASE_CLOCK
  long long phase_[6] = {}, phase_last_ = clock64();
#endif
  prologue();  // e.g. finish writing A while the first weight chunks are in flight
  AXIAL_PHASE(0);
  constexpr bool PREFETCH = HasAddend<std::decay_t<Epi>>::value;
  using Add = typename AddendOf<std::decay_t<Epi>, PREFETCH>::type;
  Add add[PREFETCH ? BNW / 8 : 1][2];
  for (int nc = 0; nc < N / CN; ++nc) {
    if constexpr (PREFETCH) {  // the chunk's addends, in flight while its products run (load_addends,
      // written out: the call changed one kernel's instruction schedule, attn_out_kernel at 192x6 fp16)
      const int n0 = nc * CN + wn * BNW, r0 = wm * 64 + warp * 16 + g;
#pragma unroll
      for (int j = 0; j < BNW / 8; ++j) {
        add[j][0] = epi.addend(r0, n0 + j * 8 + 2 * t);
        add[j][1] = epi.addend(r0 + 8, n0 + j * 8 + 2 * t);
      }
      AXIAL_PHASE(1);
    }
    for (int kc = 0; kc < KC; ++kc) {
      const int it = nc * KC + kc;
      cp_async_wait<S - 3>();  // this thread's copies of chunk `it` have landed
      fence_proxy_async();     // ... and are visible to the tensor cores
      __syncthreads();         // everyone's have; wgmma(it - 2) is done in both warpgroups
      AXIAL_PHASE(2);
      load(it + S - 2);        // refill the stage chunk it - 2 used
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < KW / 16; ++kk) {
        const int ka = kc * KW + kk * 16;  // A column: 64-column block ka / 64, 32 bytes per k-step in it
        Wgmma<T, BNW>::mma(acc, sw128_desc(a_base + (ka >> 6) * BM * 128 + (ka & 63) * 2),
                           swz_desc<RB>(w_base + (it % S) * CN * RB + kk * 32), kc > 0 || kk > 0);
      }
      wgmma_commit();
      AXIAL_PHASE(3);
      wgmma_wait<1>();
      AXIAL_PHASE(4);
    }
    wgmma_wait<0>();
    fence_regs(acc);
    AXIAL_PHASE(4);
    chunk_epilogue<T, BNW, VEC8, PREFETCH>(acc, add, wm * 64 + warp * 16 + g, nc * CN + wn * BNW, t, epi);
    AXIAL_PHASE(5);
  }
  cp_async_wait<0>();
#ifdef AXIAL_FUSED_PHASE_CLOCK
  if (blockIdx.x < 2 && (threadIdx.x & 127) == 0)
    printf("wg_gemm clocks N %d K %d BNW %d S %d block %d wg %d: loads+prologue %lld addends %lld wait+sync %lld "
           "issue %lld mma-wait %lld epilogue %lld\n", N, K, BNW, S, int(blockIdx.x), int(threadIdx.x >> 7), phase_[0],
           phase_[1], phase_[2], phase_[3], phase_[4], phase_[5]);
#endif
}

// Warp-specialized form of wg_gemm (K1's product; -DAXIAL_FUSED_QKV_WS=0 puts K1 back on wg_gemm).
// The same product, Y = A @ W^T with VEC8 epilogues, but the weight chunks (CN x KW, KW = 32, SW64) come from one producer warp, and
// each stage has two mbarriers: full[s] (32 arrivals: each producer lane's cp.async of the chunk have
// landed) and empty[s] (8 arrivals: every consumer warp's wgmma that read it are done). The consumer
// warpgroups then pay per step a barrier wait, a proxy fence and their wgmma, instead of a block
// barrier and the copy loop (ncu: ~130 instructions per step per warp at esm, docs/performance.md).
// `full` and `empty` are the shared addresses of S consecutive mbarriers each.
//
// Producer: the one extra warp; refills stage s once its previous chunk is released. Each lane copies
// rows lr, lr + 8, ... of the chunk (its 16-byte piece lc), so its addresses are computed once.
// Timing diagnostics of the warp-specialized product (-DAXIAL_FUSED_DIAG_K1=bits; WRONG RESULTS, for
// scripts/variants.sh with TESTS="" only): 1 = the producer copies nothing (the consumers' ceiling),
// 2 = K1 stores no q/k/v (pass_kernel.cuh), 4 = the consumers skip the per-step proxy fence,
// 8 = K1's stores all land in 64 tiles' worth of scratch (L2-resident; pass_kernel.cuh).
#ifndef AXIAL_FUSED_DIAG_K1
#define AXIAL_FUSED_DIAG_K1 0
#endif

template <class T, int CN, int N, int K, int S, int KW>
__device__ __forceinline__ void wg_gemm_ws_produce(const T* W, T* ws, uint32_t full, uint32_t empty) {
  static_assert(KW == 32, "the producer's address pattern assumes 64-byte chunk rows");
  using Copy = ChunkCopy<T, 32, CN, K, KW>;
  static_assert(Copy::FITS, "every pass of the warp has the same swizzle phase");
  constexpr int KC = K / KW, ITERS = (N / CN) * KC;
  const Copy copy(W, ws, threadIdx.x & 31);
  for (int it = 0; it < ITERS; ++it) {
    const int s = it % S;
    if (it >= S) mbar_wait(empty + 8 * s, ((it / S) - 1) & 1);  // the chunk it - S is released
    if constexpr (!(AXIAL_FUSED_DIAG_K1 & 1)) copy((it / KC) * CN, (it % KC) * KW, s * (CN * Copy::RB));
    cp_async_mbar_arrive(full + 8 * s);
  }
  cp_async_wait<0>();
}

// K1's cluster form (QkvSm90::TMA, D >= 512; written in session 8, measured and adopted in session 9):
// K1 in clusters of two blocks (two token tiles) that share every weight chunk. Each
// block's producer thread loads half of the chunk's CN rows with one tensor-map copy (TMA, the
// 64-byte swizzle done by the copy engine) multicast into both blocks' stage, so each block reads
// half the weight from L2 (esm: 906 -> 453 MB per pass; the diagnostic without weight copies was 86
// us per pass faster there). full[s] (1 arrival: the local producer's, expecting the whole chunk's
// bytes, half from each block's copy); empty[s] (16 arrivals: every consumer warp of both blocks,
// since either block's copy writes into both). `map` is the weight's tensor map (box KW x CN / 2).
// Kernel experiment (session 10, default off; session 11: esm K1 285 -> 421 us, not adopted):
// -DAXIAL_FUSED_QKV_CLUSTER=4, clusters of four blocks, each loading a quarter of every chunk into all four (L2 weight reads halved again;
// `empty` takes 32 arrivals). In general: kQkvCluster blocks, CN / kQkvCluster rows each.
#ifndef AXIAL_FUSED_QKV_CLUSTER
#define AXIAL_FUSED_QKV_CLUSTER 2
#endif
constexpr int kQkvCluster = AXIAL_FUSED_QKV_CLUSTER;
static_assert(kQkvCluster == 2 || kQkvCluster == 4, "K1 clusters of 2 or 4 blocks");
// Stages S0 .. S - 1 (K1's -DAXIAL_FUSED_QKV_RS experiment) are not free at the start: their first
// fill waits for one release more (the consumers', once they no longer read that memory).
template <int CN, int N, int K, int S, int KW, int S0 = S>
__device__ __forceinline__ void wg_gemm_tma_produce(const void* map, uint32_t ws, uint32_t full, uint32_t empty,
                                                    uint32_t rank) {
  constexpr int KC = K / KW, ITERS = (N / CN) * KC, PART = CN / kQkvCluster;
  constexpr uint32_t STAGE = CN * KW * 2;
  for (int it = 0; it < ITERS; ++it) {
    const int s = it % S;
    if (S0 < S && s >= S0) {
      mbar_wait(empty + 8 * s, (it / S) & 1);  // the memory is free (round 0) or chunk it - S released
    } else if (it >= S) {
      mbar_wait(empty + 8 * s, ((it / S) - 1) & 1);  // every block released chunk it - S
    }
    mbar_arrive_expect_tx(full + 8 * s, STAGE);
    tma_load_2d_multicast(ws + s * STAGE + rank * (PART * KW * 2), map, (it % KC) * KW, (it / KC) * CN + rank * PART,
                          full + 8 * s, (1 << kQkvCluster) - 1);
  }
}

// A consumer warp's release of a stage (lane 0): this block's `empty`, and with TMA the other blocks'.
template <bool TMA>
__device__ __forceinline__ void ws_release(uint32_t bar) {
  mbar_arrive(bar);
  if constexpr (TMA) {
#pragma unroll
    for (int r = 1; r < kQkvCluster; ++r) mbar_arrive_cluster(bar, cluster_rank() ^ r);
  }
}

// One weight step of the consumers (chunk `it`, the kc-th of its column chunk): wait until the stage's
// chunk has landed, make it visible to the tensor cores, issue its products into acc (kc = 0
// overwrites). Not committed.
// (Chunks written by the copy engine, TMA, are in the async proxy already: no proxy fence.)
template <class T, int BM, int BNW, int CN, int S, int KW, bool TMA = false>
__device__ __forceinline__ void ws_step(float (&acc)[BNW / 2], uint32_t a_base, uint32_t w_base, uint32_t full, int it,
                                        int kc) {
  constexpr int RB = KW * 2;
  const int s = it % S;
  mbar_wait(full + 8 * s, (it / S) & 1);
  if constexpr (!(AXIAL_FUSED_DIAG_K1 & 4) && !TMA) fence_proxy_async();
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < KW / 16; ++kk) {
    const int ka = kc * KW + kk * 16;
    Wgmma<T, BNW>::mma(acc, sw128_desc(a_base + (ka >> 6) * BM * 128 + (ka & 63) * 2),
                       swz_desc<RB>(w_base + s * CN * RB + kk * 32), kc > 0 || kk > 0);
  }
}

// Consumers: the WGM x WGN = 2 warpgroups (threads 0 .. 255) over A, as wg_gemm; A must be written and
// fenced, and visible to both, before the call.
// With TMA (K1's cluster form) each release also goes to the other block's `empty`.
// KR > 0 (K1's -DAXIAL_FUSED_QKV_RS experiment): each thread first loads its rows' A fragments of
// k-steps 0 .. KR - 1 into registers (wgmma's register-A form takes them from there), then releases
// stages S0 .. S - 1, which lie over that part of A; the k loop is unrolled so the fragments stay
// in registers.
template <class T, int WGM, int WGN, int BNW, int N, int K, int S, int KW, bool TMA = false, int KR = 0, int S0 = S,
          class Epi>
__device__ __forceinline__ void wg_gemm_ws_consume(const T* A, const T* ws, uint32_t full, uint32_t empty, Epi&& epi) {
  // Two warpgroups: each `empty` mbarrier expects one arrival from each of their 8 warps.
  static_assert(WGM * WGN == 2 && (BNW == 64 || BNW == 128) && S >= 2 && (KW == 32 || (TMA && KW == 16)),
                "2 warpgroups; n64/128 tiles; 16-deep chunks only from tensor-map copies");
  constexpr int BM = 64 * WGM, CN = WGN * BNW, KC = K / KW, RB = KW * 2;
  static_assert(N % CN == 0 && K % 64 == 0, "weight chunks must tile the weight");
  const int wg = threadIdx.x >> 7, wm = wg % WGM, wn = wg / WGM;
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const uint32_t a_base = smem_u32(A) + wm * 64 * 128, w_base = smem_u32(ws) + wn * BNW * RB;
  float acc[BNW / 2];
#pragma unroll
  for (int i = 0; i < BNW / 2; ++i) acc[i] = 0.f;
  static_assert(KR == 0 || (KR % (KW / 16) == 0 && KR * 16 < K && S0 < S), "register A: whole chunks, some in smem");
  uint32_t af[KR > 0 ? KR : 1][4];
  if constexpr (KR > 0) {
    const int r = wm * 64 + warp * 16 + g;
#pragma unroll
    for (int ks = 0; ks < KR; ++ks) {
      const int k = ks * 16 + 2 * t;
      af[ks][0] = *reinterpret_cast<const uint32_t*>(A + sw128_index<BM>(r, k));
      af[ks][1] = *reinterpret_cast<const uint32_t*>(A + sw128_index<BM>(r + 8, k));
      af[ks][2] = *reinterpret_cast<const uint32_t*>(A + sw128_index<BM>(r, k + 8));
      af[ks][3] = *reinterpret_cast<const uint32_t*>(A + sw128_index<BM>(r + 8, k + 8));
    }
    fence_proxy_async();  // these reads before the copy engine's writes into the same bytes
    __syncwarp();
    if (lane == 0)
      for (int s = S0; s < S; ++s) ws_release<TMA>(empty + 8 * s);
  }
#ifdef AXIAL_FUSED_PHASE_CLOCK
  long long phase_[3] = {}, phase_last_ = clock64();
#endif
  // One weight chunk: wait for it, issue its products (register A for k-steps below KR), commit, and
  // release the chunk before it once its products are done.
  auto step = [&](int nc, int kc) {
    const int it = nc * KC + kc;
    if (KR > 0 && kc * (KW / 16) < KR) {
      const int s = it % S;
      mbar_wait(full + 8 * s, (it / S) & 1);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < KW / 16; ++kk)
        WgmmaRS<T, BNW>::mma(acc, af[kc * (KW / 16) + kk], swz_desc<RB>(w_base + s * CN * RB + kk * 32),
                             kc > 0 || kk > 0);
    } else {
      ws_step<T, BM, BNW, CN, S, KW, TMA>(acc, a_base, w_base, full, it, kc);
    }
    wgmma_commit();
    AXIAL_PHASE(0);
    wgmma_wait<1>();  // the products of chunk it - 1 are done: release its stage
    if (kc > 0 && lane == 0) ws_release<TMA>(empty + 8 * ((it - 1) % S));
    AXIAL_PHASE(1);
  };
  for (int nc = 0; nc < N / CN; ++nc) {
    if constexpr (KR > 0) {
#pragma unroll
      for (int kc = 0; kc < KC; ++kc) step(nc, kc);
    } else {
      for (int kc = 0; kc < KC; ++kc) step(nc, kc);
    }
    wgmma_wait<0>();
    fence_regs(acc);
    AXIAL_PHASE(1);
    if (lane == 0) ws_release<TMA>(empty + 8 * (((nc + 1) * KC - 1) % S));  // the column chunk's last stage
    if constexpr (HasTile<std::decay_t<Epi>>::value) {
      epi.template tile<BNW>(acc, wm * 64, nc * CN + wn * BNW, nc);
    } else {
      store_vec8<T, BNW>(acc, wm * 64 + warp * 16 + g, nc * CN + wn * BNW, t, epi);
    }
    AXIAL_PHASE(2);
  }
#ifdef AXIAL_FUSED_PHASE_CLOCK
  if (blockIdx.x < 2 && (threadIdx.x & 127) == 0)
    printf("k1 clocks N %d K %d BNW %d KW %d S %d block %d wg %d: stage-wait+issue %lld mma-wait %lld epilogue %lld\n",
           N, K, BNW, KW, S, int(blockIdx.x), int(threadIdx.x >> 7), phase_[0], phase_[1], phase_[2]);
#endif
}

// wg_gemm_tma's mbarriers, S of each kind at `full` and `empty` in memory nothing else uses any more:
// initialised by thread 0, then a block barrier (every thread of the block calls this).
template <int S>
__device__ __forceinline__ void out_tma_barriers(uint32_t full, uint32_t empty) {
  if (threadIdx.x == 0) {
    for (int k = 0; k < S; ++k) {
      mbar_init(full + 8 * k, 1);
      mbar_init(empty + 8 * k, 8);
    }
    fence_mbar_init_cluster();
  }
  __syncthreads();
}

// wg_gemm with the weight chunks loaded by tensor-map copies (the output projections where
// AXIAL_FUSED_OUT_TMA, above, puts them; written in session 11, measured in session 12): thread 0 of the block issues each chunk's copy
// (`map`: W with boxes of KW x CN, the KW * 2-byte swizzle, encode_weight_map) into stage it % S, which
// signals `full[s]` (the chunk's bytes), and refills a stage once every warp has released the chunk
// that used it on `empty[s]` (8 arrivals); S chunks are in flight from the start, S - 1 ahead of the
// one multiplied after. No cp.async, no block barrier per step: each costs a warp an mbarrier wait,
// its products and a release. The S mbarriers of each kind at `full` and `empty` must be initialised
// (out_tma_barriers), and A written and fenced, before every thread of the block enters;
// `ws` (1024-aligned) must no longer be read or written by anything else.
template <class T, int WGM, int WGN, int BNW, int N, int K, int S, int KW, class Epi>
__device__ __forceinline__ void wg_gemm_tma(const T* A, const void* map, uint32_t ws, uint32_t full, uint32_t empty,
                                            Epi&& epi) {
  static_assert(WGM * WGN == 2 && (BNW == 64 || BNW == 128) && S >= 2 && (KW == 32 || KW == 64),
                "2 warpgroups, 32- or 64-deep chunks");
  constexpr int BM = 64 * WGM, CN = WGN * BNW, KC = K / KW, ITERS = (N / CN) * KC, RB = KW * 2;
  constexpr uint32_t STAGE = CN * RB;
  static_assert(N % CN == 0 && K % 64 == 0 && CN <= 256, "weight chunks must tile the weight; boxes of <= 256 rows");
  const int wg = threadIdx.x >> 7, wm = wg % WGM, wn = wg / WGM;
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const uint32_t a_base = smem_u32(A) + wm * 64 * 128, w_base = ws + wn * BNW * RB;
  auto load = [&](int it) {  // thread 0 only
    if (it < ITERS) {
      const int s = it % S;
      if (it >= S) mbar_wait(empty + 8 * s, ((it / S) - 1) & 1);  // every warp released chunk it - S
      mbar_arrive_expect_tx(full + 8 * s, STAGE);
      tma_load_2d(ws + s * STAGE, map, (it % KC) * KW, (it / KC) * CN, full + 8 * s);
    }
  };
  // (Each of thread 0's loads is followed by __syncwarp: warp 0 must be converged again before its
  // next wgmma, which the whole warp executes together.)
  if (threadIdx.x == 0)
    for (int it = 0; it < S; ++it) load(it);
  __syncwarp();
  float acc[BNW / 2];
#pragma unroll
  for (int i = 0; i < BNW / 2; ++i) acc[i] = 0.f;
  constexpr bool PREFETCH = HasAddend<std::decay_t<Epi>>::value;
  using Add = typename AddendOf<std::decay_t<Epi>, PREFETCH>::type;
  Add add[PREFETCH ? BNW / 8 : 1][2];
  for (int nc = 0; nc < N / CN; ++nc) {
    if constexpr (PREFETCH) load_addends<BNW>(epi, add, wm * 64 + warp * 16 + g, nc * CN + wn * BNW, t);
    for (int kc = 0; kc < KC; ++kc) {
      const int it = nc * KC + kc;
      ws_step<T, BM, BNW, CN, S, KW, true>(acc, a_base, w_base, full, it, kc);  // (copy-engine chunks: no proxy fence)
      wgmma_commit();
      wgmma_wait<1>();  // chunk it - 1's products are done: release it, refill its stage
      if (kc > 0) {
        if (lane == 0) mbar_arrive(empty + 8 * ((it - 1) % S));
        if (threadIdx.x == 0) load(it - 1 + S);
        __syncwarp();
      }
    }
    wgmma_wait<0>();
    fence_regs(acc);
    const int last = nc * KC + KC - 1;
    if (lane == 0) mbar_arrive(empty + 8 * (last % S));
    if (threadIdx.x == 0) load(last + S);
    __syncwarp();
    chunk_epilogue<T, BNW, false, PREFETCH>(acc, add, wm * 64 + warp * 16 + g, nc * CN + wn * BNW, t, epi);
  }
}

}  // namespace axial_fused
