// The host side of one specialization (dtype, dim, heads): which kernels a pass runs, launched on the
// caller's stream. Each generated kernels/*.cu instantiates Spec<T, D, HEADS>::info(), the entry the
// binding's registry holds (SpecInfo, params.h). The binding's planner has chosen the path already
// (PassParams::path); Spec picks the kernels of that path for the device:
//   kPathFusedSm90   fused_sm90_kernel                                (sm_90a, 16-bit, head_dim 32, no gate)
//   kPathFused       fused_pass_kernel                                (mma.sync, any arch)
//   kPathTwoKernel   K1: ln_qkv_sm90[_tma]_kernel (sm_90a, 16-bit) or ln_qkv_kernel, then
//                    K2: the split pass (attn_sm90_split_kernel + out_gemm_sm90_kernel, D >= 512),
//                        attn_sm90[_otma]_kernel (head_dim 32 / 64), or attn_out_kernel.
// Where a tensor map cannot be encoded (a driver without the encoder), each TMA kernel's cp.async
// counterpart runs instead, with the same result.
#pragma once
#include <atomic>
#include <type_traits>

#include "axial_fused/params.h"
#include "axial_fused/sm80/fused_kernel.cuh"
#include "axial_fused/sm80/two_kernel.cuh"
#include "axial_fused/sm90/attn_kernel.cuh"
#include "axial_fused/sm90/fused_kernel.cuh"
#include "axial_fused/sm90/out_gemm_kernel.cuh"
#include "axial_fused/sm90/qkv_kernel.cuh"
#include "axial_fused/sm90/tensor_map.h"

namespace axial_fused {

// K1's cluster form: one block per BM tokens, rounded up to whole clusters (a block past the tokens
// takes part in the weight copies and stores nothing).
template <int BM>
inline int64_t cluster_grid(int64_t tokens) {
  return ((tokens + BM - 1) / BM + kQkvCluster - 1) / kQkvCluster * kQkvCluster;
}

// A value of the current device, asked once per device index (below 64) through ask(device, &value)
// and kept in `cache`: the launch paths read them on every call. (Only values that are never 0.)
template <class Ask>
inline cudaError_t per_device(std::atomic<int> (&cache)[64], int* value, Ask ask) {
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  const bool cached = device >= 0 && device < 64;
  *value = cached ? cache[device].load(std::memory_order_relaxed) : 0;
  if (*value != 0) return cudaSuccess;
  e = ask(device, value);
  if (e != cudaSuccess) return e;
  if (cached && *value != 0) cache[device].store(*value, std::memory_order_relaxed);
  return cudaSuccess;
}

// A device attribute of the current device.
template <cudaDeviceAttr ATTR>
inline cudaError_t current_device_attribute(int* value) {
  static std::atomic<int> cache[64];  // 0: not asked yet
  return per_device(cache, value, [](int device, int* v) { return cudaDeviceGetAttribute(v, ATTR, device); });
}

// Launches Kernel with `smem` bytes of dynamic shared memory. Above 48 KB a kernel must opt in
// (cudaFuncSetAttribute, a driver call): done once per kernel and device, to the device's limit
// (the attribute only permits; occupancy follows each launch's own request), so the hot path makes
// one launch call and no attribute call. CLUSTER > 1: thread-block clusters of that many blocks (a
// launch attribute, not __cluster_dims__, which the sm_80 compilation of the same kernel rejects).
// PDL: launched with programmatic dependent launch on compute capability 9.0 and above (pdl_entry):
// the Hopper attention kernels that follow K1 in a pass (their launch and first blocks overlap K1's
// tail), and the Hopper K1 that follows the prep kernel (it runs beside it). Only there: on every
// launch it is slower (docs/performance.md).
template <auto Kernel, int CLUSTER = 1, bool PDL = false, class... Args>
inline cudaError_t launch_with_smem(int64_t blocks, int threads, size_t smem, cudaStream_t stream, const Args&... args) {
  if (blocks <= 0) return cudaSuccess;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  if (smem > 48 * 1024) {
    static std::atomic<bool> opted_in[64];  // per device index
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e != cudaSuccess) return e;
    const bool cached = device >= 0 && device < 64;
    if (!cached || !opted_in[device].load(std::memory_order_acquire)) {
      int limit = 0;
      e = cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
      if (e != cudaSuccess) return e;
      if (smem > size_t(limit)) return cudaErrorInvalidValue;
      e = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, limit);
      if (e != cudaSuccess) return e;
      if (cached) opted_in[device].store(true, std::memory_order_release);
    }
  }
  bool pdl = false;
  if constexpr (PDL) {
    int major = 0;
    const cudaError_t e = current_device_attribute<cudaDevAttrComputeCapabilityMajor>(&major);
    if (e != cudaSuccess) return e;
    pdl = major >= 9;
  }
  if (CLUSTER == 1 && !pdl) {
    Kernel<<<unsigned(blocks), threads, smem, stream>>>(args...);
    return cudaGetLastError();
  }
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (CLUSTER > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = CLUSTER;
    attr[n].val.clusterDim.y = 1;
    attr[n].val.clusterDim.z = 1;
    ++n;
  }
  if (pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(blocks));
  cfg.blockDim = dim3(unsigned(threads));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, Kernel, args...);
}
// launch_with_smem with PDL chosen at run time.
template <auto Kernel, int CLUSTER = 1, class... Args>
inline cudaError_t launch_with_smem_pdl_if(bool pdl, int64_t blocks, int threads, size_t smem, cudaStream_t stream,
                                           const Args&... args) {
  return pdl ? launch_with_smem<Kernel, CLUSTER, true>(blocks, threads, smem, stream, args...)
             : launch_with_smem<Kernel, CLUSTER, false>(blocks, threads, smem, stream, args...);
}

