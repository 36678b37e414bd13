// The only file that sees torch: argument checks, the PassParams set-up for the row and column
// passes, the choice between the fused and the two-kernel path, and the operator registration
// (torch.ops.axial_fused.axial_pass / axial_attention: CUDA, Meta, Autograd and AutocastCUDA kernels).
#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <array>
#include <cmath>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "axial_fused/params.h"

namespace axial_fused {

#define AXIAL_FUSED_SPEC(dt, d, h) const SpecInfo* spec_##dt##_##d##_##h();
#include "specs.inc"
#undef AXIAL_FUSED_SPEC

namespace {

const std::vector<const SpecInfo*>& registry() {
  static const std::vector<const SpecInfo*> r = {
#define AXIAL_FUSED_SPEC(dt, d, h) spec_##dt##_##d##_##h(),
#include "specs.inc"
#undef AXIAL_FUSED_SPEC
  };
  return r;
}

int dtype_code(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return kFloat32;
    case at::kHalf: return kFloat16;
    case at::kBFloat16: return kBFloat16;
    default: return -1;
  }
}

const SpecInfo* find_spec(int dtype, int64_t dim, int64_t heads) {
  for (const SpecInfo* s : registry())
    if (s->dtype == dtype && s->dim == dim && s->heads == heads) return s;
  return nullptr;
}

struct DeviceInfo {
  int sms = 0;
  int smem_optin = 0;
  int arch = 0;  // compute capability major * 10 + minor
};

// Whether this binary holds sm_90a code (the Hopper wgmma kernels); a plain sm_90 build does not.
bool built_with_sm90a() {
  return (std::string(";") + AXIAL_FUSED_ARCH_LIST + ";").find(";90a;") != std::string::npos;
}

const DeviceInfo& device_info(int device) {
  static std::array<DeviceInfo, 64> infos;
  static std::array<std::once_flag, 64> once;
  TORCH_CHECK(device >= 0 && device < 64, "axial_fused: device index ", device, " out of range");
  std::call_once(once[device], [device] {
    cudaDeviceProp prop;
    C10_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    infos[device].sms = prop.multiProcessorCount;
    infos[device].smem_optin = int(prop.sharedMemPerBlockOptin);
    infos[device].arch = prop.major * 10 + prop.minor;
  });
  return infos[device];
}

// Path override for tests and benchmarks: -1 automatic, else a PassPath.
std::atomic<int> g_path_override{-1};
// Largest fused buffer (tokens per block) the automatic choice takes: beyond it, a sequence's
// queries are better spread over several blocks (two-kernel path).
std::atomic<int> g_fused_max_rows{128};
// Shortest sequence the automatic choice gives the Hopper fused kernel (path 2) where it serves the
// specialization; shorter ones stay on the fused mma.sync kernel, whose smaller blocks suit them.
std::atomic<int> g_hopper_fused_min_len{32};
// Whether the two-kernel path's second kernel runs on the Hopper wgmma attention kernel where it serves
// (head_dim 32 or 64, 16-bit, sm_90a); off: the mma.sync attention kernel, for comparisons.
std::atomic<int> g_hopper_attention{1};
// Whether the Hopper fused kernel packs sequences by whole waves (sequences_per_block_waves, the
// default since session 15: odd 83 -> 58 us) or, off, by sequences_per_block's rule, for comparisons.
std::atomic<int> g_hopper_pack_waves{1};
// Largest D (above 64) at which the automatic choice takes the two-kernel path over the Hopper fused
// kernel when the fused kernel would need more than one wave of blocks (hopper_two_kernel_pays);
// 0: never. Measured faster at D = 128 (session 15: vision 75.8 -> 67.9 us, fused_graph); the
// default since session 16, when its GPU tests passed on the device.
std::atomic<int> g_hopper_two_kernel_max_dim{128};

// The specializations fused_sm90_kernel exists for (FusedSm90<T, D, HEADS>::SERVED).
bool hopper_fused_serves(const SpecInfo* spec) {
  return spec->dtype != kFloat32 && spec->dim / spec->heads == 32 && spec->heads % 2 == 0 && spec->dim <= 256;
}

// Sequences per block of a fused kernel packing short sequences into `block_tokens` rows (64 for the
// mma.sync kernel, 128 for the Hopper one): as many as fit, but no fewer blocks than SMs while there are
// sequences to spread; 1 for a sequence longer than block_tokens.
int sequences_per_block(int64_t num_seq, int len, int sms, int block_tokens) {
  const int64_t by_sms = num_seq / std::max(sms, 1);
  return int(std::max<int64_t>(1, std::min<int64_t>(block_tokens / len, by_sms)));
}

// Sequences per block of the Hopper fused kernel by whole waves: its block runs every product and
// softmax over all 128 rows however many hold tokens, so a block of two packed sequences costs about
// what a block of one does, and the pass takes (waves of one block per SM) x (one block's time). The
// fewest waves that 1 to block_tokens / len sequences a block reach, with the fewest sequences a
// block that reach them. Where sequences_per_block differs it leaves a last partial wave: odd's
// column pass (200 sequences of 56 tokens on 132 SMs), 1 a block in 2 waves (54 us) against 2 a block
// in 1 wave here (29 us; session 15). Never more waves than sequences_per_block.
int sequences_per_block_waves(int64_t num_seq, int len, int sms, int block_tokens) {
  const int cap = std::max(1, block_tokens / std::max(len, 1));
  const int64_t per_wave = std::max(sms, 1);
  auto waves = [&](int g) { return ((num_seq + g - 1) / g + per_wave - 1) / per_wave; };
  const int64_t fewest = waves(cap);  // (waves(g) never grows with g)
  int g = 1;
  while (waves(g) > fewest) ++g;
  return g;
}

// The Hopper fused kernel's sequences per block (g_hopper_pack_waves picks the rule).
int hopper_sequences_per_block(int64_t num_seq, int len, int sms) {
  return g_hopper_pack_waves.load() ? sequences_per_block_waves(num_seq, len, sms, 128)
                                    : sequences_per_block(num_seq, len, sms, 128);
}

// Whether the two-kernel path beats the Hopper fused kernel (which packs `per_block` of `num_seq`
// sequences a block). A fused block costs about the same however many of its 128 rows hold tokens
// (one block's time: 18.6 us at D = 128, 38 at 256), while the two-kernel path's time grows with
// the tokens (about 1.0 ns a token a pass at D = 128, 2.5 at 256). So the fused kernel wins in one
// wave of blocks at any D. Past one wave, measured in session 15 (us of kernels per forward, fused /
// two-kernel): D = 128 loses (vision 74.7 / 65.1; 5x64x64 74.9 / 56.3), D = 64 wins (8x64x64 42.3 /
// 66.5; 5x64x64 42.0 / 53.7), and so do D = 192 (odd's kernels on the two-kernel path: 93.7 against
// 58) and 256 (latent 151.5 / 167.5). Hence only 64 < D <= g_hopper_two_kernel_max_dim.
bool hopper_two_kernel_pays(int dim, int64_t num_seq, int per_block, int sms) {
  const int64_t blocks = (num_seq + per_block - 1) / std::max(per_block, 1);
  return dim > 64 && dim <= g_hopper_two_kernel_max_dim.load() && blocks > std::max(sms, 1);
}

struct Plan {
  int path;
  int group;
};

Plan plan_pass(const SpecInfo* spec, int64_t num_seq, int len, int math, int device) {
  const DeviceInfo& dev = device_info(device);
  const int align = spec->block_rows(math);
  const int group = sequences_per_block(num_seq, len, dev.sms, 64);
  const int64_t rows = (int64_t(group) * len + align - 1) / align * align;
  const bool fits = rows <= 0x7fffffff && spec->fused_smem_bytes(int(rows), math) <= size_t(dev.smem_optin);
  const int forced = g_path_override.load();
  if (forced == kPathFusedSm90) {
    // The Hopper head-looped kernel (one block of 128 token rows), forced at any length it serves.
    TORCH_CHECK(dev.arch == 90 && built_with_sm90a() && hopper_fused_serves(spec) && len <= 128,
                "axial_fused: the Hopper fused path was forced but needs sm_90a, float16/bfloat16, head_dim 32, an "
                "even number of heads, dim <= 256 and length <= 128; got sm_", dev.arch, ", dim ", spec->dim,
                ", heads ", spec->heads, ", length ", len);
    return {kPathFusedSm90, hopper_sequences_per_block(num_seq, len, dev.sms)};
  }
  if (forced == kPathFused) {
    TORCH_CHECK(fits, "axial_fused: the fused path was forced but ", len, " tokens of dim ", spec->dim,
                " do not fit in one block's shared memory on this device");
    return {kPathFused, group};
  }
  if (forced == kPathTwoKernel) return {kPathTwoKernel, 1};
  if (dev.arch == 90 && built_with_sm90a() && hopper_fused_serves(spec) && len >= g_hopper_fused_min_len.load() &&
      len <= 128) {
    const int per_block = hopper_sequences_per_block(num_seq, len, dev.sms);
    if (!hopper_two_kernel_pays(spec->dim, num_seq, per_block, dev.sms)) return {kPathFusedSm90, per_block};
    return {kPathTwoKernel, 1};
  }
  if (fits && rows <= g_fused_max_rows.load()) return {kPathFused, group};
  return {kPathTwoKernel, 1};
}

// The checks every entry point makes first (the meta, CUDA and autograd kernels alike).
void check_rank(const at::Tensor& x) {
  TORCH_CHECK_VALUE(x.dim() == 4, "axial_fused: x must be [B, H, W, D], got ", x.dim(), " dimensions");
}
void check_axis(int64_t axis) {
  TORCH_CHECK_VALUE(axis == 0 || axis == 1, "axial_fused: axis must be 0 (row) or 1 (col), got ", axis);
}
void check_heads(int64_t D, int64_t num_heads) {
  TORCH_CHECK_VALUE(num_heads > 0 && D % num_heads == 0, "axial_fused: D = ", D, " is not divisible by num_heads = ",
                    num_heads);
}

// The argument checks. check_shapes needs only sizes, dtypes and devices, so the Meta (shape-only)
// kernels run it too and a bad call fails when traced, not only when it reaches the GPU;
// check_inputs adds what only the CUDA kernel needs (layout, alignment, a compiled specialization).
// Errors: TypeError (TORCH_CHECK_TYPE) for dtypes, ValueError (TORCH_CHECK_VALUE) for the rest,
// each naming the argument, what was given and what is supported (docs/errors.md).
// `name` is called only to build a failure's message (no string work on the hot path).
template <class Name>
void check_weight(const at::Tensor& w, const at::Tensor& x, Name&& name, std::initializer_list<int64_t> shape) {
  TORCH_CHECK_VALUE(w.defined(), "axial_fused: ", name(), " is missing (None); expected a tensor of shape ",
                    at::IntArrayRef(shape));
  TORCH_CHECK_VALUE(w.sizes().equals(shape), "axial_fused: ", name(), " has shape ", w.sizes(), ", expected ",
                    at::IntArrayRef(shape), " for D = ", x.size(3));
  TORCH_CHECK_TYPE(w.scalar_type() == x.scalar_type(), "axial_fused: ", name(), " is ", w.scalar_type(),
                   " but x is ", x.scalar_type(), "; x and the weights must share one dtype");
  TORCH_CHECK_VALUE(w.device() == x.device(), "axial_fused: ", name(), " is on ", w.device(), " but x is on ",
                    x.device());
}

// Held by value (a reference count each): packing may replace a weight by a contiguous copy.
struct PassWeights {
  at::Tensor norm_w, norm_b, qkv_w, out_w, out_b;
};

// The kernels read x in place when its feature stride is 1, its other strides and its pointer are
// multiples of 16 bytes (the Hopper LN+QKV kernel loads x rows with 16-byte cp.async, which silently
// rounds a misaligned address down: a pointer 4 bytes past a 16-byte boundary read the wrong tokens),
// and they read weights that are contiguous and 16-byte aligned. Any other layout (an odd slice, a
// view a few elements into a buffer, a transposed weight view) is copied once into a fresh
// caching-allocator block, which meets both. Doing this here rather than falling back in Python
// keeps the Python decision free of data_ptr() reads, which torch.compile / torch.export cannot
// make on fake tensors, and one copy is far cheaper than the reference path.
bool readable_in_place(const at::Tensor& x) {
  const int64_t es = x.element_size();
  return x.stride(3) == 1 && (x.stride(0) * es) % 16 == 0 && (x.stride(1) * es) % 16 == 0 &&
         (x.stride(2) * es) % 16 == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0;
}

at::Tensor packed_x(const at::Tensor& x) {
  return readable_in_place(x) ? x : x.clone(at::MemoryFormat::Contiguous);
}

at::Tensor packed_weight(const at::Tensor& w) {
  const bool ok = w.is_contiguous() && reinterpret_cast<uintptr_t>(w.data_ptr()) % 16 == 0;
  return ok ? w : w.clone(at::MemoryFormat::Contiguous);
}

PassWeights packed(const PassWeights& w) {
  return {packed_weight(w.norm_w), packed_weight(w.norm_b), packed_weight(w.qkv_w), packed_weight(w.out_w),
          packed_weight(w.out_b)};
}


constexpr const char* kFields[] = {"norm_weight", "norm_bias", "qkv_weight", "out_weight", "out_bias"};

std::string weight_name(size_t pass, size_t num_passes, int field) {
  return std::string(num_passes == 2 ? (pass == 0 ? "row_" : "col_") : "") + kFields[field];
}

void check_shapes(const at::Tensor& x, int64_t num_heads, double eps, const std::vector<PassWeights>& passes) {
  TORCH_CHECK_VALUE(x.defined(), "axial_fused: x is missing (None)");
  check_rank(x);
  TORCH_CHECK_TYPE(dtype_code(x.scalar_type()) >= 0, "axial_fused: x is ", x.scalar_type(),
                   "; supported: float32, float16, bfloat16");
  const int64_t D = x.size(3);
  check_heads(D, num_heads);
  TORCH_CHECK_VALUE(std::isfinite(eps) && eps > 0, "axial_fused: eps must be a positive finite number, got ", eps);
  for (size_t i = 0; i < passes.size(); ++i) {
    const PassWeights& pw = passes[i];
    const at::Tensor* ws[] = {&pw.norm_w, &pw.norm_b, &pw.qkv_w, &pw.out_w, &pw.out_b};
    for (int f = 0; f < 5; ++f) {
      const auto name = [&] { return weight_name(i, passes.size(), f); };
      if (f == 2) check_weight(*ws[f], x, name, {3 * D, D});
      else if (f == 3) check_weight(*ws[f], x, name, {D, D});
      else check_weight(*ws[f], x, name, {D});
    }
  }
  TORCH_CHECK_VALUE(x.size(1) >= 1 && x.size(2) >= 1, "axial_fused: H and W must be at least 1, got x of shape ",
                    x.sizes());
  // Offsets are 64-bit throughout; these bounds keep the kernels' 32-bit per-block token counts valid.
  TORCH_CHECK_VALUE(x.size(1) * x.size(2) < (1LL << 31) && x.size(1) <= (1 << 24) && x.size(2) <= (1 << 24),
                    "axial_fused: x of shape ", x.sizes(), " is too large: H * W must be below 2^31 and H, W at most 2^24");
}

// check_shapes plus what only the CUDA kernel needs: x on a CUDA device and a compiled specialization.
// Layouts the kernels cannot read in place are copied by packed_x / packed (above), not rejected.
const SpecInfo* check_inputs(const at::Tensor& x, int64_t num_heads, double eps, const std::vector<PassWeights>& passes) {
  check_shapes(x, num_heads, eps, passes);
  TORCH_CHECK_VALUE(x.is_cuda(), "axial_fused: the CUDA kernel got x on ", x.device());
  const SpecInfo* spec = find_spec(dtype_code(x.scalar_type()), x.size(3), num_heads);
  TORCH_CHECK_VALUE(spec != nullptr, "axial_fused: no compiled specialization for dtype ", x.scalar_type(), ", dim ",
                    x.size(3), ", heads ", num_heads, " (see axial_fused.supported_configs())");
  return spec;
}

// One pass from `in` to `out` (which may be the same tensor). axis 0: rows (sequences along W),
// axis 1: columns (sequences along H).
void run_pass(const SpecInfo* spec, const at::Tensor& in, const at::Tensor& out, const PassWeights& w, int64_t axis,
              double eps) {
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
  p.w_qkv = w.qkv_w.data_ptr();
  p.w_out = w.out_w.data_ptr();
  p.b_out = w.out_b.data_ptr();
  p.eps = float(eps);
  p.scale_log2 = float(1.4426950408889634 / std::sqrt(double(D / spec->heads)));
  p.math = (spec->dtype == kFloat32 && at::globalContext().allowTF32CuBLAS()) ? kTf32 : kExactFp32;

  const int device = in.get_device();
  p.arch = device_info(device).arch == 90 && built_with_sm90a() ? 90 : 0;
  const Plan plan = plan_pass(spec, p.num_seq, p.len, p.math, device);
  p.path = plan.path;
  p.group = plan.group;
  at::Tensor scratch;
  if (plan.path == kPathTwoKernel) {
    const size_t need = spec->two_kernel_smem_bytes(p.math);
    TORCH_CHECK(need <= size_t(device_info(device).smem_optin), "axial_fused: dim ", D, " in ", in.scalar_type(),
                " needs ", need, " bytes of shared memory per block; this device allows ",
                device_info(device).smem_optin);
    scratch = at::empty({p.num_seq * p.len * 3 * D}, in.options());
    p.scratch = scratch.data_ptr();
    p.attn_sm90 = g_hopper_attention.load();
  }
  const cudaError_t err = spec->launch(p, c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream());
  TORCH_CHECK(err == cudaSuccess, "axial_fused: kernel launch failed: ", cudaGetErrorString(err));
}

at::Tensor axial_pass_cuda(const at::Tensor& x, const at::Tensor& norm_w, const at::Tensor& norm_b,
                           const at::Tensor& qkv_w, const at::Tensor& out_w, const at::Tensor& out_b, int64_t num_heads,
                           int64_t axis, double eps) {
  check_axis(axis);
  const PassWeights w{norm_w, norm_b, qkv_w, out_w, out_b};
  const SpecInfo* spec = check_inputs(x, num_heads, eps, {w});
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty(x.sizes(), x.options());
  run_pass(spec, packed_x(x), out, packed(w), axis, eps);
  return out;
}

at::Tensor axial_attention_cuda(const at::Tensor& x, const at::Tensor& rnw, const at::Tensor& rnb,
                                const at::Tensor& rqkv, const at::Tensor& row, const at::Tensor& rob,
                                const at::Tensor& cnw, const at::Tensor& cnb, const at::Tensor& cqkv,
                                const at::Tensor& cow, const at::Tensor& cob, int64_t num_heads, double eps) {
  const PassWeights row_w{rnw, rnb, rqkv, row, rob}, col_w{cnw, cnb, cqkv, cow, cob};
  const SpecInfo* spec = check_inputs(x, num_heads, eps, {row_w, col_w});
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty(x.sizes(), x.options());
  run_pass(spec, packed_x(x), out, packed(row_w), 0, eps);
  run_pass(spec, out, out, packed(col_w), 1, eps);  // in place: each element is read before it is written
  return out;
}

// Shape-only implementations (meta / fake tensors): a new contiguous tensor like x. With concrete
// sizes they run the same shape/dtype/device checks as the CUDA kernel (symbolic sizes, as under
// torch.compile with dynamic shapes, skip them: reading them would add guards).
bool concrete(std::initializer_list<const at::Tensor*> ts) {
  for (const at::Tensor* t : ts)
    if (t->defined() && t->unsafeGetTensorImpl()->has_symbolic_sizes_strides()) return false;
  return true;
}
at::Tensor axial_pass_meta(const at::Tensor& x, const at::Tensor& nw, const at::Tensor& nb, const at::Tensor& qkv,
                           const at::Tensor& ow, const at::Tensor& ob, int64_t num_heads, int64_t axis, double eps) {
  check_rank(x);
  check_axis(axis);
  if (concrete({&x, &nw, &nb, &qkv, &ow, &ob})) check_shapes(x, num_heads, eps, {PassWeights{nw, nb, qkv, ow, ob}});
  return at::empty_symint(x.sym_sizes(), x.options());
}
at::Tensor axial_attention_meta(const at::Tensor& x, const at::Tensor& rnw, const at::Tensor& rnb,
                                const at::Tensor& rqkv, const at::Tensor& row, const at::Tensor& rob,
                                const at::Tensor& cnw, const at::Tensor& cnb, const at::Tensor& cqkv,
                                const at::Tensor& cow, const at::Tensor& cob, int64_t num_heads, double eps) {
  check_rank(x);
  if (concrete({&x, &rnw, &rnb, &rqkv, &row, &rob, &cnw, &cnb, &cqkv, &cow, &cob}))
    check_shapes(x, num_heads, eps, {PassWeights{rnw, rnb, rqkv, row, rob}, PassWeights{cnw, cnb, cqkv, cow, cob}});
  return at::empty_symint(x.sym_sizes(), x.options());
}

// ---- Autograd: with gradients required, the reference math in ATen ops ---------------------------
// The kernels are inference-only. When grad mode is on and an input requires grad, the Autograd
// kernel computes the pass with differentiable ATen ops (the same formula as
// axial_fused.reference.reference_pass), so a direct torch.ops call trains correctly on any device;
// otherwise it hands the call to the kernel below autograd. Returns a contiguous tensor, like the kernel.
at::Tensor reference_pass(const at::Tensor& x, const PassWeights& w, int64_t heads, int64_t axis, double eps) {
  check_rank(x);
  check_heads(x.size(3), heads);
  const at::Tensor xs = axis == 0 ? x : x.transpose(1, 2);  // sequences along dim 2
  const c10::SymInt B = xs.sym_size(0), S = xs.sym_size(1), L = xs.sym_size(2), D = xs.sym_size(3);
  const at::Tensor h = at::layer_norm_symint(xs, {D}, w.norm_w, w.norm_b, eps);
  const at::Tensor qkv = at::linear(h, w.qkv_w).reshape_symint({B * S, L, 3, heads, D / heads}).permute({2, 0, 3, 1, 4});
  const at::Tensor q = qkv[0], k = qkv[1], v = qkv[2];
  // No sequences: torch 2.11's CUDA SDPA returns an undefined tensor for them in 16-bit dtypes, so
  // the empty product (and its autograd graph) comes from plain matmuls.
  const at::Tensor attn = q.sym_numel() == 0 ? at::matmul(at::matmul(q, k.transpose(-2, -1)), v)
                                             : at::scaled_dot_product_attention(q, k, v);
  const at::Tensor o = attn.transpose(1, 2).reshape_symint({B, S, L, D});
  const at::Tensor out = xs + at::linear(o, w.out_w, w.out_b);
  return (axis == 0 ? out : out.transpose(1, 2)).contiguous();
}

bool grad_required(const at::Tensor& x, std::initializer_list<const PassWeights*> passes) {
  if (!at::GradMode::is_enabled()) return false;
  // A missing (None) tensor is undefined: asking it requires_grad() would dereference nothing. The
  // kernel below reports it by name.
  bool any = x.defined() && x.requires_grad();
  for (const PassWeights* w : passes)
    for (const at::Tensor* t : {&w->norm_w, &w->norm_b, &w->qkv_w, &w->out_w, &w->out_b})
      any |= t->defined() && t->requires_grad();
  return any;
}

template <typename Fn>
c10::TypedOperatorHandle<Fn> op_handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Fn>();
}

