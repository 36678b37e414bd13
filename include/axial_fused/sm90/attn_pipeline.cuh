// The key / value copies of the Hopper attention kernel (attn_kernel.cuh): one head's rows of the
// scratch ([S * L, ld]: q | k | v per token) into the warpgroup's RB-byte-row swizzled tiles (its
// query buffers and ring stages) by cp.async, each thread the same 16-byte piece of every RPP-th row.
// The order in which a warpgroup's chunks are requested is TileCursor's; the ring's schedule (which
// chunk's keys and values a copy group holds, and when it is waited for) is the kernel's
// (attn_sm90_body: load_keys, load_values, load, tile_start).
#pragma once
#include "axial_fused/sm90/wgmma.cuh"

namespace axial_fused {

// A running (head, tile, stage) counter over a warpgroup's chunks, in the order a head takes its
// key tiles: nkt - 1 (the one that can be partial) first, then 0 .. nkt - 2. The chunks' copies and
// the units' bias blocks are each requested strictly in order, so no division by the run-time tile
// count is needed.
template <int SW>
struct TileCursor {
  int i = 0, n = 0, s = 0;  // head, chunk within the head, stage
  __device__ int tile(int tiles) const { return n == 0 ? tiles - 1 : n - 1; }
  __device__ void next(int tiles) {
    n = n + 1 == tiles ? 0 : n + 1;
    i += n == 0;
    s = s + 1 == SW ? 0 : s + 1;
  }
};

// C: the kernel's AttnSm90 (RB bytes a row, 128 threads a warpgroup). The kernel's registers are
// passed in: this thread's piece lc of rows lr, lr + RPP, ... (src0: its first source element, qkv +
// lr * ld + 8 lc; dst0: its byte offset in a tile, swizzled), the scratch's rows ld apart from qkv.
template <class T, class C>
struct KvCopy {
  static constexpr int RB = C::RB, CH = RB / 16, RPP = 128 / CH;  // rows a pass of the warpgroup
  static_assert(RPP % 8 == 0 && C::BM % RPP == 0 && C::BN % RPP == 0, "whole passes of the warpgroup");

  // Rows [row0, row0 + NR) of column block `col` into the tile at `dst`; rows at or past L read as
  // zeros.
  template <int NR>
  __device__ __forceinline__ static void rows(const T* qkv, const T* src0, int ld, uint32_t dst0, int lr, int L,
                                              uint32_t dst, int row0, int col) {
    const T* from = src0 + int64_t(row0) * ld + col;
#pragma unroll
    for (int pass = 0; pass < NR / RPP; ++pass) {
      const bool ok = row0 + lr + pass * RPP < L;
      cp_async16_shared(dst + dst0 + pass * RPP * RB, ok ? from + pass * RPP * ld : qkv, ok);
    }
  }
};

}  // namespace axial_fused
