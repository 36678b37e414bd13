// The output projection's epilogue, shared by every kernel that ends a pass:
//   out[row] = y + bias + x[row]
// (OPTIONAL_RESIDUAL, the kernels' EXTRAS variants: out[row] = y + bias where PassParams::residual = 0.)
// for the pairs (r, c) of a tile whose rows are addressed by a table of offsets (-1: past the end).
#pragma once
#include <type_traits>
#include <utility>

#include "axial_fused/common/device.cuh"

namespace axial_fused {

// An epilogue with addend(r, c): the products' callers load every addend of a chunk before its
// products finish, then fold() them in (OutEpilogue: bias + residual).
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

// Where a tile's rows live in x and out: row r's offsets xo[r] / oo[r] (xo[r] = -1: past the end).
struct RowTable {
  const int64_t* xo;
  const int64_t* oo;
  __device__ __forceinline__ int64_t x(int r) const { return xo[r]; }
  __device__ __forceinline__ int64_t o(int r) const { return oo[r]; }
};

template <class T, bool OPTIONAL_RESIDUAL = false>
struct OutEpilogue {
  const T* x;
  const T* bias;
  T* out;
  RowTable rows;
  bool residual;  // (always true unless OPTIONAL_RESIDUAL)
  __device__ __forceinline__ OutEpilogue(const PassParams& p, const int64_t* xo_, const int64_t* oo_)
      : x(static_cast<const T*>(p.x)), bias(static_cast<const T*>(p.b_out)), out(static_cast<T*>(p.out)),
        rows{xo_, oo_}, residual(!OPTIONAL_RESIDUAL || p.residual != 0) {}
  __device__ __forceinline__ void operator()(int r, int c, float a, float b) const {
    const int64_t xr = rows.x(r);
    if (xr < 0) return;
    const float2 res = !OPTIONAL_RESIDUAL || residual ? load2(x + xr + c) : make_float2(0.f, 0.f);
    const float2 bv = load2(bias + c);
    store2(out + rows.o(r) + c, a + bv.x + res.x, b + bv.y + res.y);
  }
  // The same in two steps, so that a caller can issue every load of a tile before its products
  // finish: out may alias x (the in-place column pass), so the compiler cannot hoist a load above an
  // earlier store itself, and each pair would wait out a global load's latency in turn. addend() only
  // issues the two loads and returns the raw pairs (adding them there would wait for the loads where
  // they are issued); fold() converts and adds them, the same arithmetic as operator():
  // a + (bias + residual).
  struct Addend {
    typename Pack2<T>::type res, bias;
  };
  __device__ __forceinline__ Addend addend(int r, int c) const {
    using P2 = typename Pack2<T>::type;
    const int64_t xr = rows.x(r);
    Addend a;
    a.bias = *reinterpret_cast<const P2*>(bias + c);
    a.res = (!OPTIONAL_RESIDUAL || residual) && xr >= 0 ? *reinterpret_cast<const P2*>(x + xr + c)
                                                        : Pack2<T>::make(0.f, 0.f);
    return a;
  }
  __device__ __forceinline__ void fold(float& a, float& b, const Addend& add) const {
    const float2 res = Pack2<T>::unpack(add.res), bv = Pack2<T>::unpack(add.bias);
    a = a + (res.x + bv.x);
    b = b + (res.y + bv.y);
  }
  // 8 consecutive outputs, folded and rounded, as one 16-byte store (out rows are 16-byte aligned:
  // the op allocates out, and x is packed so).
  __device__ __forceinline__ void operator()(int r, int c, uint4 v) const {
    if (rows.x(r) >= 0) st_global_16(out + rows.o(r) + c, v);
  }
  // A pair with its addend already folded in.
  __device__ __forceinline__ void put(int r, int c, float a, float b) const {
    if (rows.x(r) >= 0) store2(out + rows.o(r) + c, a, b);
  }
};

// The addends of BNW columns of a tile for this thread's rows r0 and r0 + 8 (t = lane % 4), issued
// before the products that they are folded into.
template <int BNW, class Epi, class Add>
__device__ __forceinline__ void load_addends(const Epi& epi, Add (&add)[BNW / 8][2], int r0, int n0, int t) {
#pragma unroll
  for (int j = 0; j < BNW / 8; ++j) {
    add[j][0] = epi.addend(r0, n0 + j * 8 + 2 * t);
    add[j][1] = epi.addend(r0 + 8, n0 + j * 8 + 2 * t);
  }
}

}  // namespace axial_fused