at::Tensor axial_pass_autograd(const at::Tensor& x, const at::Tensor& norm_w, const at::Tensor& norm_b,
                               const at::Tensor& qkv_w, const at::Tensor& out_w, const at::Tensor& out_b,
                               int64_t num_heads, int64_t axis, double eps) {
  const PassWeights w{norm_w, norm_b, qkv_w, out_w, out_b};
  if (grad_required(x, {&w})) {
    check_axis(axis);
    return reference_pass(x, w, num_heads, axis, eps);
  }
  static const auto op = op_handle<decltype(axial_pass_cuda)>("axial_fused::axial_pass");
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  return op.call(x, norm_w, norm_b, qkv_w, out_w, out_b, num_heads, axis, eps);
}

at::Tensor axial_attention_autograd(const at::Tensor& x, const at::Tensor& rnw, const at::Tensor& rnb,
                                    const at::Tensor& rqkv, const at::Tensor& row, const at::Tensor& rob,
                                    const at::Tensor& cnw, const at::Tensor& cnb, const at::Tensor& cqkv,
                                    const at::Tensor& cow, const at::Tensor& cob, int64_t num_heads, double eps) {
  const PassWeights row_w{rnw, rnb, rqkv, row, rob}, col_w{cnw, cnb, cqkv, cow, cob};
  if (grad_required(x, {&row_w, &col_w}))
    return reference_pass(reference_pass(x, row_w, num_heads, 0, eps), col_w, num_heads, 1, eps);
  static const auto op = op_handle<decltype(axial_attention_cuda)>("axial_fused::axial_attention");
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  return op.call(x, rnw, rnb, rqkv, row, rob, cnw, cnb, cqkv, cow, cob, num_heads, eps);
}

