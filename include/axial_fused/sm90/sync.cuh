// Hopper (sm_90a) synchronisation and copies: register reallocation between warpgroups, named
// barriers, shared-memory mbarriers, thread-block clusters and tensor-map (TMA) loads.
#pragma once
#include "axial_fused/common/device.cuh"

namespace axial_fused {

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

// v, a value every lane of the warp holds alike (a thread's warpgroup), broadcast from lane 0 so that
// ptxas knows it is one value across the warp: what is computed from it (ring stages, descriptors,
// cursors) then runs on the uniform datapath, without moves into uniform registers before each wgmma
// (CUTLASS's canonical_warp_group_idx). Every lane of the warp must reach it.
__device__ __forceinline__ int warp_uniform(int v) { return __shfl_sync(0xffffffffu, v, 0); }

// Barrier over the 128 threads of warpgroup wg alone (named barrier 1 + wg; 0 is __syncthreads).
__device__ __forceinline__ void warpgroup_sync(int wg) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
}
// Named barrier `id` over `count` threads.
__device__ __forceinline__ void named_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
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

// One box of a 3-D tensor map into this block's shared memory (`dst`), completing on mbarrier `bar`.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void* map, int c0, int c1, int c2, uint32_t bar) {
#if AXIAL_FUSED_SM90
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
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

}  // namespace axial_fused