// f(std::integral_constant<int, TERMS>{}) for the prepared terms that p carries (TERMS, attn_sm90_body);
// always 0 for a plain variant. MMA_MASK (Spec::kMmaMask): the mask goes through the tensor cores
// (kTermMaskMma) up to kMaskMmaMaxLen keys (a thread's bit per key tile in one word).
template <bool EXTRAS, bool MMA_MASK, class F>
inline cudaError_t with_terms(const PassParams& p, F&& f) {
  if constexpr (EXTRAS) {
    const int terms = (p.bias_frag ? kTermBias : 0) | (p.key_bits ? kTermMask : 0);
    const bool mma_mask = MMA_MASK && p.len <= kMaskMmaMaxLen;
    if (terms == kTermBias) return f(std::integral_constant<int, kTermBias>{});
    if constexpr (MMA_MASK) {
      if (mma_mask && terms == kTermMask) return f(std::integral_constant<int, kTermMask | kTermMaskMma>{});
      if (mma_mask && terms == (kTermBias | kTermMask))
        return f(std::integral_constant<int, kTermBias | kTermMask | kTermMaskMma>{});
    }
    if (terms == kTermMask) return f(std::integral_constant<int, kTermMask>{});
    if (terms == (kTermBias | kTermMask)) return f(std::integral_constant<int, kTermBias | kTermMask>{});
  }
  return f(std::integral_constant<int, 0>{});
}

// The split pass's second and third kernels (AttnSm90's SPLIT: the attention alone, then the output
// projection as a GEMM); cudaErrorNotSupported where they do not apply, so that the caller launches
// the fused attention kernel instead.
template <class T, int D, int HEADS, bool EXTRAS, int TERMS>
inline cudaError_t launch_split(const PassParams& p, int64_t tokens, cudaStream_t stream) {
  using A = AttnSm90<T, D, HEADS, 128, TERMS>;
  using A64 = AttnSm90<T, D, HEADS, 64, TERMS>;
  using G = OutGemmSm90<T, D>;
  if constexpr (A::SERVED && A64::SERVED && G::SERVED && D >= kSplitMinDim) {
    if (p.arch != 90 || tokens > 0x7fffffffLL - G::BM) return cudaErrorNotSupported;
    CUtensorMap amap, wmap;
    // O in the scratch's q columns: [tokens, D] with rows nq apart; W_out [D, D].
    if (encode_map<T, 2>(&amap, p.scratch, {cuuint64_t(D), cuuint64_t(tokens)}, {cuuint64_t(p.nq) * sizeof(T)},
                         {cuuint32_t(G::KW), cuuint32_t(G::BM)}, CU_TENSOR_MAP_SWIZZLE_128B) != cudaSuccess ||
        encode_weight_map<T>(&wmap, p.w_out, D, D, G::KW, G::BN) != cudaSuccess)
      return cudaErrorNotSupported;
    // The GEMM's grid first: nothing may be launched before the last cudaErrorNotSupported (the
    // caller then runs the fused kernel, which reads q from the scratch the split kernel overwrites).
    int sms = 0;
    const cudaError_t e0 = current_device_attribute<cudaDevAttrMultiProcessorCount>(&sms);
    if (e0 != cudaSuccess) return e0;
    const int64_t tiles = (tokens + G::BM - 1) / G::BM * G::NT, gemm_blocks = tiles < sms ? tiles : sms;
    // 64 queries a block where the sequence is no longer (a 128-query block would be half padding).
    const cudaError_t e =
        p.len <= 64 ? launch_with_smem<attn_sm90_split_kernel<T, D, HEADS, 64, EXTRAS, TERMS>, 1, true>(
                          p.num_seq, 256, A64::SMEM, stream, p)
                    : launch_with_smem<attn_sm90_split_kernel<T, D, HEADS, 128, EXTRAS, TERMS>, 1, true>(
                          p.num_seq * ((p.len + A::BM - 1) / A::BM), 256, A::SMEM, stream, p);
    if (e != cudaSuccess) return e == cudaErrorNotSupported ? cudaErrorUnknown : e;  // (no fallback from here)
    const cudaError_t g =
        launch_with_smem<out_gemm_sm90_kernel<T, D, EXTRAS>>(gemm_blocks, 256, G::SMEM, stream, p, amap, wmap);
    return g == cudaErrorNotSupported ? cudaErrorUnknown : g;
  } else {
    return cudaErrorNotSupported;
  }
}