// ---- Autocast (CUDA): the kernel of the autocast dtype, like nn.Linear -------------------------
// Under torch.autocast("cuda", dtype=bf16) x and the weights are cast to bf16 (weights through
// autocast's per-region cache, as nn.Linear's are) and the bf16 kernel runs. The result has the
// dtype the reference model returns under autocast: its residual add x + linear(...) promotes
// x's dtype with the autocast dtype (float32 x -> float32 out, bfloat16 x -> bfloat16 out).
at::Tensor autocast_cast(const at::Tensor& t) {
  return at::autocast::cached_cast(at::autocast::get_autocast_dtype(at::kCUDA), t, c10::DeviceType::CUDA);
}

at::ScalarType autocast_result_type(const at::Tensor& x) {
  return at::promote_types(x.scalar_type(), at::autocast::get_autocast_dtype(at::kCUDA));
}

at::Tensor axial_pass_autocast(const at::Tensor& x, const at::Tensor& norm_w, const at::Tensor& norm_b,
                               const at::Tensor& qkv_w, const at::Tensor& out_w, const at::Tensor& out_b,
                               int64_t num_heads, int64_t axis, double eps) {
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCUDA);
  static const auto op = op_handle<decltype(axial_pass_cuda)>("axial_fused::axial_pass");
  const at::Tensor out = op.call(autocast_cast(x), autocast_cast(norm_w), autocast_cast(norm_b), autocast_cast(qkv_w),
                                 autocast_cast(out_w), autocast_cast(out_b), num_heads, axis, eps);
  return out.to(autocast_result_type(x));
}

