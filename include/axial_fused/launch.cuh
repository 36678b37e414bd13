// The host side of one specialization (dtype, dim, heads): its launcher. Each generated kernels/*.cu
// instantiates Spec<T, D, HEADS>::info(), the entry the binding's registry holds (SpecInfo, plan.h):
// what the specialization compiles (SpecCaps, which the planner reads), the tensor maps a plan needs,
// and the launch of the kernels a plan names (KernelPlan), in order, on the caller's stream. Nothing
// here chooses a kernel: csrc/pass.cpp's planner has (docs/design.md, "The planner").
#pragma once
#include <atomic>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>

#include "axial_fused/params.h"
#include "axial_fused/plan.h"
#include "axial_fused/mma_sync/fused_kernel.cuh"
#include "axial_fused/mma_sync/two_kernel.cuh"
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
// tail), and the Hopper K1 that follows the prep kernel (it runs beside it); only there
// (docs/alternatives.md, PDL on every launch).
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

// A kernel this specialization does not compile (the planner never names one).
constexpr cudaError_t kNotCompiled = cudaErrorInvalidDeviceFunction;

// Runs f(std::integral_constant<int, TERMS>{}) for a plan's prepared terms, among the TERMS values
// the Hopper attention kernels are compiled for: EXTRAS variants take every combination (with
// kTermMaskMma where the specialization has it, MMA_MASK); plain ones only 0.
template <bool EXTRAS, bool MMA_MASK, class F>
inline cudaError_t with_terms(int terms, F&& f) {
  if constexpr (EXTRAS) {
    switch (terms) {
      case kTermBias: return f(std::integral_constant<int, kTermBias>{});
      case kTermMask: return f(std::integral_constant<int, kTermMask>{});
      case kTermBias | kTermMask: return f(std::integral_constant<int, kTermBias | kTermMask>{});
      case kTermMask | kTermMaskMma:
        if constexpr (MMA_MASK) return f(std::integral_constant<int, kTermMask | kTermMaskMma>{});
        break;
      case kTermBias | kTermMask | kTermMaskMma:
        if constexpr (MMA_MASK) return f(std::integral_constant<int, kTermBias | kTermMask | kTermMaskMma>{});
        break;
      default: break;
    }
  }
  return terms == 0 ? f(std::integral_constant<int, 0>{}) : kNotCompiled;
}

template <class T, int D, int HEADS>
struct Spec {
  static constexpr bool k16 = !std::is_same<T, float>::value;
  template <int TERMS> using Attn = AttnSm90<T, D, HEADS, 0, TERMS>;
  template <int TERMS> using Attn64 = AttnSm90<T, D, HEADS, 64, TERMS>;
  template <int TERMS> using Attn128 = AttnSm90<T, D, HEADS, 128, TERMS>;
  using Gemm = OutGemmSm90<T, D>;