template <class T, int D, int HEADS>
struct Spec {
  // Every launch below picks its kernels' EXTRAS variants (the optional features, has_extras) or
  // their plain ones, which compile as if the features did not exist.

  // K1 of the two-kernel pass: LN + QKV into the scratch. after_prep: the prep kernel was launched
  // just before; the Hopper K1 then runs beside it (ln_qkv_sm90_kernel).
  template <class Tr, bool EXTRAS>
  static cudaError_t launch_k1(const PassParams& p, int64_t tokens, cudaStream_t stream, bool after_prep) {
    if constexpr (Tr::M == Mma::Tc16) {
      if (p.arch == 90) {
        using C = QkvSm90<T, D>;
        if constexpr (C::TMA) {
          CUtensorMap wmap;
          if (encode_weight_map<T>(&wmap, p.w_qkv, p.nq, D, C::KW, C::WGN * C::BNW / kQkvCluster) == cudaSuccess)
            return launch_with_smem_pdl_if<ln_qkv_sm90_tma_kernel<T, D, EXTRAS>, kQkvCluster>(
                after_prep, cluster_grid<C::BM>(tokens), C::THREADS, C::SMEM, stream, p, wmap);
        }
        if constexpr (D <= kQkvThreeMaxDim) {
          using C3 = QkvSm90<T, D, true>;
          static_assert(C3::BM == 128, "the planner counts K1's blocks of 128 tokens");
          if (p.k1_per_sm == 3)
            return launch_with_smem_pdl_if<ln_qkv_sm90_kernel<T, D, EXTRAS, true>>(
                after_prep, (tokens + C3::BM - 1) / C3::BM, C3::THREADS, C3::SMEM, stream, p);
        }
        static_assert(C::BM == 128 || D > kQkvThreeMaxDim, "the planner counts K1's blocks of 128 tokens");
        return launch_with_smem_pdl_if<ln_qkv_sm90_kernel<T, D, EXTRAS>>(after_prep, (tokens + C::BM - 1) / C::BM,
                                                                         C::THREADS, C::SMEM, stream, p);
      }
    }
    return launch_with_smem<ln_qkv_kernel<Tr, EXTRAS>>((tokens + Tr::BM - 1) / Tr::BM, Tr::THREADS, Tr::K1_BYTES,
                                                       stream, p);
  }

