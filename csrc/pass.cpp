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

#include "axial_fused/pair_bias.h"
#include "pass.h"

namespace axial_fused {

#define AXIAL_FUSED_SPEC(dt, d, h) const SpecInfo* spec_##dt##_##d##_##h();
#include "specs.inc"
#undef AXIAL_FUSED_SPEC

const std::vector<const SpecInfo*>& registry() {
  static const std::vector<const SpecInfo*> r = {
#define AXIAL_FUSED_SPEC(dt, d, h) spec_##dt##_##d##_##h(),
#include "specs.inc"
#undef AXIAL_FUSED_SPEC
  };
  return r;
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

// The Hopper fused kernel (kPathFusedSm90) exists for 16-bit, head_dim 32, an even number of heads
// and D <= 256 (FusedSm90<T, D, HEADS>::SERVED), for sequences of at most 128 tokens, without the gate.
bool hopper_fused_serves(const SpecInfo* spec) {
  return spec->dtype != kFloat32 && spec->dim / spec->heads == 32 && spec->heads % 2 == 0 && spec->dim <= 256;
}
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
// 1.3 (docs/performance.md).
int k1_blocks_per_sm(const SpecInfo* spec, int64_t tokens, const DeviceInfo& dev) {
  if (!dev.sm90a || spec->dtype == kFloat32 || spec->dim > kQkvThreeMaxDim) return 2;
  const int64_t blocks = (tokens + 127) / 128;
  const auto fill = [&](int per_sm) {
    const int64_t slots = int64_t(per_sm) * std::max(dev.sms, 1), waves = (blocks + slots - 1) / slots;
    return double(blocks) / double(waves * slots);
  };
  return fill(3) > fill(2) ? 3 : 2;
}

// The path and the fused paths' sequences per block. The rule, in order (docs/design.md, "The planner"):
//   0. `forced` >= 0 (tests and benchmarks, set_path_override): that path, or an error saying why it
//      cannot run here;
//   1. the Hopper fused kernel where it serves (sm_90a, 16-bit, head_dim 32, even heads, D <= 256,
//      no gate) and 32 <= L <= 128, its blocks packed by whole waves; except at 64 < D <= 128 when that needs
//      more than one wave of blocks: the two-kernel path, whose time grows with the tokens where a
//      fused block costs the same however few of its rows hold tokens;
//   2. the mma.sync fused kernel where its block's sequences fit in shared memory within 128 rows
//      (with the gate's block when `gated`);
//   3. the two-kernel path (a sequence's queries spread over several blocks, keys streamed).
Plan plan_path(const SpecInfo* spec, int64_t num_seq, int len, int math, const DeviceInfo& dev, int forced,
               bool gated) {
  const int align = spec->block_rows(math);
  const int group = sequences_per_block(num_seq, len, dev.sms);
  const int64_t rows = (int64_t(group) * len + align - 1) / align * align;
  const bool fits = rows <= 0x7fffffff && spec->fused_smem_bytes(int(rows), math, gated) <= size_t(dev.smem_optin);
  const bool hopper_fused = dev.sm90a && hopper_fused_serves(spec) && len <= kHopperFusedRows && !gated;
  if (forced == kPathFusedSm90) {
    STD_TORCH_CHECK(hopper_fused,
                "axial_fused: the Hopper fused path was forced but needs sm_90a, float16/bfloat16, head_dim 32, an "
                "even number of heads, dim <= 256, length <= 128 and no gate; got sm_", dev.arch, ", dim ", spec->dim,
                ", heads ", spec->heads, ", length ", len, gated ? ", gated" : "");
    return {kPathFusedSm90, sequences_per_block_waves(num_seq, len, dev.sms)};
  }
  if (forced == kPathFused) {
    STD_TORCH_CHECK(fits, "axial_fused: the fused path was forced but ", len, " tokens of dim ", spec->dim,
                " do not fit in one block's shared memory on this device");
    return {kPathFused, group};
  }
  if (forced == kPathTwoKernel) return {kPathTwoKernel, 1};
  if (hopper_fused && len >= kHopperFusedMinLen) {
    const int per_block = sequences_per_block_waves(num_seq, len, dev.sms);
    const int64_t blocks = (num_seq + per_block - 1) / per_block;
    const bool past_one_wave = blocks > std::max(dev.sms, 1);
    if (spec->dim > 64 && spec->dim <= kHopperTwoKernelMaxDim && past_one_wave) return {kPathTwoKernel, 1};
    return {kPathFusedSm90, per_block};
  }
  if (fits && rows <= kFusedMaxRows) return {kPathFused, group};
  return {kPathTwoKernel, 1};
}

}  // namespace

// Which path runs a pass of `num_seq` sequences of `len` tokens on `dev`, how many sequences a block
// of a fused path takes, and K1's blocks an SM on the two-kernel path (k1_blocks_per_sm).
Plan plan_pass(const SpecInfo* spec, int64_t num_seq, int len, int math, const DeviceInfo& dev, int forced,
               bool gated) {
  Plan plan = plan_path(spec, num_seq, len, math, dev, forced, gated);
  if (plan.path == kPathTwoKernel) plan.k1_per_sm = k1_blocks_per_sm(spec, num_seq * len, dev);
  return plan;
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

}  // namespace

void run_pass(const SpecInfo* spec, const Tensor& in, const Tensor& out, const PassWeights& w, int64_t axis,
              double eps, const PassExtras& extras) {
  const int64_t B = in.size(0), D = in.size(3);  // H, W: checked by check_shapes
  PassParams p;
  std::memset(&p, 0, sizeof(p));
  p.x = in.data_ptr();
  p.out = out.data_ptr();
  const int ax_seq = axis == 0 ? 1 : 2, ax_tok = axis == 0 ? 2 : 1;
  p.num_seq = B * in.size(ax_seq);
  p.seq_inner = in.size(ax_seq);
  p.len = int(in.size(ax_tok));
  p.x_stride_outer = in.stride(0);
  p.x_stride_inner = in.stride(ax_seq);
  p.x_stride_tok = in.stride(ax_tok);
  p.o_stride_outer = out.stride(0);
  p.o_stride_inner = out.stride(ax_seq);
  p.o_stride_tok = out.stride(ax_tok);
  if (p.num_seq == 0) return;
  p.ln_w = w.norm_w.data_ptr();
  p.ln_b = w.norm_b.data_ptr();
  p.w_out = w.out_w.data_ptr();
  p.b_out = w.out_b.data_ptr();
  // The gate runs as a fourth block of the QKV product: W_qkv and W_g stacked, and their biases,
  // read from qkv_bias_from on: b_g alone where only the gate has a bias (from 3D: the q/k/v columns
  // add nothing), both where both do (a zero block for the gate's where only q/k/v have one). Where
  // the gate's tensor already follows the q/k/v one in memory (the protein modules pass views of one
  // stacked weight) the product reads them in place; otherwise they are stacked here, kept alive
  // until the launch is enqueued (stream-ordered frees).
  const auto follows = [](const Tensor& a, const Tensor& b) {  // (both contiguous by now)
    return static_cast<const char*>(b.data_ptr()) ==
           static_cast<const char*>(a.data_ptr()) + a.numel() * int64_t(a.element_size());
  };
  Tensor w_qkv = w.qkv_w, qkv_bias = w.qkv_b;
  p.gated = w.gate_w.defined();
  p.nq = int((p.gated ? 4 : 3) * D);
  p.qkv_bias_from = 0;
  if (p.gated) {
    if (!follows(w.qkv_w, w.gate_w)) w_qkv = stacked(w.qkv_w, w.qkv_w, 3 * D, w.gate_w, D);
    if (!w.qkv_b.defined() && w.gate_b.defined()) {
      qkv_bias = w.gate_b;
      p.qkv_bias_from = int(3 * D);
    } else if (w.qkv_b.defined() && !(w.gate_b.defined() && follows(w.qkv_b, w.gate_b))) {
      qkv_bias = stacked(w.qkv_b, w.qkv_b, 3 * D, w.gate_b, D);
    }
  }
  p.w_qkv = w_qkv.data_ptr();
  p.qkv_bias = qkv_bias.defined() ? qkv_bias.data_ptr() : nullptr;
  p.residual = extras.residual ? 1 : 0;
  p.eps = float(eps);
  p.scale_log2 = float(1.4426950408889634 / std::sqrt(double(D / spec->heads)));
  p.math = (spec->dtype == kFloat32 && float32_matmul_allows_tf32()) ? kTf32 : kExactFp32;

  const int device = in.get_device();
  const DeviceInfo& dev = device_info(device);
  p.arch = dev.sm90a ? 90 : 0;
  const Plan plan = plan_pass(spec, p.num_seq, p.len, p.math, dev, g_path_override.load(), p.gated != 0);
  p.path = plan.path;
  p.group = plan.group;
  p.k1_per_sm = plan.k1_per_sm;
  Tensor scratch;
  if (plan.path == kPathTwoKernel) {
    const size_t need = spec->two_kernel_smem_bytes(p.math);
    STD_TORCH_CHECK(need <= size_t(dev.smem_optin), "axial_fused: dim ", D, " in ", in.scalar_type(),
                " needs ", need, " bytes of shared memory per block; this device allows ",
                dev.smem_optin);
    scratch = torch::stable::new_empty(in, {p.num_seq * p.len * p.nq});
    p.scratch = scratch.data_ptr();
  }
  const bool prepare_bias = plan.path == kPathTwoKernel && dev.sm90a && spec->hopper_attention;
  p.heads = int(spec->heads);
  // The mask, [B, H, W] (the sequence's dims as x's, the key's the token's), any strides: bool and
  // uint8 as they are; a float16, bfloat16 or float32 mask too on the two-kernel path, whose prep
  // kernel reads it (the protein modules' 0/1 masks: no conversion kernel a pass); else converted
  // to bool once.
  Tensor mask = extras.mask;
  if (mask.defined()) {
    const ScalarType t = mask.scalar_type();
    const bool prep_reads = plan.path == kPathTwoKernel;
    p.mask_bytes = t == ScalarType::Bool || t == ScalarType::Byte                  ? 1
                   : prep_reads && (t == ScalarType::Half || t == ScalarType::BFloat16) ? 2
                   : prep_reads && t == ScalarType::Float                          ? 4
                                                                                   : 0;
    if (p.mask_bytes == 0) {  // a bool copy, read as bytes
      mask = torch::stable::to(mask, ScalarType::Bool);
      p.mask_bytes = 1;
    }
    p.mask = static_cast<const unsigned char*>(mask.data_ptr());
    p.m_stride_outer = mask.stride(0);
    p.m_stride_inner = mask.stride(ax_seq);
    p.m_stride_tok = mask.stride(ax_tok);
  }
  // The bias, [1 or B, heads, L, L]: read through its strides where it is prepared (terms_prep_kernel),
  // else with unit key stride (LogitRow), so another key stride (the triangle ending node's bias, the
  // starting node's transposed) is copied once for those kernels.
  // A bias from the pass's own LayerNorm output (bias_w; checked: H == W, no `bias` beside it): K1
  // writes it where the attention kernel reads the bias prepared; elsewhere the pair-bias kernel
  // computes it beforehand as [B, heads, H, W] (element (i, j) from token x[b, i, j]), which is the
  // row pass's bias and, transposed, the column pass's (its query i, key j: token x[b, j, i]).
  Tensor bias = extras.bias;
  const bool k1_bias = w.bias_w.defined() && prepare_bias;
  if (w.bias_w.defined() && !k1_bias) {
    const Tensor xc = torch::stable::contiguous(in);
    Tensor t = torch::stable::new_empty(in, {B, int64_t(spec->heads), in.size(1), in.size(2)});
    const cudaError_t e = launch_pair_bias(spec->dtype, xc.data_ptr(), p.ln_w, p.ln_b, w.bias_w.data_ptr(),
                                           t.data_ptr(), B * in.size(1) * in.size(2), in.size(1) * in.size(2),
                                           int(D), int(spec->heads), p.eps, current_stream(device));
    STD_TORCH_CHECK(e == cudaSuccess, "axial_fused: pair_bias kernel launch failed: ", cudaGetErrorString(e));
    bias = axis == 0 ? t : torch::stable::transpose(t, 2, 3);
  }
  if (bias.defined()) {
    if (!prepare_bias && bias.size(3) > 1 && bias.stride(3) != 1) bias = torch::stable::contiguous(bias);
    p.bias = bias.data_ptr();
    p.bias_f32 = bias.scalar_type() == ScalarType::Float ? 1 : 0;
    p.bias_stride_b = bias.size(0) == 1 ? 0 : bias.stride(0);
    p.bias_stride_h = bias.stride(1);
    p.bias_stride_q = bias.stride(2);
    p.bias_stride_k = bias.size(3) == 1 ? 1 : bias.stride(3);
  }
  // The two-kernel path's attention reads the mask as prepared key bits, and the Hopper attention
  // kernel the bias prepared too (PassParams::key_bits, bias_frag; written by the launch before K1).
  Tensor key_bits, bias_frag;
  if (plan.path == kPathTwoKernel && (p.mask || (p.bias && prepare_bias) || k1_bias)) {
    // (a multiple of 128, the Hopper attention kernel's largest key tile: no tile reads past its terms)
    p.kp = (p.len + 127) / 128 * 128;
    if (p.mask) {
      key_bits = torch::stable::new_empty(in, {p.num_seq * (p.kp / 16)}, ScalarType::Short);
      p.key_bits = static_cast<const uint16_t*>(key_bits.data_ptr());
    }
    if (p.bias && prepare_bias) {
      const int64_t batches = p.bias_stride_b == 0 ? 1 : B;
      bias_frag = torch::stable::new_empty(in, {batches * spec->heads * p.kp * p.kp}, ScalarType::Half);
      p.bias_frag = static_cast<const __half*>(bias_frag.data_ptr());
      p.bias_frag_stride_b = p.bias_stride_b == 0 ? 0 : int64_t(spec->heads) * p.kp * p.kp;
    }
    if (k1_bias) {  // (K1 writes each token's entries; those past L must be zero)
      const int64_t n = B * spec->heads * p.kp * p.kp;
      bias_frag = p.kp == p.len ? torch::stable::new_empty(in, {n}, ScalarType::Half)
                                : torch::stable::new_zeros(in, {n}, ScalarType::Half);
      p.bias_frag = static_cast<const __half*>(bias_frag.data_ptr());
      p.bias_frag_stride_b = int64_t(spec->heads) * p.kp * p.kp;
      p.bias_w = w.bias_w.data_ptr();
    }
  }
  const cudaError_t err = spec->launch(p, current_stream(device));
  STD_TORCH_CHECK(err == cudaSuccess, "axial_fused: kernel launch failed: ", cudaGetErrorString(err));
}

}  // namespace axial_fused