  // ---- what this specialization compiles (SpecCaps, read by the planner) -------------------------
  template <int TERMS>
  static constexpr bool split_serves() {
    return Attn128<TERMS>::SERVED && Attn64<TERMS>::SERVED && Gemm::SERVED && D >= kSplitMinDim;
  }
  template <int TERMS>
  static constexpr unsigned char attn_serves() {
    if constexpr (!k16) return 0;
    return (Attn<TERMS>::SERVED ? kAttnServes : 0) | (Attn<TERMS>::SERVED && Attn<TERMS>::OUT_TMA ? kAttnServesTma : 0) |
           (split_serves<TERMS>() ? kAttnServesSplit : 0);
  }
  // The Hopper attention takes the mask on the tensor cores (kTermMaskMma) in bfloat16, whose range
  // holds kMaskedRaw, where the forms with the mask's rows serve wherever those without do.
  static constexpr bool kMmaMask = std::is_same<T, __nv_bfloat16>::value &&
                                   Attn<kTermMaskMma>::SERVED == Attn<0>::SERVED &&
                                   Attn64<kTermMaskMma>::SERVED == Attn64<0>::SERVED &&
                                   Attn128<kTermMaskMma>::SERVED == Attn128<0>::SERVED;
  static constexpr SpecCaps caps() {
    SpecCaps c;
    if constexpr (k16) {
      c.fused_sm90 = FusedSm90<T, D, HEADS>::SERVED;
      c.k1_sm90 = true;
      c.k1_tma = QkvSm90<T, D>::TMA;
      c.k1_three = D <= kQkvThreeMaxDim;
      c.attn_out_mask_mma = Traits<T, Mma::Tc16, D, HEADS>::PADDED && std::is_same<T, __nv_bfloat16>::value;
      c.mma_mask = kMmaMask;
      c.attn[0] = attn_serves<0>();
      c.attn[kTermBias] = attn_serves<kTermBias>();
      c.attn[kTermMask] = attn_serves<kTermMask>();
      c.attn[kTermBias | kTermMask] = attn_serves<kTermBias | kTermMask>();
      if constexpr (kMmaMask) {
        c.attn[kTermMask | kTermMaskMma] = attn_serves<kTermMask | kTermMaskMma>();
        c.attn[kTermBias | kTermMask | kTermMaskMma] = attn_serves<kTermBias | kTermMask | kTermMaskMma>();
      }
      c.hopper_attention = c.attn[0] != 0;
      c.split_max_tokens = 0x7fffffffLL - Gemm::BM;
    }
    return c;
  }

  // ---- the tensor maps of the TMA kernels a plan names ------------------------------------------
  static cudaError_t encode_maps(const KernelPlan& k, const PassParams& p, TensorMaps* m) {
    if constexpr (k16) {
      if (k.k1 == kLnQkvSm90Tma) {
        using C = QkvSm90<T, D>;
        const cudaError_t e = encode_weight_map<T>(&m->k1_w, p.w_qkv, p.nq, D, C::KW, C::WGN * C::BNW / kQkvCluster);
        if (e != cudaSuccess) return e;
      }
      if (k.attn == kAttnSm90Tma) {
        const cudaError_t e = k.extras ? with_terms<true, kMmaMask>(k.terms, [&](auto t) { return encode_attn_maps<true, decltype(t)::value>(p, m); })
                                       : encode_attn_maps<false, 0>(p, m);
        if (e != cudaSuccess) return e;
      }
      if (k.proj == kOutGemmSm90) {
        // O in the scratch's q columns: [tokens, D] with rows nq apart; W_out [D, D].
        const int64_t tokens = p.num_seq * p.len;
        const cudaError_t e = encode_map<T, 2>(&m->gemm_a, p.scratch, {cuuint64_t(D), cuuint64_t(tokens)},
                                               {cuuint64_t(p.nq) * sizeof(T)}, {cuuint32_t(Gemm::KW), cuuint32_t(Gemm::BM)},
                                               CU_TENSOR_MAP_SWIZZLE_128B);
        if (e != cudaSuccess) return e;
        return encode_weight_map<T>(&m->gemm_w, p.w_out, D, D, Gemm::KW, Gemm::BN);
      }
      return cudaSuccess;
    } else {
      return plan_needs_maps(k) ? kNotCompiled : cudaSuccess;
    }
  }
  // kAttnSm90Tma's maps: W_out, and with KV_TMA the scratch as [S, L, ld] in boxes of one head's 64 rows.
  template <bool EXTRAS, int TERMS>
  static cudaError_t encode_attn_maps(const PassParams& p, TensorMaps* m) {
    using A = Attn<TERMS>;
    if constexpr (A::OUT_TMA) {
      cudaError_t e = encode_weight_map<T>(&m->attn_o, p.w_out, D, D, A::OUT_KW, A::WGN * A::OUT_BNW);
      if constexpr (A::KV_TMA) {
        const cuuint64_t ld = EXTRAS ? cuuint64_t(p.nq) : cuuint64_t(3 * D);
        if (e == cudaSuccess)
          e = encode_map<T, 3>(&m->attn_kv, p.scratch, {ld, cuuint64_t(p.len), cuuint64_t(p.num_seq)},
                               {ld * sizeof(T), cuuint64_t(p.len) * ld * sizeof(T)}, {cuuint32_t(A::HD), 64u, 1u},
                               A::RB == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B);
      }
      return e;
    } else {
      return kNotCompiled;
    }
  }

