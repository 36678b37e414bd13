// The operators torch.ops.axial_fused.axial_pass / axial_attention: argument checks, the CUDA, Meta,
// Autograd and AutocastCUDA kernels and their registration, and the Python module axial_fused._C.
// Planning and launch are csrc/pass.cpp's.
#include <ATen/autocast_mode.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "axial_fused/pair_bias.h"
#include "pass.h"

namespace axial_fused {
namespace {


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

at::Tensor packed_opt(const at::Tensor& w) { return w.defined() ? packed_weight(w) : w; }

PassWeights packed(const PassWeights& w) {
  return {packed_weight(w.norm_w), packed_weight(w.norm_b), packed_weight(w.qkv_w), packed_weight(w.out_w),
          packed_weight(w.out_b),  packed_opt(w.qkv_b),     packed_opt(w.gate_w),   packed_opt(w.gate_b)};
}

// The mask as the kernels read it: bytes, nonzero = present (a bool tensor is read as it is, any
// other dtype compared with 0 once). Any strides.
at::Tensor packed_mask(const at::Tensor& m) {
  if (!m.defined()) return m;
  return m.scalar_type() == at::kBool ? m : m.ne(0);
}

// The logit bias with unit key stride, as the kernels read a bias row (key l at element l;
// LogitRow), copied once where it has another key stride (a few microseconds against a pass over
// the grid). The Hopper attention kernel's prepared copy (terms_prep_kernel) reads any strides.
at::Tensor packed_bias(const at::Tensor& b) {
  if (!b.defined() || b.size(3) == 1 || b.stride(3) == 1) return b;
  return b.contiguous();
}

constexpr int kWeightFields = 8;
constexpr const char* kFields[kWeightFields] = {"norm_weight", "norm_bias", "qkv_weight", "out_weight",
                                                "out_bias",    "qkv_bias",  "gate_weight", "gate_bias"};

// An argument's name in a message: "row_" / "col_" before it in the two-pass operator.
std::string pass_prefix(size_t pass, size_t num_passes) {
  return num_passes == 2 ? (pass == 0 ? "row_" : "col_") : "";
}
std::string weight_name(size_t pass, size_t num_passes, int field) {
  return pass_prefix(pass, num_passes) + kFields[field];
}

const at::Tensor& opt(const std::optional<at::Tensor>& t) {
  static const at::Tensor undefined;
  return t.has_value() ? *t : undefined;
}

// The mask's and the pass's bias's checks (sizes, dtypes, devices). `bias_name`: the argument's name.
void check_mask(const at::Tensor& x, const at::Tensor& mask) {
  if (!mask.defined()) return;
  TORCH_CHECK_VALUE(mask.dim() == 3 && mask.size(0) == x.size(0) && mask.size(1) == x.size(1) &&
                        mask.size(2) == x.size(2),
                    "axial_fused: mask has shape ", mask.sizes(), ", expected [B, H, W] = [", x.size(0), ", ",
                    x.size(1), ", ", x.size(2), "] (x of shape ", x.sizes(), ")");
  TORCH_CHECK_TYPE(mask.scalar_type() == at::kBool || at::isFloatingType(mask.scalar_type()) ||
                       mask.scalar_type() == at::kByte,
                   "axial_fused: mask is ", mask.scalar_type(),
                   "; supported: bool, or 0/1 in uint8 or a floating dtype (true / 1: the token is present)");
  TORCH_CHECK_VALUE(mask.device() == x.device(), "axial_fused: mask is on ", mask.device(), " but x is on ",
                    x.device());
}
void check_bias(const at::Tensor& x, const at::Tensor& bias, int64_t num_heads, int64_t axis,
                const std::string& bias_name) {
  if (!bias.defined()) return;
  const int64_t L = x.size(axis == 0 ? 2 : 1);
  const char* len_name = axis == 0 ? "W" : "H";
  TORCH_CHECK_VALUE(bias.dim() == 4, "axial_fused: ", bias_name, " must be [B or 1, heads, ", len_name, ", ",
                    len_name, "] = [", x.size(0), " or 1, ", num_heads, ", ", L, ", ", L, "], got shape ",
                    bias.sizes());
  TORCH_CHECK_VALUE(bias.size(0) == 1 || bias.size(0) == x.size(0), "axial_fused: ", bias_name,
                    " has batch dimension ", bias.size(0), ", which does not broadcast to x's batch ", x.size(0),
                    " (expected 1 or ", x.size(0), ")");
  TORCH_CHECK_VALUE(bias.size(1) == num_heads, "axial_fused: ", bias_name, " has ", bias.size(1),
                    " heads (shape ", bias.sizes(), "), expected num_heads = ", num_heads);
  TORCH_CHECK_VALUE(bias.size(2) == L && bias.size(3) == L, "axial_fused: ", bias_name, " has shape ",
                    bias.sizes(), " but the ", axis == 0 ? "row" : "column", " pass has sequences of ", len_name,
                    " = ", L, " tokens: expected [.., ", L, ", ", L, "]");
  TORCH_CHECK_TYPE(bias.scalar_type() == at::kFloat || bias.scalar_type() == x.scalar_type(), "axial_fused: ",
                   bias_name, " is ", bias.scalar_type(), "; supported: float32 or x's dtype (", x.scalar_type(), ")");
  TORCH_CHECK_VALUE(bias.device() == x.device(), "axial_fused: ", bias_name, " is on ", bias.device(),
                    " but x is on ", x.device());
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
    const at::Tensor* ws[] = {&pw.norm_w, &pw.norm_b, &pw.qkv_w,  &pw.out_w,
                              &pw.out_b,  &pw.qkv_b,  &pw.gate_w, &pw.gate_b};
    for (int f = 0; f < kWeightFields; ++f) {
      if (f >= 5 && !ws[f]->defined()) continue;  // the optional ones
      const auto name = [&] { return weight_name(i, passes.size(), f); };
      if (f == 2) check_weight(*ws[f], x, name, {3 * D, D});
      else if (f == 3 || f == 6) check_weight(*ws[f], x, name, {D, D});
      else if (f == 5) check_weight(*ws[f], x, name, {3 * D});
      else check_weight(*ws[f], x, name, {D});
    }
    TORCH_CHECK_VALUE(!pw.gate_b.defined() || pw.gate_w.defined(), "axial_fused: ",
                      weight_name(i, passes.size(), 7), " was given without ", weight_name(i, passes.size(), 6),
                      "; the gate needs its weight [D, D]");
  }
  TORCH_CHECK_VALUE(x.size(1) >= 1 && x.size(2) >= 1, "axial_fused: H and W must be at least 1, got x of shape ",
                    x.sizes());
  // Offsets are 64-bit throughout; these bounds keep the kernels' 32-bit per-block token counts valid.
  TORCH_CHECK_VALUE(x.size(1) * x.size(2) < (1LL << 31) && x.size(1) <= (1 << 24) && x.size(2) <= (1 << 24),
                    "axial_fused: x of shape ", x.sizes(), " is too large: H * W must be below 2^31 and H, W at most 2^24");
}

// The per-call inputs of a pass (axis 0 / 1) or of both passes.
void check_extras(const at::Tensor& x, int64_t num_heads, const at::Tensor& mask,
                  std::initializer_list<std::pair<const at::Tensor*, int64_t>> biases, size_t num_passes) {
  check_mask(x, mask);
  size_t i = 0;
  for (const auto& b : biases) check_bias(x, *b.first, num_heads, b.second, pass_prefix(i++, num_passes) + "bias");
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

using OptT = std::optional<at::Tensor>;

PassWeights pass_weights(const at::Tensor& nw, const at::Tensor& nb, const at::Tensor& qkv, const at::Tensor& ow,
                         const at::Tensor& ob, const OptT& qkv_b, const OptT& gate_w, const OptT& gate_b) {
  return {nw, nb, qkv, ow, ob, opt(qkv_b), opt(gate_w), opt(gate_b)};
}

// The operators' arguments, spelled once: a pass's five weights, and its three optional ones (which
// come after eps in the schema, so that a call with the five alone keeps its meaning).
#define AXIAL_PASS_ARGS(p)                                                                              \
  const at::Tensor &p##nw, const at::Tensor &p##nb, const at::Tensor &p##qkv, const at::Tensor &p##ow, \
      const at::Tensor &p##ob
#define AXIAL_PASS_OPT(p) const OptT &p##qkvb, const OptT &p##gw, const OptT &p##gb
#define AXIAL_PASS_WEIGHTS(p) pass_weights(p##nw, p##nb, p##qkv, p##ow, p##ob, p##qkvb, p##gw, p##gb)
#define AXIAL_PASS_FORWARD(p) p##nw, p##nb, p##qkv, p##ow, p##ob
#define AXIAL_PASS_FORWARD_OPT(p) p##qkvb, p##gw, p##gb

at::Tensor axial_pass_cuda(const at::Tensor& x, AXIAL_PASS_ARGS(), int64_t num_heads, int64_t axis, double eps,
                           AXIAL_PASS_OPT(), const OptT& mask, const OptT& bias, bool residual) {
  check_axis(axis);
  const PassWeights w = AXIAL_PASS_WEIGHTS();
  const SpecInfo* spec = check_inputs(x, num_heads, eps, {w});
  check_extras(x, num_heads, opt(mask), {{&opt(bias), axis}}, 1);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty(x.sizes(), x.options());
  run_pass(spec, packed_x(x), out, packed(w), axis, eps,
           {packed_mask(opt(mask)), packed_bias(opt(bias)), residual});
  return out;
}

at::Tensor axial_attention_cuda(const at::Tensor& x, AXIAL_PASS_ARGS(r), AXIAL_PASS_ARGS(c), int64_t num_heads,
                                double eps, AXIAL_PASS_OPT(r), AXIAL_PASS_OPT(c), const OptT& mask,
                                const OptT& row_bias, const OptT& col_bias, bool residual) {
  const PassWeights row_w = AXIAL_PASS_WEIGHTS(r), col_w = AXIAL_PASS_WEIGHTS(c);
  const SpecInfo* spec = check_inputs(x, num_heads, eps, {row_w, col_w});
  check_extras(x, num_heads, opt(mask), {{&opt(row_bias), 0}, {&opt(col_bias), 1}}, 2);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty(x.sizes(), x.options());
  const at::Tensor m = packed_mask(opt(mask));
  run_pass(spec, packed_x(x), out, packed(row_w), 0, eps, {m, packed_bias(opt(row_bias)), residual});
  // The column pass in place: each element is read before it is written.
  run_pass(spec, out, out, packed(col_w), 1, eps, {m, packed_bias(opt(col_bias)), residual});
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
bool concrete(const at::Tensor& x, const std::vector<PassWeights>& passes,
              std::initializer_list<const at::Tensor*> more) {
  if (!concrete({&x}) || !concrete(more)) return false;
  for (const PassWeights& w : passes)
    if (!concrete({&w.norm_w, &w.norm_b, &w.qkv_w, &w.out_w, &w.out_b, &w.qkv_b, &w.gate_w, &w.gate_b}))
      return false;
  return true;
}
at::Tensor axial_pass_meta(const at::Tensor& x, AXIAL_PASS_ARGS(), int64_t num_heads, int64_t axis, double eps,
                           AXIAL_PASS_OPT(), const OptT& mask, const OptT& bias, bool residual) {
  check_rank(x);
  check_axis(axis);
  const PassWeights w = AXIAL_PASS_WEIGHTS();
  if (concrete(x, {w}, {&opt(mask), &opt(bias)})) {
    check_shapes(x, num_heads, eps, {w});
    check_extras(x, num_heads, opt(mask), {{&opt(bias), axis}}, 1);
  }
  return at::empty_symint(x.sym_sizes(), x.options());
}
at::Tensor axial_attention_meta(const at::Tensor& x, AXIAL_PASS_ARGS(r), AXIAL_PASS_ARGS(c), int64_t num_heads,
                                double eps, AXIAL_PASS_OPT(r), AXIAL_PASS_OPT(c), const OptT& mask,
                                const OptT& row_bias, const OptT& col_bias, bool residual) {
  check_rank(x);
  const PassWeights row_w = AXIAL_PASS_WEIGHTS(r), col_w = AXIAL_PASS_WEIGHTS(c);
  if (concrete(x, {row_w, col_w}, {&opt(mask), &opt(row_bias), &opt(col_bias)})) {
    check_shapes(x, num_heads, eps, {row_w, col_w});
    check_extras(x, num_heads, opt(mask), {{&opt(row_bias), 0}, {&opt(col_bias), 1}}, 2);
  }
  return at::empty_symint(x.sym_sizes(), x.options());
}

// ---- Autograd: with gradients required, the reference math in ATen ops ---------------------------
// The kernels are inference-only. When grad mode is on and an input requires grad, the Autograd
// kernel computes the pass with differentiable ATen ops (the same formula as
// axial_fused.reference.reference_pass), so a direct torch.ops call trains correctly on any device;
// otherwise it hands the call to the kernel below autograd. Returns a contiguous tensor, like the kernel.
at::Tensor reference_pass(const at::Tensor& x, const PassWeights& w, int64_t heads, int64_t axis, double eps,
                          const PassExtras& ex) {
  check_rank(x);
  check_heads(x.size(3), heads);
  const at::Tensor xs = axis == 0 ? x : x.transpose(1, 2);  // sequences along dim 2
  const c10::SymInt B = xs.sym_size(0), S = xs.sym_size(1), L = xs.sym_size(2), D = xs.sym_size(3);
  const at::Tensor h = at::layer_norm_symint(xs, {D}, w.norm_w, w.norm_b, eps);
  const at::Tensor qkv =
      at::linear(h, w.qkv_w, w.qkv_b).reshape_symint({B * S, L, 3, heads, D / heads}).permute({2, 0, 3, 1, 4});
  const at::Tensor q = qkv[0], k = qkv[1], v = qkv[2];
  at::Tensor attn;
  if (ex.mask.defined() || ex.bias.defined()) {
    // logits [B, S, heads, L, L]: scaled scores + bias (shared by a batch element's sequences), then
    // the absent keys' logits replaced (masked_fill; kMaskedLogit, or the dtype's lowest where smaller).
    at::Tensor logits = at::matmul(q, k.transpose(-2, -1)).mul(1.0 / std::sqrt(double(x.size(3) / heads)));
    logits = logits.reshape_symint({B, S, heads, L, L});
    if (ex.bias.defined()) logits = logits + ex.bias.unsqueeze(1).to(logits.scalar_type());
    if (ex.mask.defined()) {
      const at::Tensor present = (axis == 0 ? ex.mask : ex.mask.transpose(1, 2)).ne(0);  // [B, S, L] keys
      const double lowest = logits.scalar_type() == at::kHalf ? -65504.0 : double(kMaskedLogit);
      logits = logits.masked_fill(present.logical_not().unsqueeze(2).unsqueeze(3), lowest);
    }
    attn = at::matmul(at::softmax(logits, -1).reshape_symint({B * S, heads, L, L}), v);
  } else {
    // No sequences: torch 2.11's CUDA SDPA returns an undefined tensor for them in 16-bit dtypes, so
    // the empty product (and its autograd graph) comes from plain matmuls.
    attn = q.sym_numel() == 0 ? at::matmul(at::matmul(q, k.transpose(-2, -1)), v)
                              : at::scaled_dot_product_attention(q, k, v);
  }
  at::Tensor o = attn.transpose(1, 2).reshape_symint({B, S, L, D});
  if (w.gate_w.defined()) o = o * at::sigmoid(at::linear(h, w.gate_w, w.gate_b));
  const at::Tensor update = at::linear(o, w.out_w, w.out_b);
  const at::Tensor out = ex.residual ? xs + update : update;
  return (axis == 0 ? out : out.transpose(1, 2)).contiguous();
}

bool grad_required(const at::Tensor& x, std::initializer_list<const PassWeights*> passes,
                   std::initializer_list<const at::Tensor*> more = {}) {
  if (!at::GradMode::is_enabled()) return false;
  // A missing (None) tensor is undefined: asking it requires_grad() would dereference nothing. The
  // kernel below reports it by name.
  bool any = x.defined() && x.requires_grad();
  for (const PassWeights* w : passes)
    for (const at::Tensor* t :
         {&w->norm_w, &w->norm_b, &w->qkv_w, &w->out_w, &w->out_b, &w->qkv_b, &w->gate_w, &w->gate_b})
      any |= t->defined() && t->requires_grad();
  for (const at::Tensor* t : more) any |= t->defined() && t->requires_grad();
  return any;
}

template <typename Fn>
c10::TypedOperatorHandle<Fn> op_handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Fn>();
}

at::Tensor axial_pass_autograd(const at::Tensor& x, AXIAL_PASS_ARGS(), int64_t num_heads, int64_t axis, double eps,
                               AXIAL_PASS_OPT(), const OptT& mask, const OptT& bias, bool residual) {
  const PassWeights w = AXIAL_PASS_WEIGHTS();
  if (grad_required(x, {&w}, {&opt(bias)})) {
    check_axis(axis);
    check_extras(x, num_heads, opt(mask), {{&opt(bias), axis}}, 1);
    return reference_pass(x, w, num_heads, axis, eps, {opt(mask), opt(bias), residual});
  }
  static const auto op = op_handle<decltype(axial_pass_cuda)>("axial_fused::axial_pass");
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  return op.call(x, AXIAL_PASS_FORWARD(), num_heads, axis, eps, AXIAL_PASS_FORWARD_OPT(), mask, bias, residual);
}

at::Tensor axial_attention_autograd(const at::Tensor& x, AXIAL_PASS_ARGS(r), AXIAL_PASS_ARGS(c), int64_t num_heads,
                                    double eps, AXIAL_PASS_OPT(r), AXIAL_PASS_OPT(c), const OptT& mask,
                                    const OptT& row_bias, const OptT& col_bias, bool residual) {
  const PassWeights row_w = AXIAL_PASS_WEIGHTS(r), col_w = AXIAL_PASS_WEIGHTS(c);
  if (grad_required(x, {&row_w, &col_w}, {&opt(row_bias), &opt(col_bias)})) {
    check_extras(x, num_heads, opt(mask), {{&opt(row_bias), 0}, {&opt(col_bias), 1}}, 2);
    const at::Tensor y = reference_pass(x, row_w, num_heads, 0, eps, {opt(mask), opt(row_bias), residual});
    return reference_pass(y, col_w, num_heads, 1, eps, {opt(mask), opt(col_bias), residual});
  }
  static const auto op = op_handle<decltype(axial_attention_cuda)>("axial_fused::axial_attention");
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  return op.call(x, AXIAL_PASS_FORWARD(r), AXIAL_PASS_FORWARD(c), num_heads, eps, AXIAL_PASS_FORWARD_OPT(r),
                 AXIAL_PASS_FORWARD_OPT(c), mask, row_bias, col_bias, residual);
}

// ---- Autocast (CUDA): the kernel of the autocast dtype, like nn.Linear -------------------------
// Under torch.autocast("cuda", dtype=bf16) x and the weights are cast to bf16 (weights through
// autocast's per-region cache, as nn.Linear's are) and the bf16 kernel runs. The result has the
// dtype the reference model returns under autocast: its residual add x + linear(...) promotes
// x's dtype with the autocast dtype (float32 x -> float32 out, bfloat16 x -> bfloat16 out). The
// mask is not cast; a float32 bias is read as it is (the kernels take float32 or x's dtype), any
// other is cast with x.
at::Tensor autocast_cast(const at::Tensor& t) {
  return at::autocast::cached_cast(at::autocast::get_autocast_dtype(at::kCUDA), t, c10::DeviceType::CUDA);
}
OptT autocast_opt(const OptT& t) { return t.has_value() ? OptT(autocast_cast(*t)) : t; }
OptT autocast_bias(const OptT& t) {
  return t.has_value() && t->scalar_type() != at::kFloat ? OptT(autocast_cast(*t)) : t;
}

at::ScalarType autocast_result_type(const at::Tensor& x) {
  return at::promote_types(x.scalar_type(), at::autocast::get_autocast_dtype(at::kCUDA));
}

#define AXIAL_PASS_AUTOCAST(p) \
  autocast_cast(p##nw), autocast_cast(p##nb), autocast_cast(p##qkv), autocast_cast(p##ow), autocast_cast(p##ob)
#define AXIAL_PASS_AUTOCAST_OPT(p) autocast_opt(p##qkvb), autocast_opt(p##gw), autocast_opt(p##gb)

at::Tensor axial_pass_autocast(const at::Tensor& x, AXIAL_PASS_ARGS(), int64_t num_heads, int64_t axis, double eps,
                               AXIAL_PASS_OPT(), const OptT& mask, const OptT& bias, bool residual) {
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCUDA);
  static const auto op = op_handle<decltype(axial_pass_cuda)>("axial_fused::axial_pass");
  const at::Tensor out = op.call(autocast_cast(x), AXIAL_PASS_AUTOCAST(), num_heads, axis, eps,
                                 AXIAL_PASS_AUTOCAST_OPT(), mask, autocast_bias(bias), residual);
  return out.to(autocast_result_type(x));
}

at::Tensor axial_attention_autocast(const at::Tensor& x, AXIAL_PASS_ARGS(r), AXIAL_PASS_ARGS(c), int64_t num_heads,
                                    double eps, AXIAL_PASS_OPT(r), AXIAL_PASS_OPT(c), const OptT& mask,
                                    const OptT& row_bias, const OptT& col_bias, bool residual) {
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCUDA);
  static const auto op = op_handle<decltype(axial_attention_cuda)>("axial_fused::axial_attention");
  const at::Tensor out = op.call(autocast_cast(x), AXIAL_PASS_AUTOCAST(r), AXIAL_PASS_AUTOCAST(c), num_heads, eps,
                                 AXIAL_PASS_AUTOCAST_OPT(r), AXIAL_PASS_AUTOCAST_OPT(c), mask, autocast_bias(row_bias),
                                 autocast_bias(col_bias), residual);
  return out.to(autocast_result_type(x));
}

// ---- pair_bias: the protein modules' bias, linear(layer_norm(x)) head-major -----------------------

// x [B, I, J, c]; norm_weight, norm_bias [c]; weight [heads, c]; all of x's dtype, on x's device.
void check_pair_bias(const at::Tensor& x, const at::Tensor& nw, const at::Tensor& nb, const at::Tensor& w,
                     double eps) {
  TORCH_CHECK_VALUE(x.defined() && x.dim() == 4, "axial_fused: pair_bias: x must be [B, I, J, c], got ",
                    x.defined() ? x.dim() : 0, " dimensions");
  TORCH_CHECK_TYPE(dtype_code(x.scalar_type()) >= 0, "axial_fused: pair_bias: x is ", x.scalar_type(),
                   "; supported: float32, float16, bfloat16");
  const int64_t c = x.size(3);
  TORCH_CHECK_VALUE(w.defined() && w.dim() == 2 && w.size(1) == c && w.size(0) >= 1 && w.size(0) <= kPairBiasMaxHeads,
                    "axial_fused: pair_bias: weight has shape ", w.defined() ? w.sizes() : at::IntArrayRef{},
                    ", expected [heads, ", c, "] with 1 <= heads <= ", kPairBiasMaxHeads);
  TORCH_CHECK_VALUE(c >= 1 && c <= kPairBiasMaxC, "axial_fused: pair_bias: x has ", c,
                    " channels; supported: 1 to ", kPairBiasMaxC);
  const auto name = [](int f) { return f == 0 ? "norm_weight" : "norm_bias"; };
  for (int f = 0; f < 2; ++f) check_weight(f == 0 ? nw : nb, x, [&] { return std::string("pair_bias: ") + name(f); }, {c});
  TORCH_CHECK_TYPE(w.scalar_type() == x.scalar_type(), "axial_fused: pair_bias: weight is ", w.scalar_type(),
                   " but x is ", x.scalar_type(), "; x and the weights must share one dtype");
  TORCH_CHECK_VALUE(w.device() == x.device(), "axial_fused: pair_bias: weight is on ", w.device(), " but x is on ",
                    x.device());
  TORCH_CHECK_VALUE(std::isfinite(eps) && eps > 0, "axial_fused: pair_bias: eps must be a positive finite number, got ",
                    eps);
}

at::Tensor pair_bias_cuda(const at::Tensor& x, const at::Tensor& nw, const at::Tensor& nb, const at::Tensor& w,
                          double eps) {
  check_pair_bias(x, nw, nb, w, eps);
  TORCH_CHECK_VALUE(x.is_cuda(), "axial_fused: pair_bias: the CUDA kernel got x on ", x.device());
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor xc = x.contiguous(), nwc = nw.contiguous(), nbc = nb.contiguous(), wc = w.contiguous();
  at::Tensor out = at::empty({x.size(0), w.size(0), x.size(1), x.size(2)}, x.options());
  const cudaError_t err = launch_pair_bias(
      dtype_code(x.scalar_type()), xc.data_ptr(), nwc.data_ptr(), nbc.data_ptr(), wc.data_ptr(), out.data_ptr(),
      x.size(0) * x.size(1) * x.size(2), x.size(1) * x.size(2), int(x.size(3)), int(w.size(0)), float(eps),
      c10::cuda::getCurrentCUDAStream(x.get_device()).stream());
  TORCH_CHECK(err == cudaSuccess, "axial_fused: pair_bias kernel launch failed: ", cudaGetErrorString(err));
  return out;
}

at::Tensor pair_bias_meta(const at::Tensor& x, const at::Tensor& nw, const at::Tensor& nb, const at::Tensor& w,
                          double eps) {
  TORCH_CHECK_VALUE(x.dim() == 4 && w.dim() == 2, "axial_fused: pair_bias: x must be [B, I, J, c] and weight "
                    "[heads, c], got ", x.dim(), " and ", w.dim(), " dimensions");
  if (concrete({&x, &nw, &nb, &w})) check_pair_bias(x, nw, nb, w, eps);
  return at::empty_symint({x.sym_size(0), w.sym_size(0), x.sym_size(1), x.sym_size(2)}, x.options());
}

// With gradients required, the same in differentiable ATen ops.
at::Tensor pair_bias_autograd(const at::Tensor& x, const at::Tensor& nw, const at::Tensor& nb, const at::Tensor& w,
                              double eps) {
  if (at::GradMode::is_enabled() && (x.requires_grad() || nw.requires_grad() || nb.requires_grad() || w.requires_grad())) {
    check_pair_bias(x, nw, nb, w, eps);
    return at::linear(at::layer_norm_symint(x, {x.sym_size(3)}, nw, nb, eps), w).permute({0, 3, 1, 2}).contiguous();
  }
  static const auto op = op_handle<decltype(pair_bias_cuda)>("axial_fused::pair_bias");
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  return op.call(x, nw, nb, w, eps);
}

const char* dtype_name(int d) { return d == kFloat32 ? "float32" : d == kFloat16 ? "float16" : "bfloat16"; }
int dtype_from_name(const std::string& n) { return n == "float32" ? kFloat32 : n == "float16" ? kFloat16 : kBFloat16; }


}  // namespace

