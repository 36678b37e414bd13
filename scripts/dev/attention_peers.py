"""The protein blocks' attention core alone, in other libraries' kernels (torch.profiler, bf16):

    python3 scripts/dev/attention_peers.py [SHAPE ...] [--reps N]

SHAPE: msa_row (512 sequences of 256, 8 heads of 32, mask and pair bias), msa_col (256 of 512,
mask), tri_256 / tri_384 (one node: L sequences of L, 4 heads of 32, mask and bias), esm_col (512 of
256, 12 heads of 64, mask). Per shape and peer: the GPU time of q, k, v -> o alone (no projections,
LayerNorm or gate), the sum of the peer's kernels per call. Peers: cuEquivariance's
`triangle_attention` (mask and float32 bias, its own layout [B, N, heads, L, c]), and
`scaled_dot_product_attention` on [N, heads, L, c] with each backend that accepts the call: plain
(no mask or bias), and with the bias broadcast over the sequences (no mask; its batch stride 0) or,
where the shape has no bias, with the key mask (bool, broadcast over heads and queries). Ours runs
the whole pass (LayerNorm, projections, attention, gate, output projection): compare with
`scripts/dev/kernel_times.py features` on the same machine. cuEquivariance's rows need
cuequivariance_torch importable.
"""
import argparse
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import devkit

SHAPES = {  # N sequences, L length, heads, head_dim, with a bias
    "msa_row": (512, 256, 8, 32, True),
    "msa_col": (256, 512, 8, 32, False),
    "tri_256": (256, 256, 4, 32, True),
    "tri_384": (384, 384, 4, 32, True),
    "esm_col": (512, 256, 12, 64, False),
}
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def kernel_us(fn, reps):
    """(total µs of GPU kernels per call, {kernel: µs per call})."""
    per = devkit.per_kernel_us(devkit.kernel_events(fn, reps), reps, full_names=True)
    return sum(t for t, _ in per.values()), {k: t for k, (t, _) in per.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shapes", nargs="*", default=list(SHAPES))
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("attention_peers: no CUDA device")
    g = torch.Generator(device="cuda").manual_seed(0)
    try:
        import cuequivariance_torch as cuet
    except ImportError as e:
        cuet = None
        print(f"cuequivariance_torch not importable ({e}): its rows are left out")
    for name in args.shapes:
        N, L, heads, c, with_bias = SHAPES[name]
        q, k, v = (torch.randn(1, N, heads, L, c, device="cuda", dtype=torch.bfloat16, generator=g)
                   for _ in range(3))
        keep = torch.rand(1, N, 1, 1, L, device="cuda", generator=g) > 0.05
        keep[..., L - L // 8:] = False
        bias = torch.randn(1, 1, heads, L, L, device="cuda", generator=g) * 2
        scale = 1 / math.sqrt(c)
        rows = []
        if cuet is not None:
            b = bias if with_bias else torch.zeros_like(bias)
            rows.append(("cueq triangle_attention (mask, bias)",
                         lambda: cuet.triangle_attention(q, k, v, b, mask=keep, scale=scale)))
        q3, k3, v3 = (t[0] for t in (q, k, v))  # [N, heads, L, c]
        bias_b = bias[0].to(torch.bfloat16).expand(N, heads, L, L)  # stride 0 over the sequences
        keep_b = keep[0]  # [N, 1, 1, L]
        for bname, backend in BACKENDS.items():
            def plain(backend=backend):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q3, k3, v3, scale=scale)
            rows.append((f"sdpa {bname} (plain)", plain))
            if with_bias:
                def biased(backend=backend):
                    with sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(q3, k3, v3, attn_mask=bias_b, scale=scale)
                rows.append((f"sdpa {bname} (bias)", biased))
            else:
                def masked(backend=backend):
                    with sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(q3, k3, v3, attn_mask=keep_b, scale=scale)
                rows.append((f"sdpa {bname} (mask)", masked))
        scores = N * heads * L * L
        print(f"== {name}: {N} x {heads} heads x {L}^2 scores ({scores / 1e6:.0f} M), head_dim {c}")
        for label, fn in rows:
            try:
                total, per = kernel_us(fn, args.reps)
            except (RuntimeError, NotImplementedError) as e:
                print(f"  {label:40s} not run: {str(e).splitlines()[0][:100]}")
                continue
            top = ", ".join(f"{k[:60]} {t:.1f}" for k, t in sorted(per.items(), key=lambda kv: -kv[1])[:3])
            print(f"  {label:40s} {total:8.1f} us  ({top})")
        del q, k, v, q3, k3, v3, bias, bias_b, keep_b
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