  // ---- the launch: the kernels the plan names, in order ------------------------------------------
  // Each kernel has an EXTRAS variant (the optional features) and a plain one, which compiles as if
  // the features did not exist (KernelPlan::extras). A case this specialization does not compile
  // returns kNotCompiled: the planner, reading SpecCaps, never names one.
  static cudaError_t launch(const KernelPlan& k, const PassParams& p, const TensorMaps& m, cudaStream_t stream) {
    return with_mode(p.math, [&](auto tr) {
      return k.extras ? run<decltype(tr), true>(k, p, m, stream) : run<decltype(tr), false>(k, p, m, stream);
    });
  }
  template <class Tr, bool EXTRAS>
  static cudaError_t run(const KernelPlan& k, const PassParams& p, const TensorMaps& m, cudaStream_t stream) {
    if (k.path != kPathTwoKernel) return launch_fused<Tr, EXTRAS>(k, p, stream);
    cudaError_t e = launch_prep<EXTRAS>(k, p, stream);
    if (e == cudaSuccess) e = launch_k1<Tr, EXTRAS>(k, p, m, stream);
    if (e == cudaSuccess) e = launch_attn<Tr, EXTRAS>(k, p, m, stream);
    if (e == cudaSuccess) e = launch_proj<EXTRAS>(k, p, m, stream);
    return e;
  }

  // The one-kernel paths: a group of whole sequences a block.
  template <class Tr, bool EXTRAS>
  static cudaError_t launch_fused(const KernelPlan& k, const PassParams& p, cudaStream_t stream) {
    const int64_t blocks = (p.num_seq + k.group - 1) / k.group;
    switch (k.attn) {
      case kFusedSm90:
        if constexpr (Tr::M == Mma::Tc16 && FusedSm90<T, D, HEADS>::SERVED)
          return launch_with_smem<fused_sm90_kernel<T, D, HEADS, EXTRAS>>(blocks, 256, FusedSm90<T, D, HEADS>::SMEM,
                                                                          stream, p);
        break;
      case kFusedMma: {
        const int rows = (k.group * p.len + Tr::ROW_ALIGN - 1) / Tr::ROW_ALIGN * Tr::ROW_ALIGN;
        return launch_with_smem<fused_pass_kernel<Tr, EXTRAS>>(blocks, Tr::THREADS, Tr::fused_bytes(rows, p.gated != 0),
                                                             stream, p);
      }
      default: break;
    }
    return kNotCompiled;
  }

  // The attention's prepared terms (key bits, the bias in its fragment order), before K1.
  template <bool EXTRAS>
  static cudaError_t launch_prep(const KernelPlan& k, const PassParams& p, cudaStream_t stream) {
    if (k.prep == kNoKernel) return cudaSuccess;
    if constexpr (EXTRAS) {
      const int64_t blocks = terms_prep_blocks(p, HEADS);
      if (k.prep == kTermsPrep)
        return launch_with_smem<terms_prep_kernel<T, false>>(blocks, kTermsPrepThreads, 0, stream, p, HEADS);
      if (k.prep == kTermsPrepSm90)
        return launch_with_smem<terms_prep_kernel<T, true>>(blocks, kTermsPrepThreads, 0, stream, p, HEADS);
    }
    return kNotCompiled;
  }

