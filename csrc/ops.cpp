// The operators' CUDA kernels (torch.ops.axial_fused.axial_pass / axial_attention / pair_bias): the
// argument checks, the packing of layouts the kernels cannot read, and their registration; the C
// entry points the Python package reads through ctypes (axial_fused_*: the compiled specializations,
// the planner, device facts); and the module init of axial_fused._C.
// LibTorch's stable ABI only, so one binary serves every torch from TORCH_TARGET_VERSION on. What the
// stable ABI cannot express lives in Python (src/axial_fused/_ops.py): the schemas' fake (shape-only)
// kernels, the Autograd and AutocastCUDA kernels, and the typed errors (the stable ABI carries every
// exception as RuntimeError: _ops.py re-runs the same checks in Python to raise ValueError/TypeError).
// Planning and launch are csrc/pass.cpp's.
#include <Python.h>  // the module init only (Py_LIMITED_API: an abi3 extension)
#include <torch/csrc/stable/accelerator.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "axial_fused/pair_bias.h"
#include "pass.h"

namespace axial_fused {
namespace {

using OptT = std::optional<Tensor>;
using torch::headeronly::IntHeaderOnlyArrayRef;

// ---- messages -----------------------------------------------------------------------------------

std::string shape_str(IntHeaderOnlyArrayRef s) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << "]";
  return o.str();
}
std::string shape_str(const Tensor& t) { return shape_str(t.sizes()); }

std::string device_str(const Tensor& t) {
  const torch::stable::Device d = t.device();
  using torch::headeronly::DeviceType;
  switch (d.type()) {
    case DeviceType::CPU: return "cpu";
    case DeviceType::CUDA: return "cuda:" + std::to_string(int(d.index()));
    case DeviceType::Meta: return "meta";
    default: return "device type " + std::to_string(int(d.type()));
  }
}

// The checks every entry point makes first. Each check and its message is src/axial_fused/_checks.py's
// too (docs/errors.md; tests/test_errors.py compares the two).
void check_rank(const Tensor& x) {
  STD_TORCH_CHECK(x.dim() == 4, "axial_fused: x must be 4-D [B, H, W, D], got shape ", shape_str(x));
}
void check_axis(int64_t axis) {
  STD_TORCH_CHECK(axis == 0 || axis == 1, "axial_fused: axis must be 0 (row) or 1 (col), got ", axis);
}

bool same_device(const Tensor& a, const Tensor& b) { return a.device() == b.device(); }

template <class Name>
void check_weight(const Tensor& w, const Tensor& x, Name&& name, std::vector<int64_t> shape) {
  STD_TORCH_CHECK(w.defined(), "axial_fused: ", name(), " is missing (None); expected a tensor of shape ",
                  shape_str(shape));
  STD_TORCH_CHECK(w.sizes().equals(shape), "axial_fused: ", name(), " has shape ", shape_str(w), ", expected ",
                  shape_str(shape), " for D = ", x.size(3));
  STD_TORCH_CHECK(w.scalar_type() == x.scalar_type(), "axial_fused: ", name(), " is ", w.scalar_type(),
                  " but x is ", x.scalar_type(), "; x and the weights must share one dtype");
  STD_TORCH_CHECK(same_device(w, x), "axial_fused: ", name(), " is on ", device_str(w), " but x is on ",
                  device_str(x));
}

// ---- packing: what the kernels read in place, and the one copy of what they cannot ---------------
// The kernels read x in place when its feature stride is 1, its other strides and its pointer are
// multiples of 16 bytes (the Hopper LN+QKV kernel loads x rows with 16-byte cp.async, which silently
// rounds a misaligned address down), and they read weights that are contiguous and 16-byte aligned.
// Any other layout (an odd slice, a view a few elements into a buffer, a transposed weight view) is
// copied once into a fresh caching-allocator block, which meets both. Deciding this here rather than
// in Python keeps the Python decision free of data_ptr() reads, which torch.compile / torch.export
// cannot make on fake tensors, and one copy is far cheaper than the reference path.
Tensor contiguous_copy(const Tensor& t) {
  Tensor out = torch::stable::new_empty(t, t.sizes());
  torch::stable::copy_(out, t);
  return out;
}

bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

bool readable_in_place(const Tensor& x) {
  const int64_t es = int64_t(x.element_size());
  return x.stride(3) == 1 && (x.stride(0) * es) % 16 == 0 && (x.stride(1) * es) % 16 == 0 &&
         (x.stride(2) * es) % 16 == 0 && aligned16(x);
}

Tensor packed_x(const Tensor& x) { return readable_in_place(x) ? x : contiguous_copy(x); }

Tensor packed_weight(const Tensor& w) {
  if (!w.defined()) return w;
  return w.is_contiguous() && aligned16(w) ? w : contiguous_copy(w);
}

PassWeights packed(const PassWeights& w) {
  return {packed_weight(w.norm_w), packed_weight(w.norm_b), packed_weight(w.qkv_w),  packed_weight(w.out_w),
          packed_weight(w.out_b),  packed_weight(w.qkv_b),  packed_weight(w.gate_w), packed_weight(w.gate_b),
          packed_weight(w.bias_w)};
}

// ---- the argument checks ------------------------------------------------------------------------

constexpr int kWeightFields = 9;
constexpr const char* kFields[kWeightFields] = {"norm_weight", "norm_bias",   "qkv_weight", "out_weight", "out_bias",
                                                "qkv_bias",    "gate_weight", "gate_bias",  "bias_weight"};

// An argument's name in a message: "row_" / "col_" before it in the two-pass operator.
std::string pass_prefix(size_t pass, size_t num_passes) {
  return num_passes == 2 ? (pass == 0 ? "row_" : "col_") : "";
}
std::string weight_name(size_t pass, size_t num_passes, int field) {
  return pass_prefix(pass, num_passes) + kFields[field];
}

Tensor opt(const OptT& t) { return t.has_value() ? *t : Tensor(); }

bool is_floating(ScalarType t) {
  return t == ScalarType::Float || t == ScalarType::Half || t == ScalarType::BFloat16 || t == ScalarType::Double;
}

void check_mask(const Tensor& x, const Tensor& mask) {
  if (!mask.defined()) return;
  STD_TORCH_CHECK(mask.dim() == 3 && mask.size(0) == x.size(0) && mask.size(1) == x.size(1) &&
                      mask.size(2) == x.size(2),
                  "axial_fused: mask has shape ", shape_str(mask), ", expected [B, H, W] = [", x.size(0), ", ",
                  x.size(1), ", ", x.size(2), "] (x of shape ", shape_str(x), ")");
  STD_TORCH_CHECK(mask.scalar_type() == ScalarType::Bool || is_floating(mask.scalar_type()) ||
                      mask.scalar_type() == ScalarType::Byte,
                  "axial_fused: mask is ", mask.scalar_type(),
                  "; supported: bool, or 0/1 in uint8 or a floating dtype (true / 1: the token is present)");
  STD_TORCH_CHECK(same_device(mask, x), "axial_fused: mask is on ", device_str(mask), " but x is on ",
                  device_str(x));
}

void check_bias(const Tensor& x, const Tensor& bias, int64_t num_heads, int64_t axis, const std::string& name) {
  if (!bias.defined()) return;
  const int64_t L = x.size(axis == 0 ? 2 : 1);
  const char* len_name = axis == 0 ? "W" : "H";
  STD_TORCH_CHECK(bias.dim() == 4, "axial_fused: ", name, " must be [B or 1, heads, ", len_name, ", ", len_name,
                  "] = [", x.size(0), " or 1, ", num_heads, ", ", L, ", ", L, "], got shape ", shape_str(bias));
  STD_TORCH_CHECK(bias.size(0) == 1 || bias.size(0) == x.size(0), "axial_fused: ", name, " has batch dimension ",
                  bias.size(0), ", which does not broadcast to x's batch ", x.size(0), " (expected 1 or ", x.size(0),
                  ")");
  STD_TORCH_CHECK(bias.size(1) == num_heads, "axial_fused: ", name, " has ", bias.size(1), " heads (shape ",
                  shape_str(bias), "), expected num_heads = ", num_heads);
  STD_TORCH_CHECK(bias.size(2) == L && bias.size(3) == L, "axial_fused: ", name, " has shape ", shape_str(bias),
                  " but the ", axis == 0 ? "row" : "column", " pass has sequences of ", len_name, " = ", L,
                  " tokens: expected [.., ", L, ", ", L, "]");
  STD_TORCH_CHECK(bias.scalar_type() == ScalarType::Float || bias.scalar_type() == x.scalar_type(), "axial_fused: ",
                  name, " is ", bias.scalar_type(), "; supported: float32 or x's dtype (", x.scalar_type(), ")");
  STD_TORCH_CHECK(same_device(bias, x), "axial_fused: ", name, " is on ", device_str(bias), " but x is on ",
                  device_str(x));
}

void check_shapes(const Tensor& x, int64_t num_heads, double eps, const std::vector<PassWeights>& passes) {
  STD_TORCH_CHECK(x.defined(), "axial_fused: x is missing (None)");
  check_rank(x);
  STD_TORCH_CHECK(dtype_code(x.scalar_type()) >= 0, "axial_fused: x is ", x.scalar_type(),
                  "; supported: float32, float16, bfloat16");
  const int64_t D = x.size(3);
  STD_TORCH_CHECK(num_heads > 0 && D % num_heads == 0, "axial_fused: D = ", D, " is not divisible by num_heads = ",
                  num_heads);
  STD_TORCH_CHECK(std::isfinite(eps) && eps > 0, "axial_fused: eps must be a positive finite number, got ", eps);
  for (size_t i = 0; i < passes.size(); ++i) {
    const PassWeights& pw = passes[i];
    const Tensor* ws[] = {&pw.norm_w, &pw.norm_b, &pw.qkv_w,  &pw.out_w, &pw.out_b,
                          &pw.qkv_b,  &pw.gate_w, &pw.gate_b, &pw.bias_w};
    for (int f = 0; f < kWeightFields; ++f) {
      if (f >= 5 && !ws[f]->defined()) continue;  // the optional ones
      const auto name = [&] { return weight_name(i, passes.size(), f); };
      if (f == 2) check_weight(*ws[f], x, name, {3 * D, D});
      else if (f == 3 || f == 6) check_weight(*ws[f], x, name, {D, D});
      else if (f == 5) check_weight(*ws[f], x, name, {3 * D});
      else if (f == 8) check_weight(*ws[f], x, name, {num_heads, D});
      else check_weight(*ws[f], x, name, {D});
    }
    STD_TORCH_CHECK(!pw.gate_b.defined() || pw.gate_w.defined(), "axial_fused: ", weight_name(i, passes.size(), 7),
                    " was given without ", weight_name(i, passes.size(), 6), "; the gate needs its weight [D, D]");
  }
  // A sequence of length 0 has no softmax: an error, not an empty result.
  STD_TORCH_CHECK(x.size(1) >= 1 && x.size(2) >= 1 && x.size(3) >= 1, "axial_fused: x has shape ", shape_str(x),
                  ": H, W and D must be at least 1 (B may be 0)");
  // Offsets are 64-bit throughout; these bounds keep the kernels' 32-bit per-block token counts valid.
  STD_TORCH_CHECK(x.size(1) * x.size(2) < (1LL << 31) && x.size(1) <= (1 << 24) && x.size(2) <= (1 << 24),
                  "axial_fused: x of shape ", shape_str(x),
                  " is too large: H * W must be below 2^31 and H, W at most 2^24");
}

// A pass's bias_weight: its bias is [.., L, L] over L x L tokens, so the grid must be square, and it
// takes the place of a given bias. Within the pair-bias kernel's limits, which run_pass uses where K1
// does not compute it (one limit on every path).
void check_bias_weight(const Tensor& x, const PassWeights& w, const Tensor& bias, size_t pass, size_t num_passes) {
  if (!w.bias_w.defined()) return;
  const std::string prefix = pass_prefix(pass, num_passes);
  STD_TORCH_CHECK(w.bias_w.size(0) <= kPairBiasMaxHeads && x.size(3) <= kPairBiasMaxC, "axial_fused: ", prefix,
                  "bias_weight supports up to ", kPairBiasMaxHeads, " heads and ", kPairBiasMaxC, " channels, got ",
                  w.bias_w.size(0), " heads and D = ", x.size(3), "; compute the bias in PyTorch and pass it as ",
                  prefix, "bias");
  STD_TORCH_CHECK(x.size(1) == x.size(2), "axial_fused: ", prefix, "bias_weight needs a square grid (H == W: the "
                  "bias of query i, key j comes from token (i, j)), got x of shape ", shape_str(x));
  STD_TORCH_CHECK(!bias.defined(), "axial_fused: ", prefix, "bias and ", prefix, "bias_weight were both given; "
                  "give one (add a fixed bias to the computed one in PyTorch and pass the sum as ", prefix, "bias)");
}

// The per-call inputs of a pass (axis 0 / 1) or of both passes, with each pass's weights.
void check_extras(const Tensor& x, int64_t num_heads, const Tensor& mask,
                  std::initializer_list<std::tuple<const Tensor*, int64_t, const PassWeights*>> biases,
                  size_t num_passes) {
  check_mask(x, mask);
  size_t i = 0;
  for (const auto& [b, axis, w] : biases) {
    check_bias(x, *b, num_heads, axis, pass_prefix(i, num_passes) + "bias");
    check_bias_weight(x, *w, *b, i++, num_passes);
  }
}

// check_shapes plus what only the CUDA kernel needs: x on a CUDA device and a compiled specialization.
// Layouts the kernels cannot read in place are copied by packed_x / packed (above), not rejected.
const SpecInfo* check_inputs(const Tensor& x, int64_t num_heads, double eps, const std::vector<PassWeights>& passes) {
  check_shapes(x, num_heads, eps, passes);
  STD_TORCH_CHECK(x.is_cuda(), "axial_fused: the CUDA kernel got x on ", device_str(x));
  const SpecInfo* spec = find_spec(dtype_code(x.scalar_type()), x.size(3), num_heads);
  STD_TORCH_CHECK(spec != nullptr, "axial_fused: no compiled specialization for dtype ", x.scalar_type(), ", dim ",
                  x.size(3), ", heads ", num_heads, " (see axial_fused.supported_configs())");
  return spec;
}

// ---- the operators' CUDA kernels --------------------------------------------------------------------

PassWeights pass_weights(const Tensor& nw, const Tensor& nb, const Tensor& qkv, const Tensor& ow, const Tensor& ob,
                         const OptT& qkv_b, const OptT& gate_w, const OptT& gate_b, const OptT& bias_w) {
  return {nw, nb, qkv, ow, ob, opt(qkv_b), opt(gate_w), opt(gate_b), opt(bias_w)};
}

// The operators' arguments, spelled once: a pass's five weights, and its optional ones (which come
// after eps in the schema, so that a call with the five alone keeps its meaning; the bias weight
// last of all, so that every older call keeps its meaning too).
#define AXIAL_PASS_ARGS(p) Tensor p##nw, Tensor p##nb, Tensor p##qkv, Tensor p##ow, Tensor p##ob
#define AXIAL_PASS_OPT(p) OptT p##qkvb, OptT p##gw, OptT p##gb
#define AXIAL_PASS_WEIGHTS(p) pass_weights(p##nw, p##nb, p##qkv, p##ow, p##ob, p##qkvb, p##gw, p##gb, p##bw)

Tensor axial_pass_cuda(Tensor x, AXIAL_PASS_ARGS(), int64_t num_heads, int64_t axis, double eps, AXIAL_PASS_OPT(),
                       OptT mask, OptT bias, bool residual, OptT bw) {
  check_axis(axis);
  const PassWeights w = AXIAL_PASS_WEIGHTS();
  const SpecInfo* spec = check_inputs(x, num_heads, eps, {w});
  const Tensor m = opt(mask), b = opt(bias);
  check_extras(x, num_heads, m, {{&b, axis, &w}}, 1);
  const torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  Tensor out = torch::stable::new_empty(x, x.sizes());
  run_pass(spec, packed_x(x), out, packed(w), axis, eps, {m, b, residual});
  return out;
}

Tensor axial_attention_cuda(Tensor x, AXIAL_PASS_ARGS(r), AXIAL_PASS_ARGS(c), int64_t num_heads, double eps,
                            AXIAL_PASS_OPT(r), AXIAL_PASS_OPT(c), OptT mask, OptT row_bias, OptT col_bias,
                            bool residual, OptT rbw, OptT cbw) {
  const PassWeights row_w = AXIAL_PASS_WEIGHTS(r), col_w = AXIAL_PASS_WEIGHTS(c);
  const SpecInfo* spec = check_inputs(x, num_heads, eps, {row_w, col_w});
  const Tensor rb = opt(row_bias), cb = opt(col_bias);
  check_extras(x, num_heads, opt(mask), {{&rb, 0, &row_w}, {&cb, 1, &col_w}}, 2);
  const torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  Tensor out = torch::stable::new_empty(x, x.sizes());
  const Tensor m = opt(mask);
  run_pass(spec, packed_x(x), out, packed(row_w), 0, eps, {m, rb, residual});
  // The column pass in place: each element is read before it is written.
  run_pass(spec, out, out, packed(col_w), 1, eps, {m, cb, residual});
  return out;
}

// pair_bias: x [B, I, J, c]; norm_weight, norm_bias [c]; weight [heads, c]; all of x's dtype and device.
void check_pair_bias(const Tensor& x, const Tensor& nw, const Tensor& nb, const Tensor& w, double eps) {
  STD_TORCH_CHECK(x.defined() && x.dim() == 4, "axial_fused: pair_bias: x must be [B, I, J, c], got ",
                  x.defined() ? x.dim() : 0, " dimensions");
  STD_TORCH_CHECK(dtype_code(x.scalar_type()) >= 0, "axial_fused: pair_bias: x is ", x.scalar_type(),
                  "; supported: float32, float16, bfloat16");
  const int64_t c = x.size(3);
  STD_TORCH_CHECK(w.defined() && w.dim() == 2 && w.size(1) == c && w.size(0) >= 1 && w.size(0) <= kPairBiasMaxHeads,
                  "axial_fused: pair_bias: weight has shape ", w.defined() ? shape_str(w) : "[]",
                  ", expected [heads, ", c, "] with 1 <= heads <= ", kPairBiasMaxHeads);
  STD_TORCH_CHECK(c >= 1 && c <= kPairBiasMaxC, "axial_fused: pair_bias: x has ", c, " channels; supported: 1 to ",
                  kPairBiasMaxC);
  for (int f = 0; f < 2; ++f)
    check_weight(f == 0 ? nw : nb, x, [&] { return std::string("pair_bias: ") + (f == 0 ? "norm_weight" : "norm_bias"); },
                 {c});
  STD_TORCH_CHECK(w.scalar_type() == x.scalar_type(), "axial_fused: pair_bias: weight is ", w.scalar_type(),
                  " but x is ", x.scalar_type(), "; x and the weights must share one dtype");
  STD_TORCH_CHECK(same_device(w, x), "axial_fused: pair_bias: weight is on ", device_str(w), " but x is on ",
                  device_str(x));
  STD_TORCH_CHECK(std::isfinite(eps) && eps > 0, "axial_fused: pair_bias: eps must be a positive finite number, got ",
                  eps);
}

Tensor pair_bias_cuda(Tensor x, Tensor nw, Tensor nb, Tensor w, double eps) {
  check_pair_bias(x, nw, nb, w, eps);
  STD_TORCH_CHECK(x.is_cuda(), "axial_fused: pair_bias: the CUDA kernel got x on ", device_str(x));
  const torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  const Tensor xc = torch::stable::contiguous(x), nwc = torch::stable::contiguous(nw),
               nbc = torch::stable::contiguous(nb), wc = torch::stable::contiguous(w);
  Tensor out = torch::stable::new_empty(x, {x.size(0), w.size(0), x.size(1), x.size(2)});
  const cudaError_t err = launch_pair_bias(
      dtype_code(x.scalar_type()), xc.data_ptr(), nwc.data_ptr(), nbc.data_ptr(), wc.data_ptr(), out.data_ptr(),
      x.size(0) * x.size(1) * x.size(2), x.size(1) * x.size(2), int(x.size(3)), int(w.size(0)), float(eps),
      current_stream(x.get_device_index()));
  STD_TORCH_CHECK(err == cudaSuccess, "axial_fused: pair_bias kernel launch failed: ", cudaGetErrorString(err));
  return out;
}

const char* dtype_name(int d) { return d == kFloat32 ? "float32" : d == kFloat16 ? "float16" : "bfloat16"; }
int dtype_from_name(const std::string& n) {
  return n == "float32" ? kFloat32 : n == "float16" ? kFloat16 : n == "bfloat16" ? kBFloat16 : -1;
}

// Copies `text` into the caller's buffer (always terminated).
void write_text(const std::string& text, char* buf, int len) {
  if (buf == nullptr || len <= 0) return;
  std::snprintf(buf, size_t(len), "%s", text.c_str());
}

}  // namespace