TORCH_LIBRARY(axial_fused, m) {
  // A pass's five weights (nn.LayerNorm / nn.Linear), num_heads, (axis,) eps; then the optional ones:
  // its q/k/v bias [3D] and sigmoid gate (weight [D, D], bias [D]), and per call the key mask
  // [B, H, W], the pass's logit bias [1 or B, heads, L, L] and whether the input is added back
  // (docs/usage.md). A call with the five weights alone is the plain pass.
  m.def(
      "axial_pass(Tensor x, Tensor norm_weight, Tensor norm_bias, Tensor qkv_weight, Tensor out_weight, "
      "Tensor out_bias, int num_heads, int axis, float eps, Tensor? qkv_bias=None, Tensor? gate_weight=None, "
      "Tensor? gate_bias=None, Tensor? mask=None, Tensor? bias=None, bool residual=True) -> Tensor");
  m.def(
      "axial_attention(Tensor x, Tensor row_norm_weight, Tensor row_norm_bias, Tensor row_qkv_weight, "
      "Tensor row_out_weight, Tensor row_out_bias, Tensor col_norm_weight, Tensor col_norm_bias, "
      "Tensor col_qkv_weight, Tensor col_out_weight, Tensor col_out_bias, int num_heads, float eps, "
      "Tensor? row_qkv_bias=None, Tensor? row_gate_weight=None, Tensor? row_gate_bias=None, "
      "Tensor? col_qkv_bias=None, Tensor? col_gate_weight=None, Tensor? col_gate_bias=None, Tensor? mask=None, "
      "Tensor? row_bias=None, Tensor? col_bias=None, bool residual=True) -> Tensor");
  // The protein modules' pair bias: linear(layer_norm(x), weight) of x [B, I, J, c], weight
  // [heads, c], as [B, heads, I, J] (what a pass takes as its bias).
  m.def("pair_bias(Tensor x, Tensor norm_weight, Tensor norm_bias, Tensor weight, float eps) -> Tensor");
}