  // K1: LayerNorm + QKV (+ gate) into the scratch. After the prep kernel the Hopper K1 is launched
  // with PDL and runs beside it (ln_qkv_sm90_body waits for its terms only where it writes the bias).
  template <class Tr, bool EXTRAS>
  static cudaError_t launch_k1(const KernelPlan& k, const PassParams& p, const TensorMaps& m, cudaStream_t stream) {
    const int64_t tokens = p.num_seq * p.len;
    const bool after_prep = k.prep != kNoKernel;
    switch (k.k1) {
      case kLnQkvMma:
        return launch_with_smem<ln_qkv_kernel<Tr, EXTRAS>>((tokens + Tr::BM - 1) / Tr::BM, Tr::THREADS, Tr::K1_BYTES,
                                                           stream, p);
      case kLnQkvSm90:
        if constexpr (Tr::M == Mma::Tc16) {
          using C = QkvSm90<T, D>;
          static_assert(C::BM == 128 || D > kQkvThreeMaxDim, "the planner counts K1's blocks of 128 tokens");
          return launch_with_smem_pdl_if<ln_qkv_sm90_kernel<T, D, EXTRAS>>(after_prep, (tokens + C::BM - 1) / C::BM,
                                                                           C::THREADS, C::SMEM, stream, p);
        }
        break;
      case kLnQkvSm90Three:
        if constexpr (Tr::M == Mma::Tc16 && D <= kQkvThreeMaxDim) {
          using C3 = QkvSm90<T, D, true>;
          static_assert(C3::BM == 128, "the planner counts K1's blocks of 128 tokens");
          return launch_with_smem_pdl_if<ln_qkv_sm90_kernel<T, D, EXTRAS, true>>(
              after_prep, (tokens + C3::BM - 1) / C3::BM, C3::THREADS, C3::SMEM, stream, p);
        }
        break;
      case kLnQkvSm90Tma:
        if constexpr (Tr::M == Mma::Tc16 && QkvSm90<T, D>::TMA) {
          using C = QkvSm90<T, D>;
          return launch_with_smem_pdl_if<ln_qkv_sm90_tma_kernel<T, D, EXTRAS>, kQkvCluster>(
              after_prep, cluster_grid<C::BM>(tokens), C::THREADS, C::SMEM, stream, p, m.k1_w);
        }
        break;
      default: break;
    }
    return kNotCompiled;
  }