at::Tensor axial_attention_autocast(const at::Tensor& x, const at::Tensor& rnw, const at::Tensor& rnb,
                                    const at::Tensor& rqkv, const at::Tensor& row, const at::Tensor& rob,
                                    const at::Tensor& cnw, const at::Tensor& cnb, const at::Tensor& cqkv,
                                    const at::Tensor& cow, const at::Tensor& cob, int64_t num_heads, double eps) {
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCUDA);
  static const auto op = op_handle<decltype(axial_attention_cuda)>("axial_fused::axial_attention");
  const at::Tensor out =
      op.call(autocast_cast(x), autocast_cast(rnw), autocast_cast(rnb), autocast_cast(rqkv), autocast_cast(row),
              autocast_cast(rob), autocast_cast(cnw), autocast_cast(cnb), autocast_cast(cqkv), autocast_cast(cow),
              autocast_cast(cob), num_heads, eps);
  return out.to(autocast_result_type(x));
}

const char* dtype_name(int d) { return d == kFloat32 ? "float32" : d == kFloat16 ? "float16" : "bfloat16"; }

}  // namespace

TORCH_LIBRARY(axial_fused, m) {
  m.def(
      "axial_pass(Tensor x, Tensor norm_weight, Tensor norm_bias, Tensor qkv_weight, Tensor out_weight, "
      "Tensor out_bias, int num_heads, int axis, float eps) -> Tensor");
  m.def(
      "axial_attention(Tensor x, Tensor row_norm_weight, Tensor row_norm_bias, Tensor row_qkv_weight, "
      "Tensor row_out_weight, Tensor row_out_bias, Tensor col_norm_weight, Tensor col_norm_bias, "
      "Tensor col_qkv_weight, Tensor col_out_weight, Tensor col_out_bias, int num_heads, float eps) -> Tensor");
}