STABLE_TORCH_LIBRARY(axial_fused, m) {
  // A pass's five weights (nn.LayerNorm / nn.Linear), num_heads, (axis,) eps; then the optional ones:
  // its q/k/v bias [3D] and sigmoid gate (weight [D, D], bias [D]), per call the key mask [B, H, W],
  // the pass's logit bias [1 or B, heads, L, L] and whether the input is added back, and last the
  // weight [heads, D] of a logit bias computed from the pass's own LayerNorm output (the triangle
  // bias; docs/usage.md). A call with the five weights alone is the plain pass.
  m.def(
      "axial_pass(Tensor x, Tensor norm_weight, Tensor norm_bias, Tensor qkv_weight, Tensor out_weight, "
      "Tensor out_bias, int num_heads, int axis, float eps, Tensor? qkv_bias=None, Tensor? gate_weight=None, "
      "Tensor? gate_bias=None, Tensor? mask=None, Tensor? bias=None, bool residual=True, "
      "Tensor? bias_weight=None) -> Tensor");
  m.def(
      "axial_attention(Tensor x, Tensor row_norm_weight, Tensor row_norm_bias, Tensor row_qkv_weight, "
      "Tensor row_out_weight, Tensor row_out_bias, Tensor col_norm_weight, Tensor col_norm_bias, "
      "Tensor col_qkv_weight, Tensor col_out_weight, Tensor col_out_bias, int num_heads, float eps, "
      "Tensor? row_qkv_bias=None, Tensor? row_gate_weight=None, Tensor? row_gate_bias=None, "
      "Tensor? col_qkv_bias=None, Tensor? col_gate_weight=None, Tensor? col_gate_bias=None, Tensor? mask=None, "
      "Tensor? row_bias=None, Tensor? col_bias=None, bool residual=True, Tensor? row_bias_weight=None, "
      "Tensor? col_bias_weight=None) -> Tensor");
  // The protein modules' pair bias: linear(layer_norm(x), weight) of x [B, I, J, c], weight
  // [heads, c], as [B, heads, I, J] (what a pass takes as its bias).
  m.def("pair_bias(Tensor x, Tensor norm_weight, Tensor norm_bias, Tensor weight, float eps) -> Tensor");
  // Whether float32 passes may use TF32 (torch.backends.cuda.matmul.allow_tf32): implemented in
  // Python (_ops.py), read by the float32 kernels through the dispatcher (pass.cpp).
  m.def("_allow_tf32() -> bool");
}

