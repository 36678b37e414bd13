// The terms of the Hopper attention kernel's logits (attn_kernel.cuh) as one policy type: the key
// range a head runs (the sequence's end, and with a mask its last present key), the mask and the
// bias prepared by terms_prep_kernel (p.key_bits, p.bias_frag; docs/design.md, "Masks, bias, gate"),
// after CUTLASS example 88's fmha_fusion.hpp (trip count, before_softmax). Everything is selected at
// compile time by TERMS: with none, each member is empty or constant and the kernel compiles as if
// the terms did not exist. (Which state a part holds and which the kernel passes in is chosen so
// that the kernel's machine code stays that of the same code written in place.)
//
// Where a term enters a unit (a 64-query half of one key tile):
//  - the bias, and the mask by selects (INIT): the unit's score accumulators start from them
//    (the kernel's load_terms from Bias and the mask bits, right before its S product, which
//    accumulates onto them; BSLOT: each unit's bias block copied into a slot during the unit before);
//  - the mask on the tensor cores (TMM): one more k-step of S, a tile of ones against the key tile's
//    mask rows (mask_rows, written beside its keys);
//  - the sequence's end: the one tile that can run past it gets -inf there (mask_keys).
// The Hopper fused kernel's key range over packed sequences is mask_other_sequences.
#pragma once
#include "axial_fused/common/logits.cuh"
#include "axial_fused/sm90/attn_pipeline.cuh"
#include "axial_fused/sm90/wgmma.cuh"

namespace axial_fused {

// Keys at or past `valid` (the sequence's end, relative to the tile) of a BN-key score tile get -inf.
template <int BN>
__device__ __forceinline__ void mask_keys(float (&sc)[BN / 2], int valid) {
  const int t = threadIdx.x & 3;
#pragma unroll
  for (int jb = 0; jb < BN / 8; ++jb)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (8 * jb + 2 * t + (e & 1) >= valid) sc[4 * jb + e] = -INFINITY;
}

// The fused kernel's key range (packed sequences of L tokens, a block's keys all its rows'): keys
// outside the sequence of this thread's two rows of a BN-key score tile, [lo0, lo0 + L) and
// [lo1, lo1 + L), get -inf. t: this thread's column pair in the quad.
template <int BN>
__device__ __forceinline__ void mask_other_sequences(float (&s)[BN / 2], int lo0, int lo1, int L, int t) {
#pragma unroll
  for (int jb = 0; jb < BN / 8; ++jb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = 8 * jb + 2 * t + (e & 1);
      if (unsigned(key - ((e >> 1) ? lo1 : lo0)) >= unsigned(L)) s[4 * jb + e] = -INFINITY;
    }
  }
}

// The end of a sequence's keys that its queries need, from its prepared mask bits (key_bits, fragment
// order, keys past L absent): past its last 64-key chunk with a present key, or 0 where no key is
// present (its queries attend uniformly to all L: value_sums in attn_sm90_body). A key tile past that
// end has only absent keys, whose exponentials underflow to exactly 0 beside a present key's, so it
// may be skipped. Each warp computes it on its own (no block barrier): a lane per chunk, 8 bytes each.
__device__ __forceinline__ int present_key_end(const uint16_t* bits, int L) {
  const int chunks = (L + 63) / 64;
  int last = -1;
  for (int c = threadIdx.x & 31; c < chunks; c += 32) {
    const uint2 w = __ldg(reinterpret_cast<const uint2*>(bits) + c);
    if ((w.x & w.y) != 0xffffffffu) last = c;
  }
  last = __reduce_max_sync(0xffffffffu, last);
  return last < 0 ? 0 : min(L, 64 * (last + 1));
}

// The terms of one warpgroup's units; C: the kernel's AttnSm90 (BN, SW, BSLOT). TERMS: kTermBias |
// kTermMask | kTermMaskMma (TB, TM, TMM below). The object holds the mask's state; the bias's is a
// Bias, made where the kernel first needs it.
template <class C, int TERMS>
struct AttnTerms {
  // TB: the bias; TM: the mask, by a select per score, or TMM: on the tensor cores.
  static constexpr bool TB = (TERMS & kTermBias) != 0, TM = (TERMS & kTermMask) != 0, TMM = (TERMS & kTermMaskMma) != 0;
  // Whether a unit's accumulators start from its terms (the bias, or the mask by selects).
  static constexpr bool INIT = TB || (TM && !TMM);
  static constexpr int BN = C::BN;
  static constexpr bool BSLOT = C::BSLOT;

  const uint16_t* kbits = nullptr;  // TM: the sequence's mask bits