  // The Hopper attention kernels of K2; cudaErrorNotSupported where they do not serve.
  template <bool EXTRAS>
  static cudaError_t launch_attn_sm90(const PassParams& p, int64_t tokens, cudaStream_t stream) {
    return with_terms<EXTRAS, kMmaMask>(p, [&](auto terms_c) -> cudaError_t {
      constexpr int TERMS = decltype(terms_c)::value;
      const cudaError_t e = launch_split<T, D, HEADS, EXTRAS, TERMS>(p, tokens, stream);
      if (e != cudaErrorNotSupported) return e;
      using A = AttnSm90<T, D, HEADS, 0, TERMS>;
      if constexpr (A::SERVED) {
        if (p.arch == 90) {
          const int64_t blocks = p.num_seq * ((p.len + A::BM - 1) / A::BM);
          if constexpr (A::OUT_TMA) {
            CUtensorMap omap;
            CUtensorMap kvmap{};  // (with KV_TMA: the scratch as [S, L, ld], boxes of one head's 64 rows)
            bool maps = encode_weight_map<T>(&omap, p.w_out, D, D, A::OUT_KW, A::WGN * A::OUT_BNW) == cudaSuccess;
            if constexpr (A::KV_TMA) {
              const cuuint64_t ld = EXTRAS ? cuuint64_t(p.nq) : cuuint64_t(3 * D);
              maps = maps && encode_map<T, 3>(&kvmap, p.scratch, {ld, cuuint64_t(p.len), cuuint64_t(p.num_seq)},
                                              {ld * sizeof(T), cuuint64_t(p.len) * ld * sizeof(T)},
                                              {cuuint32_t(A::HD), 64u, 1u},
                                              A::RB == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B) ==
                                 cudaSuccess;
            }
            if (maps)
              return launch_with_smem<attn_sm90_otma_kernel<T, D, HEADS, EXTRAS, TERMS>, 1, true>(blocks, 256, A::SMEM,
                                                                                                stream, p, omap, kvmap);
          }
          return launch_with_smem<attn_sm90_kernel<T, D, HEADS, EXTRAS, TERMS>, 1, true>(blocks, 256, A::SMEM, stream, p);
        }
      }
      return cudaErrorNotSupported;
    });
  }
  // Whether the Hopper attention kernels take the mask on the tensor cores (kTermMaskMma): in bfloat16,
  // whose range holds kMaskedRaw, and where the configurations with the mask's rows serve wherever
  // those without do (the key bits are in the Hopper kernel's order: no fallback may read them).
  static constexpr bool kMmaMask = std::is_same<T, __nv_bfloat16>::value &&
                                   AttnSm90<T, D, HEADS, 0, kTermMaskMma>::SERVED == AttnSm90<T, D, HEADS>::SERVED &&
                                   AttnSm90<T, D, HEADS, 64, kTermMaskMma>::SERVED == AttnSm90<T, D, HEADS, 64>::SERVED &&
                                   AttnSm90<T, D, HEADS, 128, kTermMaskMma>::SERVED == AttnSm90<T, D, HEADS, 128>::SERVED;
  // Whether a pass's two-kernel path on sm_90a runs one of the Hopper attention kernels (SpecInfo).
  static constexpr bool kHopperAttention =
      !std::is_same<T, float>::value &&
      (AttnSm90<T, D, HEADS>::SERVED || (D >= kSplitMinDim && AttnSm90<T, D, HEADS, 128>::SERVED &&
                                         AttnSm90<T, D, HEADS, 64>::SERVED && OutGemmSm90<T, D>::SERVED));

  // K2 of the two-kernel pass: attention + output projection, from the scratch.
  template <class Tr, bool EXTRAS>
  static cudaError_t launch_k2(const PassParams& p, int64_t tokens, cudaStream_t stream) {
    if constexpr (Tr::M == Mma::Tc16) {
      const cudaError_t e = launch_attn_sm90<EXTRAS>(p, tokens, stream);
      if (e != cudaErrorNotSupported) return e;
    }
    // The mma.sync attention reads the bias with unit key stride (LogitRow); run_pass leaves another
    // stride only where it planned the Hopper attention kernel, so that a fallback from it (a tensor
    // map that does not encode) fails here rather than read the bias wrongly. Likewise a bias that K1
    // wrote into bias_frag (p.bias_w), which only the Hopper attention kernel reads.
    if (EXTRAS && ((p.bias && p.bias_stride_k != 1) || (p.bias_w && !p.bias))) return cudaErrorNotSupported;
    // A mask without a bias goes through the tensor cores where the head tiles are padded in
    // bfloat16 (attn_out_kernel's MASK_MMA).
    if constexpr (EXTRAS && Tr::PADDED && std::is_same<T, __nv_bfloat16>::value) {
      if (p.key_bits && !p.bias) return launch_attn_out<Tr, true, true>(p, stream);
    }
    return launch_attn_out<Tr, EXTRAS, false>(p, stream);
  }
  template <class Tr, bool EXTRAS, bool MASK_MMA>
  static cudaError_t launch_attn_out(const PassParams& p, cudaStream_t stream) {
    const int64_t blocks = p.num_seq * ((p.len + Tr::BM - 1) / Tr::BM);
    if constexpr (Tr::M == Mma::Tc16) {
      if (p.arch == 90)
        return launch_with_smem<attn_out_kernel<Tr, true, EXTRAS, MASK_MMA>>(blocks, Tr::THREADS,
                                                                             AttnOutLayout<Tr, true>::BYTES, stream, p);
    }
    return launch_with_smem<attn_out_kernel<Tr, false, EXTRAS, MASK_MMA>>(blocks, Tr::THREADS, Tr::K2_BYTES, stream, p);
  }