STABLE_TORCH_LIBRARY_IMPL(axial_fused, CUDA, m) {
  m.impl("axial_pass", TORCH_BOX(&axial_pass_cuda));
  m.impl("axial_attention", TORCH_BOX(&axial_attention_cuda));
  m.impl("pair_bias", TORCH_BOX(&pair_bias_cuda));
}

}  // namespace axial_fused

// ---- the C entry points (ctypes; src/axial_fused/_ext.py) -------------------------------------------
// Plain C types only. A function that can fail returns 0 on success, else an error class (1: a bad
// argument, ValueError; 2: a request the device or binary cannot meet, RuntimeError) with the message
// written into err[0..errlen).
extern "C" {

// "dtype:dim:heads;..." of every compiled specialization.
__attribute__((visibility("default"))) const char* axial_fused_compiled_specs() {
  using namespace axial_fused;
  static const std::string text = [] {
    std::string s;
    for (const SpecInfo* sp : registry())
      s += std::string(s.empty() ? "" : ";") + dtype_name(sp->dtype) + ":" + std::to_string(sp->dim) + ":" +
           std::to_string(sp->heads);
    return s;
  }();
  return text.c_str();
}
__attribute__((visibility("default"))) const char* axial_fused_specs_option() { return AXIAL_FUSED_SPECS_OPTION; }
__attribute__((visibility("default"))) const char* axial_fused_compiled_archs() { return AXIAL_FUSED_ARCH_LIST; }
__attribute__((visibility("default"))) const char* axial_fused_torch_version() { return AXIAL_FUSED_TORCH_VERSION; }
__attribute__((visibility("default"))) int axial_fused_cudart_version() { return CUDART_VERSION; }

// "" when this binary holds code the device can run, else CUDA's reason (no kernel image ...).
__attribute__((visibility("default"))) void axial_fused_device_kernel_error(int device, char* err, int errlen) {
  using namespace axial_fused;
  write_text("", err, errlen);
  if (registry().empty()) return write_text("no specialization compiled", err, errlen);
  int previous = 0;
  cudaError_t e = cudaGetDevice(&previous);
  if (e == cudaSuccess) e = cudaSetDevice(device);
  if (e == cudaSuccess) {
    e = registry().front()->probe();
    cudaSetDevice(previous);
  }
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the (non-sticky) error this query leaves
    write_text(cudaGetErrorString(e), err, errlen);
  }
}