TORCH_LIBRARY_IMPL(axial_fused, CUDA, m) {
  m.impl("axial_pass", &axial_pass_cuda);
  m.impl("axial_attention", &axial_attention_cuda);
}

TORCH_LIBRARY_IMPL(axial_fused, Meta, m) {
  m.impl("axial_pass", &axial_pass_meta);
  m.impl("axial_attention", &axial_attention_meta);
}

TORCH_LIBRARY_IMPL(axial_fused, Autograd, m) {
  m.impl("axial_pass", &axial_pass_autograd);
  m.impl("axial_attention", &axial_attention_autograd);
}

TORCH_LIBRARY_IMPL(axial_fused, AutocastCUDA, m) {
  m.impl("axial_pass", &axial_pass_autocast);
  m.impl("axial_attention", &axial_attention_autocast);
}

}  // namespace axial_fused

PYBIND11_MODULE(_C, m) {
  using namespace axial_fused;
  m.doc() = "axial_fused CUDA kernels; the operators are torch.ops.axial_fused.*";
  m.def("compiled_specs", [] {
    std::vector<std::tuple<std::string, int, int>> out;
    for (const SpecInfo* s : registry()) out.emplace_back(dtype_name(s->dtype), s->dim, s->heads);
    return out;
  }, "(dtype, dim, heads) of every compiled specialization");
  m.def("specs_option", [] { return std::string(AXIAL_FUSED_SPECS_OPTION); }, "AXIAL_FUSED_SPECS at build time");
  m.def("compiled_archs", [] { return std::string(AXIAL_FUSED_ARCH_LIST); }, "the arch list this binary was built for");
  m.def("build_info", [] {
    return std::make_tuple(std::string(AXIAL_FUSED_TORCH_VERSION), int(CUDART_VERSION));
  }, "(torch version, CUDA runtime version) at build time");
  m.def("device_kernel_error", [](int device) {
    // "" when this binary holds code the device can run, else CUDA's reason (no kernel image...).
    if (registry().empty()) return std::string("no specialization compiled");
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    const cudaError_t e = registry().front()->probe();
    if (e == cudaSuccess) return std::string();
    cudaGetLastError();  // clear the sticky-free error this query leaves
    return std::string(cudaGetErrorString(e));
  });
  m.def("set_path_override", [](int path) { g_path_override.store(path); },
        "force a path for tests and benchmarks: -1 automatic, 0 fused, 1 two-kernel, 2 Hopper fused");
  m.def("set_hopper_fused_min_len", [](int len) { g_hopper_fused_min_len.store(len); },
        "shortest sequence the automatic choice gives the Hopper fused kernel (default 32)");
  m.def("set_hopper_attention", [](bool on) { g_hopper_attention.store(on ? 1 : 0); },
        "whether the two-kernel path's attention runs on the Hopper wgmma kernel where it serves (default on)");
  m.def("set_hopper_pack_waves", [](bool on) { g_hopper_pack_waves.store(on ? 1 : 0); },
        "whether the Hopper fused kernel packs sequences by whole waves of one block per SM (default on); "
        "off: as many as fit but no fewer blocks than SMs (the mma.sync kernel's rule), for comparisons");
  m.def("set_hopper_two_kernel_max_dim", [](int dim) { return g_hopper_two_kernel_max_dim.exchange(dim); },
        "largest D (above 64) at which a pass the Hopper fused kernel would run in more than one wave of "
        "blocks goes to the two-kernel path instead (default 128: vision's case; 0: never); returns the "
        "previous value");
  m.def("hopper_two_kernel_pays", &hopper_two_kernel_pays,
        "whether the automatic choice sends a Hopper fused pass (dim, sequences, per block, SMs) to the "
        "two-kernel path under the current setting, for tests");
  m.def("hopper_pack_waves", [] { return g_hopper_pack_waves.load() != 0; },
        "whether the Hopper fused kernel packs sequences by whole waves (set_hopper_pack_waves)");
  m.def("sequences_per_block", [](int64_t num_seq, int len, int sms, int block_tokens, bool waves) {
    return waves ? sequences_per_block_waves(num_seq, len, sms, block_tokens)
                 : sequences_per_block(num_seq, len, sms, block_tokens);
  }, "the packing rules (waves: the Hopper fused kernel's default), for tests");
  m.def("set_fused_max_rows", [](int rows) { g_fused_max_rows.store(rows); },
        "largest fused buffer (tokens per block) the automatic choice takes");
  m.def("device_smem_optin", [](int device) { return device_info(device).smem_optin; });
  m.def("fits_device", [](const std::string& dtype, int dim, int heads, int device) {
    // Whether the two-kernel path (the smaller) fits this device's shared memory, in either fp32 mode.
    const int dt = dtype == "float32" ? kFloat32 : dtype == "float16" ? kFloat16 : kBFloat16;
    const SpecInfo* s = find_spec(dt, dim, heads);
    if (s == nullptr) return false;
    const size_t limit = size_t(device_info(device).smem_optin);
    return s->two_kernel_smem_bytes(kTf32) <= limit && s->two_kernel_smem_bytes(kExactFp32) <= limit;
  });
}