  template <class Tr, bool EXTRAS>
  static cudaError_t run(const PassParams& p, cudaStream_t stream) {
    if (p.path == kPathFusedSm90) {
      using F = FusedSm90<T, D, HEADS>;
      if constexpr (Tr::M == Mma::Tc16 && F::SERVED) {
        if (p.arch == 90 && !p.gated)  // (the kernel has no gate)
          return launch_with_smem<fused_sm90_kernel<T, D, HEADS, EXTRAS>>((p.num_seq + p.group - 1) / p.group, 256,
                                                                          F::SMEM, stream, p);
      }
      return cudaErrorInvalidValue;  // the planner never chooses it here
    }
    if (p.path == kPathFused) {
      const int rows = (p.group * p.len + Tr::ROW_ALIGN - 1) / Tr::ROW_ALIGN * Tr::ROW_ALIGN;
      return launch_with_smem<fused_pass_kernel<Tr, EXTRAS>>((p.num_seq + p.group - 1) / p.group, Tr::THREADS,
                                                           Tr::fused_bytes(rows, p.gated != 0), stream, p);
    }
    const int64_t tokens = p.num_seq * p.len;
    bool prep = false;
    if constexpr (EXTRAS) {
      prep = p.key_bits || (p.bias_frag && p.bias);  // (a bias from bias_w is K1's to write)
      if (prep) {  // the attention kernel's prepared terms, in its order
        const int64_t blocks = terms_prep_blocks(p, HEADS);
        const bool frag = kHopperAttention && p.arch == 90;
        const cudaError_t e = frag ? launch_with_smem<terms_prep_kernel<T, true>>(blocks, kTermsPrepThreads, 0, stream, p, HEADS)
                                   : launch_with_smem<terms_prep_kernel<T, false>>(blocks, kTermsPrepThreads, 0, stream, p, HEADS);
        if (e != cudaSuccess) return e;
      }
    }
    const cudaError_t e = launch_k1<Tr, EXTRAS>(p, tokens, stream, prep);
    return e != cudaSuccess ? e : launch_k2<Tr, EXTRAS>(p, tokens, stream);
  }
  template <class F>
  static auto with_mode(int math, F&& f) {
    if constexpr (std::is_same<T, float>::value) {
      return math == kTf32 ? f(Traits<T, Mma::Tf32, D, HEADS>{}) : f(Traits<T, Mma::Ffma, D, HEADS>{});
    } else {
      return f(Traits<T, Mma::Tc16, D, HEADS>{});
    }
  }
  static cudaError_t launch(const PassParams& p, cudaStream_t stream) {
    return with_mode(p.math, [&](auto tr) {
      return has_extras(p) ? run<decltype(tr), true>(p, stream) : run<decltype(tr), false>(p, stream);
    });
  }
  static size_t fused_smem(int rows, int math, bool gated) {
    return with_mode(math, [&](auto tr) { return decltype(tr)::fused_bytes(rows, gated); });
  }
  static size_t two_kernel_smem(int math) {
    return with_mode(math, [&](auto tr) {
      using Tr = decltype(tr);
      return Tr::K1_BYTES > Tr::K2_BYTES ? Tr::K1_BYTES : Tr::K2_BYTES;
    });
  }
  static int block_rows(int math) {
    return with_mode(math, [&](auto tr) { return decltype(tr)::ROW_ALIGN; });
  }
  static cudaError_t probe() {
    cudaFuncAttributes attr;
    return with_mode(kExactFp32, [&](auto tr) {
      return cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(&ln_qkv_kernel<decltype(tr)>));
    });
  }
  static const SpecInfo* info() {
    static const SpecInfo i{std::is_same<T, float>::value ? kFloat32 : std::is_same<T, __half>::value ? kFloat16 : kBFloat16,
                            D, HEADS, &fused_smem, &two_kernel_smem, &block_rows, &launch, &probe,
                            kHopperAttention ? 1 : 0};
    return &i;
  }
};

}  // namespace axial_fused