__attribute__((visibility("default"))) void axial_fused_set_path_override(int path) {
  axial_fused::g_path_override.store(path);
}

// The planner's plan for a pass on a described device (no GPU needed), as plan_text writes it, into
// out[0..outlen). flags: the request's features (kPlan* below).
__attribute__((visibility("default"))) int axial_fused_plan(const char* dtype, int dim, int heads, int64_t num_seq,
                                                            int len, int flags, int arch, int sm90a, int sms,
                                                            int smem_optin, int forced, char* out, int outlen,
                                                            char* err, int errlen) {
  using namespace axial_fused;
  enum { kPlanTf32 = 1, kPlanGated = 2, kPlanExtras = 4, kPlanMask = 8, kPlanBias = 16, kPlanBiasFromLn = 32,
         kPlanNoTensorMaps = 64 };
  const int dt = dtype_from_name(dtype);
  const SpecInfo* s = dt < 0 ? nullptr : find_spec(dt, dim, heads);
  if (s == nullptr) {
    write_text(std::string("axial_fused: no compiled specialization for ") + dtype + ", dim " + std::to_string(dim) +
                   ", heads " + std::to_string(heads),
               err, errlen);
    return 1;
  }
  DeviceInfo dev;
  dev.sms = sms;
  dev.smem_optin = smem_optin;
  dev.arch = arch;
  dev.sm90a = sm90a && arch == 90;
  PassRequest r;
  r.num_seq = num_seq;
  r.len = len;
  r.math = dt == kFloat32 && (flags & kPlanTf32) ? kTf32 : kExactFp32;
  r.gated = flags & kPlanGated;
  r.mask = flags & kPlanMask;
  r.bias = flags & kPlanBias;
  r.bias_from_ln = flags & kPlanBiasFromLn;
  r.extras = (flags & kPlanExtras) || r.gated || r.mask || r.bias || r.bias_from_ln;
  r.tensor_maps = !(flags & kPlanNoTensorMaps);
  r.forced = forced;
  try {
    write_text(plan_text(plan_pass(s, r, dev)), out, outlen);
  } catch (const std::exception& e) {
    write_text(e.what(), err, errlen);
    return 2;
  }
  return 0;
}