  // The mask's bits and (TMM) this thread's mask rows into `mrow` (0 on entry): bit kt is whether key
  // kt * BN + wtid is absent, the mask's B row this thread writes into each stage of key tile kt.
  // Requested before present_key_end's loads are waited for. (mrow is the caller's register: held in
  // this type, it shifts ptxas's register allocation of the kernel.)
  __device__ __forceinline__ void load_mask(const PassParams& p, int64_t s, int L, int wtid, uint32_t& mrow) {
    kbits = TM ? p.key_bits + s * (p.kp / 16) : nullptr;
    if constexpr (TMM) {
      for (int kt = 0; kt * BN < L && kt < 32 && wtid < BN; ++kt) {  // (L <= kMaskMmaMaxLen: at most 32 tiles)
        const int pos = frag_pos(kt * BN + wtid);
        mrow |= uint32_t(__ldg(kbits + (pos >> 4)) >> (pos & 15) & 1u) << kt;
      }
    }
  }
  // The key range a head runs: with the mask, up to the sequence's last present key; 0 where no key is
  // present (its queries attend uniformly).
  __device__ __forceinline__ int key_end(int L) const { return TM ? present_key_end(kbits, L) : L; }

  // TB: where a warp's units read their bias. A unit (head h, key tile kt, query half M)'s block,
  // this warp's 16 x BN, is query rows q0 + 64 M + 16 warp on of head h, its key chunks from
  // kt * BN / 64 on (1024 halves a chunk: bias_block_row / _key); this thread reads the pieces at
  // lane * 8 + 256 j. (The block's coordinates are the kernel's registers, passed in: held here,
  // they shift ptxas's schedule of the kernel.)
  struct Bias {
    const __half* bfrag = nullptr;  // the bias blocks of the block's sequence (p.bias_frag)
    // BSLOT: this thread's pieces of its warp's slot (the bias of its next unit, copied while the unit
    // before runs, each thread copying the pieces it reads itself: no barrier).
    uint32_t my_slot = 0;

    // `slot`: the warpgroups' bias slots.
    __device__ __forceinline__ Bias(const PassParams& p, int64_t s, int wg, int warp, int lane, uint32_t slot)
        : bfrag(TB ? p.bias_frag + (s / p.seq_inner) * p.bias_frag_stride_b : nullptr),
          my_slot(slot + (wg * 4 + warp) * (BN / 64) * 2048 + lane * 16) {}
    // This thread's first piece of the warp's block of unit (h, kt, M).
    __device__ __forceinline__ const __half* block(const PassParams& p, int h, int kt, int M, int q0, int warp,
                                                   int lane) const {
      return bfrag + ((int64_t(h) * (p.kp / 16) + (q0 + M * 64) / 16 + warp) * (p.kp / 64) + kt * (BN / 64)) * 1024 +
             lane * 8;
    }
    // BSLOT: the next unit's bias into the slot, one copy group (possibly empty: one a unit) of this
    // warpgroup's nh heads of nkt key tiles. bc: that unit (one query half); bhead: its head's first
    // block (moved on a head at each head's end: no address product a unit).
    __device__ __forceinline__ void issue(const PassParams& p, TileCursor<C::SW>& bc, const __half*& bhead, int nh,
                                          int nkt) const {
      if (bc.i < nh) {
        const __half* blk = bhead + bc.tile(nkt) * (BN / 64 * 1024);
#pragma unroll
        for (int ch = 0; ch < BN / 64; ++ch)
#pragma unroll
          for (int j = 0; j < 4; ++j) cp_async16_shared(my_slot + ch * 2048 + j * 512, blk + ch * 1024 + j * 256);
        bc.next(nkt);
        if (bc.n == 0) bhead += int64_t(2 * (p.kp / 16)) * (p.kp / 64) * 1024;  // head h + 2
      }
      cp_async_commit();
    }
  };

  // TMM: this warpgroup's A tile of the mask's k-step at `ones`, 64 rows x 16 columns K-major without
  // swizzle (core matrices of 8 rows x 16 bytes: columns 0-7 of row r at 16 r, columns 8-15 1 KB on):
  // 1.0 in column 0, zeros elsewhere. Against B rows holding kMaskedRaw (or 0) in their column 0, the
  // k-step adds kMaskedRaw to an absent key's score, which then is kMaskedRaw exactly
  // (|q.k + bias| < 2^76).
  __device__ __forceinline__ static void write_ones(uint32_t ones, int wtid) {
    st_shared_16(ones + wtid * 16, make_uint4(wtid < 64 ? kOneBf16Bits : 0u, 0u, 0u, 0u));
  }
  // TMM: key tile kt's mask rows at `rows` (in its stage, after its keys and values), a key's 16 bytes
  // (kMaskedRaw in bfloat16, or 0, then zeros), read by the B descriptor with both 8-column halves at
  // the same bytes (the A tile's second half is 0).
  __device__ __forceinline__ static void mask_rows(uint32_t rows, int kt, int wtid, uint32_t mrow) {
    if (wtid < BN) st_shared_16(rows + wtid * 16, make_uint4(mrow >> kt & 1u ? kMaskedRawBf16Bits : 0u, 0u, 0u, 0u));
  }
  // TMM: the mask's k-step of a unit's S: the A tile of ones, B the tile's mask rows (no swizzle).
  template <class T>
  __device__ __forceinline__ static void mask_kstep(float (&sc)[BN / 2], uint32_t ones, uint32_t rows) {
    Wgmma<T, BN>::mma(sc, nosw_desc(ones, 1024, 128), nosw_desc(rows, 0, 128), 1);
  }
};

}  // namespace axial_fused