  // K2: the attention from the scratch, with the output projection (but for the split form's).
  template <class Tr, bool EXTRAS>
  static cudaError_t launch_attn(const KernelPlan& k, const PassParams& p, const TensorMaps& m, cudaStream_t stream) {
    switch (k.attn) {
      case kAttnOutMma: return launch_attn_out<Tr, false, EXTRAS>(k, p, stream);
      case kAttnOutMmaWg:
        if constexpr (Tr::M == Mma::Tc16) return launch_attn_out<Tr, true, EXTRAS>(k, p, stream);
        break;
      case kAttnSm90:
      case kAttnSm90Tma:
      case kAttnSm90Split64:
      case kAttnSm90Split128:
        if constexpr (Tr::M == Mma::Tc16)
          return with_terms<EXTRAS, kMmaMask>(k.terms, [&](auto t) {
            return launch_attn_sm90<EXTRAS, decltype(t)::value>(k, p, m, stream);
          });
        break;
      default: break;
    }
    return kNotCompiled;
  }
  // attn_out_kernel; SM90: its output projection on wgmma. kTermMaskMma: the mask through the tensor
  // cores (bfloat16 with padded head tiles).
  template <class Tr, bool SM90, bool EXTRAS>
  static cudaError_t launch_attn_out(const KernelPlan& k, const PassParams& p, cudaStream_t stream) {
    const int64_t blocks = p.num_seq * ((p.len + Tr::BM - 1) / Tr::BM);
    size_t smem = Tr::K2_BYTES;
    if constexpr (SM90) smem = AttnOutLayout<Tr, true>::BYTES;
    if constexpr (EXTRAS && Tr::PADDED && std::is_same<T, __nv_bfloat16>::value) {
      if (k.terms & kTermMaskMma)
        return launch_with_smem<attn_out_kernel<Tr, SM90, true, true>>(blocks, Tr::THREADS, smem, stream, p);
    }
    return launch_with_smem<attn_out_kernel<Tr, SM90, EXTRAS, false>>(blocks, Tr::THREADS, smem, stream, p);
  }
  // The Hopper attention kernels for one TERMS; PDL: their launch and first blocks overlap K1's tail.
  template <bool EXTRAS, int TERMS>
  static cudaError_t launch_attn_sm90(const KernelPlan& k, const PassParams& p, const TensorMaps& m, cudaStream_t stream) {
    using A = Attn<TERMS>;
    switch (k.attn) {
      case kAttnSm90Split64:
        if constexpr (split_serves<TERMS>())  // (a sequence of at most 64 tokens: one block each)
          return launch_with_smem<attn_sm90_split_kernel<T, D, HEADS, 64, EXTRAS, TERMS>, 1, true>(
              p.num_seq, 256, Attn64<TERMS>::SMEM, stream, p);
        break;
      case kAttnSm90Split128:
        if constexpr (split_serves<TERMS>())
          return launch_with_smem<attn_sm90_split_kernel<T, D, HEADS, 128, EXTRAS, TERMS>, 1, true>(
              p.num_seq * ((p.len + Attn128<TERMS>::BM - 1) / Attn128<TERMS>::BM), 256, Attn128<TERMS>::SMEM, stream, p);
        break;
      case kAttnSm90Tma:
        if constexpr (A::SERVED && A::OUT_TMA)
          return launch_with_smem<attn_sm90_otma_kernel<T, D, HEADS, EXTRAS, TERMS>, 1, true>(
              p.num_seq * ((p.len + A::BM - 1) / A::BM), 256, A::SMEM, stream, p, m.attn_o, m.attn_kv);
        break;
      case kAttnSm90:
        if constexpr (A::SERVED)
          return launch_with_smem<attn_sm90_kernel<T, D, HEADS, EXTRAS, TERMS>, 1, true>(
              p.num_seq * ((p.len + A::BM - 1) / A::BM), 256, A::SMEM, stream, p);
        break;
      default: break;
    }
    return kNotCompiled;
  }

  // The split form's output projection: a persistent GEMM over the attention output in the scratch.
  template <bool EXTRAS>
  static constexpr bool kSplitCompiled = EXTRAS ? split_serves<0>() || split_serves<kTermBias>() ||
                                                      split_serves<kTermMask>() || split_serves<kTermBias | kTermMask>() ||
                                                      (kMmaMask && (split_serves<kTermMask | kTermMaskMma>() ||
                                                                    split_serves<kTermBias | kTermMask | kTermMaskMma>()))
                                                : split_serves<0>();
  template <bool EXTRAS>
  static cudaError_t launch_proj(const KernelPlan& k, const PassParams& p, const TensorMaps& m, cudaStream_t stream) {
    if (k.proj == kNoKernel) return cudaSuccess;
    if constexpr (k16 && kSplitCompiled<EXTRAS>) {
      if (k.proj == kOutGemmSm90) {
        int sms = 0;
        const cudaError_t e = current_device_attribute<cudaDevAttrMultiProcessorCount>(&sms);
        if (e != cudaSuccess) return e;
        const int64_t tiles = (p.num_seq * p.len + Gemm::BM - 1) / Gemm::BM * Gemm::NT;
        return launch_with_smem<out_gemm_sm90_kernel<T, D, EXTRAS>>(tiles < sms ? tiles : sms, 256, Gemm::SMEM, stream,
                                                                    p, m.gemm_a, m.gemm_w);
      }
    }
    return kNotCompiled;
  }