// The tuning rows of a compiled specialization (SpecInfo::tiles), "" for one not compiled.
__attribute__((visibility("default"))) const char* axial_fused_tiles(const char* dtype, int dim, int heads) {
  using namespace axial_fused;
  const int dt = dtype_from_name(dtype);
  const SpecInfo* s = dt < 0 ? nullptr : find_spec(dt, dim, heads);
  return s == nullptr ? "" : s->tiles();
}

// Bytes of shared memory a block may opt in to on `device`; -1 (message in err) when it cannot be read.
__attribute__((visibility("default"))) int axial_fused_device_smem_optin(int device, char* err, int errlen) {
  using namespace axial_fused;
  try {
    return device_info(device).smem_optin;
  } catch (const std::exception& e) {
    write_text(e.what(), err, errlen);
    return -1;
  }
}

// Whether the two-kernel path (the smaller) fits this device's shared memory in either fp32 mode:
// 1 yes, 0 no, -1 (message in err) when the device cannot be read.
__attribute__((visibility("default"))) int axial_fused_fits_device(const char* dtype, int dim, int heads, int device,
                                                                   char* err, int errlen) {
  using namespace axial_fused;
  const int dt = dtype_from_name(dtype);
  const SpecInfo* s = dt < 0 ? nullptr : find_spec(dt, dim, heads);
  if (s == nullptr) return 0;
  try {
    const size_t limit = size_t(device_info(device).smem_optin);
    return s->two_kernel_smem_bytes(kTf32) <= limit && s->two_kernel_smem_bytes(kExactFp32) <= limit;
  } catch (const std::exception& e) {
    write_text(e.what(), err, errlen);
    return -1;
  }
}

// The module init: axial_fused._C holds no Python functions (the operators register themselves when
// the library loads; the rest is the C entry points above).
PyMODINIT_FUNC PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", "axial_fused CUDA kernels (torch.ops.axial_fused.*)",
                                          -1, nullptr};
  return PyModule_Create(&module_def);
}

}  // extern "C"
