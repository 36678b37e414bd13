// Planning and launch: the registry of compiled specializations, the device facts, the planner (which
// kernels run a pass), and run_pass (the PassParams of the row or column pass, then the launch).
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/macros.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <tuple>

#include "axial_fused/pair_bias.h"
#include "pass.h"

namespace axial_fused {

namespace {
std::vector<const SpecInfo*>& registered_specs() {
  static std::vector<const SpecInfo*> specs;  // (constructed on first use: by the first registration)
  return specs;
}
}  // namespace

bool register_spec(const SpecInfo* spec) {
  registered_specs().push_back(spec);
  return true;
}

const std::vector<const SpecInfo*>& registry() {
  // Read after the library has loaded, when every kernels/*.cu has registered its specialization.
  static const std::vector<const SpecInfo*> sorted = [] {
    std::vector<const SpecInfo*> r = registered_specs();
    std::sort(r.begin(), r.end(), [](const SpecInfo* a, const SpecInfo* b) {
      return std::tie(a->dim, a->heads, a->dtype) < std::tie(b->dim, b->heads, b->dtype);
    });
    return r;
  }();
  return sorted;
}

int dtype_code(ScalarType t) {
  switch (t) {
    case ScalarType::Float: return kFloat32;
    case ScalarType::Half: return kFloat16;
    case ScalarType::BFloat16: return kBFloat16;
    default: return -1;
  }
}

const SpecInfo* find_spec(int dtype, int64_t dim, int64_t heads) {
  for (const SpecInfo* s : registry())
    if (s->dtype == dtype && s->dim == dim && s->heads == heads) return s;
  return nullptr;
}


const DeviceInfo& device_info(int device) {
  static std::array<DeviceInfo, 64> infos;
  static std::array<std::once_flag, 64> once;
  STD_TORCH_CHECK(device >= 0 && device < 64, "axial_fused: device index ", device, " out of range");
  std::call_once(once[device], [device] {
    cudaDeviceProp prop;
    STD_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    infos[device].sms = prop.multiProcessorCount;
    infos[device].smem_optin = int(prop.sharedMemPerBlockOptin);
    infos[device].arch = prop.major * 10 + prop.minor;
    int previous = 0;
    STD_CUDA_CHECK(cudaGetDevice(&previous));
    STD_CUDA_CHECK(cudaSetDevice(device));
    infos[device].sm90a = infos[device].arch == 90 && sm90a_code_loaded();
    STD_CUDA_CHECK(cudaSetDevice(previous));
  });
  return infos[device];
}

std::atomic<int> g_path_override{-1};

// A C shim call that failed (its own message is not reachable across every torch the binary serves).
void shim_check(AOTITorchError err, const char* call) {
  STD_TORCH_CHECK(err == AOTI_TORCH_SUCCESS, "axial_fused: the torch C shim call ", call, " failed");
}

cudaStream_t current_stream(int device) {
  void* stream = nullptr;
  shim_check(aoti_torch_get_current_cuda_stream(device, &stream), "aoti_torch_get_current_cuda_stream");
  return static_cast<cudaStream_t>(stream);
}

namespace {

// ---- the planner ---------------------------------------------------------------------------------

constexpr int kHopperFusedMinLen = 32;      // shorter sequences: the mma.sync kernel's smaller blocks suit them
constexpr int kHopperFusedRows = 128;       // the Hopper fused kernel's block: 128 token rows
constexpr int kFusedRows = 64;              // the mma.sync fused kernel packs sequences into 64 rows ...
constexpr int kFusedMaxRows = 128;          // ... and takes a buffer of at most 128 rows
constexpr int kHopperTwoKernelMaxDim = 128; // past one wave, the two-kernel path wins at 64 < D <= 128

// Sequences per block of the mma.sync fused kernel: as many as fit in kFusedRows, but no fewer blocks
// than SMs while there are sequences to spread; 1 for a sequence longer than that.
int sequences_per_block(int64_t num_seq, int len, int sms) {
  const int64_t by_sms = num_seq / std::max(sms, 1);
  return int(std::max<int64_t>(1, std::min<int64_t>(kFusedRows / len, by_sms)));
}

// Sequences per block of the Hopper fused kernel, by whole waves: its block runs every product and
// softmax over all 128 rows however many hold tokens, so a block of two packed sequences costs about
// what a block of one does, and the pass takes (waves of one block per SM) x (one block's time). The
// fewest waves that 1 to 128 / len sequences a block reach, with the fewest sequences a block that
// reach them (200 sequences of 56 tokens on 132 SMs: 2 a block in one wave, not 1 in two).
int sequences_per_block_waves(int64_t num_seq, int len, int sms) {
  const int cap = std::max(1, kHopperFusedRows / std::max(len, 1));
  const int64_t per_wave = std::max(sms, 1);
  auto waves = [&](int g) { return ((num_seq + g - 1) / g + per_wave - 1) / per_wave; };
  const int64_t fewest = waves(cap);  // (waves(g) never grows with g)
  int g = 1;
  while (waves(g) > fewest) ++g;
  return g;
}

// K1's blocks an SM in the two-kernel path on sm_90a (16-bit): its three-block form at D <=
// kQkvThreeMaxDim where that fills its last wave better than two blocks an SM do (the fraction of the
// waves' block slots that hold blocks of 128 tokens), else two. A K1 block's work does not depend on
// its neighbours, so a last wave that holds few blocks leaves most SMs waiting on it: a tri_384 node's
// 1152 blocks take 4.4 waves at two (the last 36% full) and 2.9 at three; tri_256's 512 take 1.9 and
// 1.3.
int k1_blocks_per_sm(const SpecInfo* spec, int64_t tokens, const DeviceInfo& dev) {
  if (!dev.sm90a || !spec->caps.k1_three) return 2;
  const int64_t blocks = (tokens + 127) / 128;
  const auto fill = [&](int per_sm) {
    const int64_t slots = int64_t(per_sm) * std::max(dev.sms, 1), waves = (blocks + slots - 1) / slots;
    return double(blocks) / double(waves * slots);
  };
  return fill(3) > fill(2) ? 3 : 2;
}

// The path and the one-kernel paths' sequences per block. The rule, in order (docs/design.md, "The
// planner"):
//   0. `forced` >= 0 (tests and benchmarks, set_path_override): that path, or an error saying why it
//      cannot run here;
//   1. the Hopper fused kernel where it serves (sm_90a, 16-bit, head_dim 32, even heads, D <= 256,
//      no gate) and 32 <= L <= 128, its blocks packed by whole waves; except at 64 < D <= 128 when that needs
//      more than one wave of blocks: the two-kernel path, whose time grows with the tokens where a
//      fused block costs the same however few of its rows hold tokens;
//   2. the mma.sync fused kernel where its block's sequences fit in shared memory within 128 rows
//      (with the gate's block when `gated`);
//   3. the two-kernel path (a sequence's queries spread over several blocks, keys streamed).
KernelPlan plan_path(const SpecInfo* spec, const PassRequest& r, const DeviceInfo& dev) {
  KernelPlan k;
  const int64_t num_seq = r.num_seq;
  const int len = r.len;
  const int align = spec->block_rows(r.math);
  const int group = sequences_per_block(num_seq, len, dev.sms);
  const int64_t rows = (int64_t(group) * len + align - 1) / align * align;
  const bool fits = rows <= 0x7fffffff && spec->fused_smem_bytes(int(rows), r.math, r.gated) <= size_t(dev.smem_optin);
  const bool hopper_fused = dev.sm90a && spec->caps.fused_sm90 && len <= kHopperFusedRows && !r.gated;
  const auto one_kernel = [&](int path, int g) {
    k.path = path;
    k.group = g;
    k.attn = path == kPathFusedSm90 ? kFusedSm90 : kFusedMma;
    return k;
  };
  if (r.forced == kPathFusedSm90) {
    STD_TORCH_CHECK(hopper_fused,
                "axial_fused: the Hopper fused path was forced but needs sm_90a, float16/bfloat16, head_dim 32, an "
                "even number of heads, dim <= 256, length <= 128 and no gate; got sm_", dev.arch, ", dim ", spec->dim,
                ", heads ", spec->heads, ", length ", len, r.gated ? ", gated" : "");
    return one_kernel(kPathFusedSm90, sequences_per_block_waves(num_seq, len, dev.sms));
  }
  if (r.forced == kPathFused) {
    STD_TORCH_CHECK(fits, "axial_fused: the fused path was forced but ", len, " tokens of dim ", spec->dim,
                " do not fit in one block's shared memory on this device");
    return one_kernel(kPathFused, group);
  }
  if (r.forced == kPathTwoKernel) return k;
  if (hopper_fused && len >= kHopperFusedMinLen) {
    const int per_block = sequences_per_block_waves(num_seq, len, dev.sms);
    const int64_t blocks = (num_seq + per_block - 1) / per_block;
    const bool past_one_wave = blocks > std::max(dev.sms, 1);
    if (!(spec->dim > 64 && spec->dim <= kHopperTwoKernelMaxDim && past_one_wave))
      return one_kernel(kPathFusedSm90, per_block);
  } else if (fits && rows <= kFusedMaxRows) {
    return one_kernel(kPathFused, group);
  }
  return k;
}

// The two-kernel path's kernels. The attention first: a Hopper attention kernel (sm_90a, 16-bit)
// where one serves the pass's prepared terms (the split form at D >= kSplitMinDim, else the fused
// form, by tensor maps where it has them), else attn_out_kernel (mma.sync; its projection on wgmma
// on sm_90a). The terms follow from it: the Hopper kernels read the mask as key bits in their
// fragment order and the bias prepared (by terms_prep_kernel, or by K1 from the pass's own LayerNorm
// output); attn_out_kernel reads key bits in its own order and the bias as given (the bias from the
// LayerNorm output then computed first by the pair-bias kernel). K1: the wgmma form on sm_90a (by
// TMA clusters where compiled, else three blocks an SM where that fills the waves better), else
// mma.sync.
void plan_two_kernel(const SpecInfo* spec, const PassRequest& r, const DeviceInfo& dev, KernelPlan& k) {
  const SpecCaps& caps = spec->caps;
  const bool wg = dev.sm90a && caps.k1_sm90;  // 16-bit on sm_90a: the wgmma kernels
  k.k1_per_sm = k1_blocks_per_sm(spec, r.num_seq * r.len, dev);
  if (wg && caps.hopper_attention) {
    int terms = 0;
    if (r.extras) {
      terms = (r.bias || r.bias_from_ln ? kTermBias : 0) | (r.mask ? kTermMask : 0);
      if (r.mask && caps.mma_mask && r.len <= kMaskMmaMaxLen) terms |= kTermMaskMma;
    }
    const unsigned serves = caps.attn[terms];
    const bool split = (serves & kAttnServesSplit) && r.tensor_maps && r.num_seq * r.len <= caps.split_max_tokens;
    if (split || (serves & kAttnServes)) {
      k.terms = terms;
      k.attn = split ? (r.len <= 64 ? kAttnSm90Split64 : kAttnSm90Split128)
               : (serves & kAttnServesTma) && r.tensor_maps ? kAttnSm90Tma
                                                            : kAttnSm90;
      k.proj = split ? kOutGemmSm90 : kNoKernel;
      k.bias_prepared = (terms & kTermBias) != 0;
      k.k1_bias = r.extras && r.bias_from_ln;
      if (r.extras && (r.mask || r.bias)) k.prep = kTermsPrepSm90;
    }
  }
  if (k.attn == kNoKernel) {
    k.attn = wg ? kAttnOutMmaWg : kAttnOutMma;
    k.pair_bias = r.bias_from_ln;
    if (r.extras && r.mask) {
      k.prep = kTermsPrep;
      if (caps.attn_out_mask_mma && !r.bias && !r.bias_from_ln) k.terms = kTermMask | kTermMaskMma;
    }
  }
  k.k1 = !wg                                   ? kLnQkvMma
         : caps.k1_tma && r.tensor_maps        ? kLnQkvSm90Tma
         : caps.k1_three && k.k1_per_sm == 3   ? kLnQkvSm90Three
                                               : kLnQkvSm90;
}

}  // namespace

KernelPlan plan_pass(const SpecInfo* spec, const PassRequest& r, const DeviceInfo& dev) {
  KernelPlan k = plan_path(spec, r, dev);
  k.extras = r.extras;
  if (k.path != kPathTwoKernel) {
    k.pair_bias = r.bias_from_ln;  // (the one-kernel paths read the bias as given)
    return k;
  }
  plan_two_kernel(spec, r, dev, k);
  return k;
}

std::string plan_text(const KernelPlan& k) {
  static const char* const paths[] = {"fused", "two_kernel", "fused_sm90"};
  std::string terms;
  if (k.terms & kTermBias) terms += "bias";
  if (k.terms & kTermMask) terms += std::string(terms.empty() ? "" : "|") + "mask";
  if (k.terms & kTermMaskMma) terms += "|mask_mma";
  std::string s = std::string("path=") + paths[k.path] + " group=" + std::to_string(k.group);
  if (k.path == kPathTwoKernel) s += " k1_per_sm=" + std::to_string(k.k1_per_sm);
  s += std::string(" extras=") + (k.extras ? "1" : "0") + " terms=" + (terms.empty() ? "none" : terms);
  s += std::string(" pair_bias=") + (k.pair_bias ? "1" : "0") + " k1_bias=" + (k.k1_bias ? "1" : "0");
  s += std::string(" prep=") + kernel_name(k.prep) + " k1=" + kernel_name(k.k1) + " attn=" + kernel_name(k.attn) +
       " proj=" + kernel_name(k.proj);
  return s;
}

// ---- one pass: its parameters and its launch ------------------------------------------------------

namespace {

// [a; b] along dim 0 in a fresh tensor of like's dtype and device (the stable ABI has no cat); an
// undefined part is zeros of na / nb rows. The gate's weight and bias stacked after the q/k/v ones.
Tensor stacked(const Tensor& like, const Tensor& a, int64_t na, const Tensor& b, int64_t nb) {
  std::vector<int64_t> sizes(like.sizes().begin(), like.sizes().end());
  sizes[0] = na + nb;
  Tensor out = torch::stable::new_empty(like, sizes);
  Tensor parts[2] = {torch::stable::narrow(out, 0, 0, na), torch::stable::narrow(out, 0, na, nb)};
  const Tensor* srcs[2] = {&a, &b};
  for (int i = 0; i < 2; ++i) {
    if (srcs[i]->defined()) torch::stable::copy_(parts[i], *srcs[i]);
    else torch::stable::zero_(parts[i]);
  }
  return out;
}

// torch.backends.cuda.matmul.allow_tf32, which float32 passes follow as nn.Linear does. The stable
// ABI has no accessor for it: the Python package registers axial_fused::_allow_tf32 (_ops.py),
// which reads it, and this calls that through the dispatcher.
bool float32_matmul_allows_tf32() {
  StableIValue stack[1];
  shim_check(torch_call_dispatcher("axial_fused::_allow_tf32", "", stack, TORCH_ABI_VERSION),
             "torch_call_dispatcher(axial_fused::_allow_tf32)");
  return torch::stable::detail::to<bool>(stack[0]);
}

// The tensors a pass's params point into, held until its launch is enqueued (stream-ordered frees).
struct PassTensors {
  Tensor w_qkv, qkv_bias, scratch, mask, bias, key_bits, bias_frag;
};

// x, out and the weights: the sequences' geometry (axis 0: rows, sequences along W; 1: columns,
// sequences along H) and the pointers. The gate runs as a fourth block of the QKV product: W_qkv and
// W_g stacked, and their biases, read from qkv_bias_from on: b_g alone where only the gate has a bias
// (from 3D: the q/k/v columns add nothing), both where both do (a zero block for the gate's where
// only q/k/v have one). Where the gate's tensor already follows the q/k/v one in memory (the protein
// modules pass views of one stacked weight) the product reads them in place; otherwise they are
// stacked here.
PassParams pass_params(const SpecInfo* spec, const Tensor& in, const Tensor& out, const PassWeights& w, int64_t axis,
                       double eps, bool residual, PassTensors& held) {
  const int64_t D = in.size(3);
  PassParams p;
  std::memset(&p, 0, sizeof(p));
  p.x = in.data_ptr();
  p.out = out.data_ptr();
  const int ax_seq = axis == 0 ? 1 : 2, ax_tok = axis == 0 ? 2 : 1;
  p.num_seq = in.size(0) * in.size(ax_seq);
  p.seq_inner = in.size(ax_seq);
  p.len = int(in.size(ax_tok));
  p.x_stride_outer = in.stride(0);
  p.x_stride_inner = in.stride(ax_seq);
  p.x_stride_tok = in.stride(ax_tok);
  p.o_stride_outer = out.stride(0);
  p.o_stride_inner = out.stride(ax_seq);
  p.o_stride_tok = out.stride(ax_tok);
  p.ln_w = w.norm_w.data_ptr();
  p.ln_b = w.norm_b.data_ptr();
  p.w_out = w.out_w.data_ptr();
  p.b_out = w.out_b.data_ptr();
  const auto follows = [](const Tensor& a, const Tensor& b) {  // (both contiguous by now)
    return static_cast<const char*>(b.data_ptr()) ==
           static_cast<const char*>(a.data_ptr()) + a.numel() * int64_t(a.element_size());
  };
  held.w_qkv = w.qkv_w;
  held.qkv_bias = w.qkv_b;
  p.gated = w.gate_w.defined();
  p.nq = int((p.gated ? 4 : 3) * D);
  p.qkv_bias_from = 0;
  if (p.gated) {
    if (!follows(w.qkv_w, w.gate_w)) held.w_qkv = stacked(w.qkv_w, w.qkv_w, 3 * D, w.gate_w, D);
    if (!w.qkv_b.defined() && w.gate_b.defined()) {
      held.qkv_bias = w.gate_b;
      p.qkv_bias_from = int(3 * D);
    } else if (w.qkv_b.defined() && !(w.gate_b.defined() && follows(w.qkv_b, w.gate_b))) {
      held.qkv_bias = stacked(w.qkv_b, w.qkv_b, 3 * D, w.gate_b, D);
    }
  }
  p.w_qkv = held.w_qkv.data_ptr();
  p.qkv_bias = held.qkv_bias.defined() ? held.qkv_bias.data_ptr() : nullptr;
  p.residual = residual ? 1 : 0;
  p.eps = float(eps);
  p.scale_log2 = float(kLog2e / std::sqrt(double(D / spec->heads)));
  p.math = (spec->dtype == kFloat32 && float32_matmul_allows_tf32()) ? kTf32 : kExactFp32;
  p.heads = int(spec->heads);
  return p;
}

// The mask, [B, H, W] (the sequence's dims as x's, the key's the token's), any strides: bool and
// uint8 as they are; a float16, bfloat16 or float32 mask too where terms_prep_kernel reads it (the
// protein modules' 0/1 masks: no conversion kernel a pass); else converted to bool once.
void attach_mask(const KernelPlan& k, const Tensor& given, int64_t axis, PassParams& p, PassTensors& held) {
  held.mask = given;
  const ScalarType t = given.scalar_type();
  const bool prep_reads = k.prep != kNoKernel;
  p.mask_bytes = t == ScalarType::Bool || t == ScalarType::Byte                  ? 1
                 : prep_reads && (t == ScalarType::Half || t == ScalarType::BFloat16) ? 2
                 : prep_reads && t == ScalarType::Float                          ? 4
                                                                                 : 0;
  if (p.mask_bytes == 0) {  // a bool copy, read as bytes
    held.mask = torch::stable::to(given, ScalarType::Bool);
    p.mask_bytes = 1;
  }
  const int ax_seq = axis == 0 ? 1 : 2, ax_tok = axis == 0 ? 2 : 1;
  p.mask = static_cast<const unsigned char*>(held.mask.data_ptr());
  p.m_stride_outer = held.mask.stride(0);
  p.m_stride_inner = held.mask.stride(ax_seq);
  p.m_stride_tok = held.mask.stride(ax_tok);
}

// The bias, [1 or B, heads, L, L]: read through its strides where it is prepared (terms_prep_kernel),
// else with unit key stride (LogitRow), so another key stride (the triangle ending node's bias, the
// starting node's transposed) is copied once for those kernels. A bias from the pass's own LayerNorm
// output (bias_w; checked: H == W, no `bias` beside it) is K1's to write where the plan says so;
// elsewhere the pair-bias kernel computes it first as [B, heads, H, W] (element (i, j) from token
// x[b, i, j]): the row pass's bias and, transposed, the column pass's (its query i, key j: token
// x[b, j, i]).
void attach_bias(const SpecInfo* spec, const KernelPlan& k, const Tensor& in, const Tensor& given, const PassWeights& w,
                 int64_t axis, PassParams& p, PassTensors& held) {
  held.bias = given;
  if (k.pair_bias) {
    const int64_t B = in.size(0), H = in.size(1), W = in.size(2);
    const Tensor xc = torch::stable::contiguous(in);
    Tensor t = torch::stable::new_empty(in, {B, int64_t(spec->heads), H, W});
    const cudaError_t e = launch_pair_bias(spec->dtype, xc.data_ptr(), p.ln_w, p.ln_b, w.bias_w.data_ptr(), t.data_ptr(),
                                           B * H * W, H * W, int(in.size(3)), int(spec->heads), p.eps,
                                           current_stream(in.get_device()));
    STD_TORCH_CHECK(e == cudaSuccess, "axial_fused: pair_bias kernel launch failed: ", cudaGetErrorString(e));
    held.bias = axis == 0 ? t : torch::stable::transpose(t, 2, 3);
  }
  if (!held.bias.defined()) return;
  Tensor& bias = held.bias;
  if (!k.bias_prepared && bias.size(3) > 1 && bias.stride(3) != 1) bias = torch::stable::contiguous(bias);
  p.bias = bias.data_ptr();
  p.bias_f32 = bias.scalar_type() == ScalarType::Float ? 1 : 0;
  p.bias_stride_b = bias.size(0) == 1 ? 0 : bias.stride(0);
  p.bias_stride_h = bias.stride(1);
  p.bias_stride_q = bias.stride(2);
  p.bias_stride_k = bias.size(3) == 1 ? 1 : bias.stride(3);
}

// The two-kernel path's prepared terms: key bits for a mask, the bias in the Hopper attention
// kernel's fragment order (written by terms_prep_kernel, or by K1 from bias_w), in rows of kp = L
// rounded up to 128 keys (the Hopper attention kernel's largest key tile: no tile reads past them).
void attach_terms(const SpecInfo* spec, const KernelPlan& k, const Tensor& in, const PassWeights& w, PassParams& p,
                  PassTensors& held) {
  if (!p.mask && !k.bias_prepared) return;
  p.kp = (p.len + 127) / 128 * 128;
  if (p.mask) {
    held.key_bits = torch::stable::new_empty(in, {p.num_seq * (p.kp / 16)}, ScalarType::Short);
    p.key_bits = static_cast<const uint16_t*>(held.key_bits.data_ptr());
  }
  if (!k.bias_prepared) return;
  const int64_t per_batch = int64_t(spec->heads) * p.kp * p.kp;
  if (k.k1_bias) {  // (K1 writes each token's entries; those past L must be zero)
    const int64_t n = in.size(0) * per_batch;
    held.bias_frag = p.kp == p.len ? torch::stable::new_empty(in, {n}, ScalarType::Half)
                                   : torch::stable::new_zeros(in, {n}, ScalarType::Half);
    p.bias_frag_stride_b = per_batch;
    p.bias_w = w.bias_w.data_ptr();
  } else {
    const int64_t batches = p.bias_stride_b == 0 ? 1 : in.size(0);
    held.bias_frag = torch::stable::new_empty(in, {batches * per_batch}, ScalarType::Half);
    p.bias_frag_stride_b = p.bias_stride_b == 0 ? 0 : per_batch;
  }
  p.bias_frag = static_cast<const __half*>(held.bias_frag.data_ptr());
}

}  // namespace

void run_pass(const SpecInfo* spec, const Tensor& in, const Tensor& out, const PassWeights& w, int64_t axis,
              double eps, const PassExtras& extras) {
  PassTensors held;
  PassParams p = pass_params(spec, in, out, w, axis, eps, extras.residual, held);
  if (p.num_seq == 0) return;
  const int device = in.get_device();
  const DeviceInfo& dev = device_info(device);
  PassRequest r;
  r.num_seq = p.num_seq;
  r.len = p.len;
  r.math = p.math;
  r.gated = p.gated != 0;
  r.mask = extras.mask.defined();
  r.bias = extras.bias.defined();
  r.bias_from_ln = w.bias_w.defined();
  r.extras = has_extras(p) || r.mask || r.bias || r.bias_from_ln;  // (p has no mask or bias yet)
  r.forced = g_path_override.load();
  KernelPlan k = plan_pass(spec, r, dev);
  if (k.path == kPathTwoKernel) {
    const size_t need = spec->two_kernel_smem_bytes(p.math);
    STD_TORCH_CHECK(need <= size_t(dev.smem_optin), "axial_fused: dim ", in.size(3), " in ", in.scalar_type(),
                " needs ", need, " bytes of shared memory per block; this device allows ", dev.smem_optin);
    held.scratch = torch::stable::new_empty(in, {p.num_seq * p.len * p.nq});  // q/k/v (and g), [S * L, nq]
    p.scratch = held.scratch.data_ptr();
  }
  // The tensor maps are encoded here, before anything launches: where one does not encode (a driver
  // without the encoder), the pass is planned again without the TMA kernels.
  TensorMaps maps{};  // (a kernel given a map it does not read gets zeros)
  if (plan_needs_maps(k) && spec->encode_maps(k, p, &maps) != cudaSuccess) {
    r.tensor_maps = false;
    k = plan_pass(spec, r, dev);
  }
  p.arch = dev.arch;
  p.path = k.path;
  p.group = k.group;
  p.k1_per_sm = k.k1_per_sm;
  if (r.mask) attach_mask(k, extras.mask, axis, p, held);
  attach_bias(spec, k, in, extras.bias, w, axis, p, held);
  if (k.path == kPathTwoKernel) attach_terms(spec, k, in, w, p, held);
  const cudaError_t err = spec->launch(k, p, maps, current_stream(device));
  STD_TORCH_CHECK(err == cudaSuccess, "axial_fused: kernel launch failed: ", cudaGetErrorString(err));
}

}  // namespace axial_fused