  // ---- shared-memory sizes and the probe ------------------------------------------------------------
  template <class F>
  static auto with_mode(int math, F&& f) {
    if constexpr (std::is_same<T, float>::value) {
      return math == kTf32 ? f(Traits<T, Mma::Tf32, D, HEADS>{}) : f(Traits<T, Mma::Ffma, D, HEADS>{});
    } else {
      return f(Traits<T, Mma::Tc16, D, HEADS>{});
    }
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
  // The tuning row each kernel of this specialization gets (python -m axial_fused.info --tiles).
  static const char* tiles() {
    static const std::string text = [] {
      std::string s;
      const auto row = [&](const char* kernel, std::initializer_list<std::pair<const char*, long long>> fields) {
        s += kernel;
        for (const auto& f : fields) s += std::string(" ") + f.first + "=" + std::to_string(f.second);
        s += "\n";
      };
      with_mode(kExactFp32, [&](auto tr) {
        using Tr = decltype(tr);
        row(std::is_same<T, float>::value ? "mma_sync(fp32)" : "mma_sync",
            {{"BM", Tr::BM}, {"BN", Tr::BN}, {"warps", Tr::NW}, {"col_groups", Tr::CG}, {"row_align", Tr::ROW_ALIGN},
             {"k1_smem", (long long)Tr::K1_BYTES}, {"k2_smem", (long long)Tr::K2_BYTES},
             {"k2_min_blocks", Tr::k2_min_blocks(false)}, {"k2_min_blocks_extras", Tr::k2_min_blocks(true)}});
        return 0;
      });
      if constexpr (k16) {
        using F = FusedSm90<T, D, HEADS>;
        if constexpr (F::SERVED) row("fused_sm90", {{"BM", F::BM}, {"stages", F::SW}, {"out_stages", F::OUT_S}, {"smem", (long long)F::SMEM}});
        using C = QkvSm90<T, D>;
        row(C::TMA ? "ln_qkv_sm90_tma" : "ln_qkv_sm90",
            {{"BM", C::BM}, {"BNW", C::BNW}, {"stages", C::S}, {"reg_a_panels", C::RS ? C::RS_PANELS : 0},
             {"threads", C::THREADS}, {"min_blocks", C::MINB}, {"smem", (long long)C::SMEM}});
        if constexpr (D <= kQkvThreeMaxDim) {
          using C3 = QkvSm90<T, D, true>;
          row("ln_qkv_sm90_three", {{"BM", C3::BM}, {"BNW", C3::BNW}, {"stages", C3::S}, {"min_blocks", C3::MINB},
                                    {"smem", (long long)C3::SMEM}});
        }
        using A = Attn<0>;
        if constexpr (A::SERVED)
          row(A::OUT_TMA ? "attn_sm90_tma" : "attn_sm90",
              {{"BM", A::BM}, {"BN", A::BN}, {"stages", A::SW}, {"out_stages", A::OUT_S}, {"min_blocks", A::MINB},
               {"kv_tma", A::KV_TMA}, {"smem", (long long)A::SMEM}});
        if constexpr (split_serves<0>()) {
          row("attn_sm90_split128", {{"BM", Attn128<0>::BM}, {"BN", Attn128<0>::BN}, {"stages", Attn128<0>::SW},
                                     {"smem", (long long)Attn128<0>::SMEM}});
          row("attn_sm90_split64", {{"BM", Attn64<0>::BM}, {"BN", Attn64<0>::BN}, {"stages", Attn64<0>::SW},
                                    {"smem", (long long)Attn64<0>::SMEM}});
          row("out_gemm_sm90", {{"BM", Gemm::BM}, {"BN", Gemm::BN}, {"stages", Gemm::S}, {"smem", (long long)Gemm::SMEM}});
        }
      }
      return s;
    }();
    return text.c_str();
  }
  static cudaError_t probe() {
    cudaFuncAttributes attr;
    return with_mode(kExactFp32, [&](auto tr) {
      return cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(&ln_qkv_kernel<decltype(tr)>));
    });
  }
  static const SpecInfo* info() {
    static const SpecInfo i{std::is_same<T, float>::value ? kFloat32 : std::is_same<T, __half>::value ? kFloat16 : kBFloat16,
                            D, HEADS, &fused_smem, &two_kernel_smem, &block_rows, &encode_maps, &launch, &probe, &tiles, caps()};
    return &i;
  }
};

}  // namespace axial_fused