TORCH_LIBRARY_IMPL(axial_fused, CUDA, m) {
  m.impl("axial_pass", &axial_pass_cuda);
  m.impl("axial_attention", &axial_attention_cuda);
  m.impl("pair_bias", &pair_bias_cuda);
}

TORCH_LIBRARY_IMPL(axial_fused, Meta, m) {
  m.impl("axial_pass", &axial_pass_meta);
  m.impl("axial_attention", &axial_attention_meta);
  m.impl("pair_bias", &pair_bias_meta);
}

TORCH_LIBRARY_IMPL(axial_fused, Autograd, m) {
  m.impl("axial_pass", &axial_pass_autograd);
  m.impl("axial_attention", &axial_attention_autograd);
  m.impl("pair_bias", &pair_bias_autograd);
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
  m.def("plan", [](const std::string& dtype, int dim, int heads, int64_t num_seq, int len, bool tf32, int arch,
                   bool sm90a, int sms, int smem_optin, int forced, bool gated) {
    // The planner's choice for a pass on a described device (no GPU needed): (path, sequences per block).
    const int dt = dtype_from_name(dtype);
    const SpecInfo* s = find_spec(dt, dim, heads);
    TORCH_CHECK_VALUE(s != nullptr, "axial_fused: no compiled specialization for ", dtype, ", dim ", dim, ", heads ",
                      heads);
    DeviceInfo dev;
    dev.sms = sms;
    dev.smem_optin = smem_optin;
    dev.arch = arch;
    dev.sm90a = sm90a && arch == 90;
    const Plan plan = plan_pass(s, num_seq, len, dt == kFloat32 && tf32 ? kTf32 : kExactFp32, dev, forced, gated);
    return std::make_tuple(plan.path, plan.group);
  }, "the planner's (path, sequences per block) for a pass of num_seq sequences of len tokens on a device "
     "described by (arch, sm90a, sms, smem_optin); forced: -1 automatic, else a path, as set_path_override; "
     "gated: the pass has the sigmoid gate");
  m.def("device_smem_optin", [](int device) { return device_info(device).smem_optin; });
  m.def("fits_device", [](const std::string& dtype, int dim, int heads, int device) {
    // Whether the two-kernel path (the smaller) fits this device's shared memory, in either fp32 mode.
    const int dt = dtype_from_name(dtype);
    const SpecInfo* s = find_spec(dt, dim, heads);
    if (s == nullptr) return false;
    const size_t limit = size_t(device_info(device).smem_optin);
    return s->two_kernel_smem_bytes(kTf32) <= limit && s->two_kernel_smem_bytes(kExactFp32) <= limit;
  });
}
