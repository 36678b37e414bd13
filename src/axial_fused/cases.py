"""The kernels' cases, from one generator: the kernel tests, scripts/fuzz.py and the benchmark use it.

A case is a specialization (dtype, dim, heads), a shape (B, H, W), the call's optional features (key
mask, logit bias, sigmoid gate, q/k/v bias, the update alone, the bias computed from LN(x)), the
kernel path (the automatic choice or a forced one) and the call (both passes, or one along either
axis). Three sources of cases:

  ``grid``   the product of specializations, fixed shapes, feature sets and paths, less the cases a
             forced path cannot take (``Case.unservable``); ``SHAPES`` holds the awkward shapes the
             tests pin (lengths at the 64- and 128-token tiles, packed short sequences, ...);
  ``sweep``  every specialization at four pairs of ``LENGTHS``, each length on both axes;
  ``draw``   the seeded random sweep: case ``index`` of run ``seed`` from its own generator, so any
             one can be rerun alone (scripts/fuzz.py; the tests rerun fixed draws);

and ``SUITE``, the benchmark's named shapes.
"""
from __future__ import annotations

import dataclasses
import itertools
import random
import zlib

import torch

from . import _ext, _specs

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
PATHS = _ext.PATHS  # name -> the planner's override: auto, fused, two_kernel, fused_sm90
FNS = ("attention", "row", "col")  # both passes, or one pass along that axis

# Sequence lengths around the kernels' tiles (64 and 128 tokens) and the sizes the models use.
LENGTHS = (1, 2, 7, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 255, 256, 257, 511, 512, 1000, 1024)
HOPPER_FUSED_MAX_LEN = 128  # the Hopper fused kernel's block: one sequence of at most 128 tokens, or several

# Fixed (B, H, W) sets. The row pass has sequences of W tokens (B * H of them), the column pass of H.
SHAPES = {
    # lengths at the tile edges on either axis: one token, 2 x 7 and 7 x 2, 33 (one past a 32-row group),
    # 100 and 129 (past the 64- and 128-token tiles), a whole 64-token tile
    "tile_edges": ((3, 1, 1), (3, 2, 7), (3, 7, 2), (3, 33, 5), (3, 5, 100), (3, 64, 64), (3, 3, 129)),
    # blocks of at most 32 tokens on both axes: 32-token sequences, 16 < L < 32, L <= 16, and blocks packing
    # two sequences of 16 or 5 tokens (288 / 300 sequences on 132 SMs)
    "short_blocks": ((2, 32, 29), (3, 13, 20), (18, 16, 16), (60, 5, 5)),
    # lengths 1..8: several sequences a block, on either axis
    "many_short": ((2, 1, 300), (2, 300, 2), (2, 5, 700), (2, 700, 3)),
    # the optional features: odd lengths on both axes, one past a 128-token tile
    "features": ((2, 33, 7), (1, 5, 100), (2, 64, 129)),
    # the Hopper fused kernel: both lengths <= 128. On 132 SMs its blocks pack, by whole waves (the fewest
    # sequences a block that give the fewest waves, at most 128 / L: csrc/pass.cpp,
    # sequences_per_block_waves), 2 column sequences of 56 (2, 56, 100), 2 row sequences of 33 (2, 127, 33),
    # 4 of 7 (4, 100, 7), 3 of 30 (3, 120, 30) and 7 of 2 (8, 100, 2); the rest one a block, with padding
    # rows (100, 127, 31) or none (128)
    "hopper_fused": ((1, 1, 1), (3, 7, 31), (2, 56, 100), (1, 128, 128), (2, 127, 33), (1, 64, 64), (4, 100, 7),
                     (3, 120, 30), (8, 100, 2)),
    # the Hopper attention kernel (key tiles of 128 at head_dim 32, 64 at 64): one short tile (7), whole
    # tiles (64, 128), a partial last tile (100, 129, 200, 300), msa's lengths (256, 512), many tiles (1000)
    "attn_sm90": ((2, 1, 7), (1, 64, 129), (1, 100, 128), (1, 256, 3), (1, 200, 300), (1, 512, 2), (1, 2, 1000)),
}


@dataclasses.dataclass(frozen=True)
class Features:
    """A call's optional features. residual=False: the update alone (the "update_only" feature)."""
    mask: bool = False
    bias: bool = False
    gate: bool = False
    qkv_bias: bool = False
    residual: bool = True
    bias_weight: bool = False

    NAMES = ("mask", "bias", "gate", "qkv_bias", "update_only", "bias_weight")

    @classmethod
    def of(cls, *names: str) -> Features:
        unknown = [n for n in names if n not in cls.NAMES]
        if unknown:
            raise ValueError(f"unknown feature(s) {', '.join(map(repr, unknown))}; supported: {', '.join(cls.NAMES)}")
        return cls(mask="mask" in names, bias="bias" in names, gate="gate" in names, qkv_bias="qkv_bias" in names,
                   residual="update_only" not in names, bias_weight="bias_weight" in names)

    @property
    def names(self) -> tuple[str, ...]:
        on = dict(mask=self.mask, bias=self.bias, gate=self.gate, qkv_bias=self.qkv_bias,
                  update_only=not self.residual, bias_weight=self.bias_weight)
        return tuple(n for n in self.NAMES if on[n])

    @property
    def name(self) -> str:
        return "+".join(self.names) or "plain"


PLAIN = Features()
ALL = Features.of("mask", "bias", "gate", "qkv_bias", "update_only")
# The named sets: the benchmark's --features columns, and the kernel tests' feature cases (each alone and
# together; the Hopper fused kernel has no gate, so ALL and "mask+bias+qkv_bias" split its cases).
FEATURE_SETS = {"plain": PLAIN, **{n: Features.of(n) for n in ("mask", "bias", "gate", "qkv_bias", "update_only")},
                "mask+bias+gate": Features.of("mask", "bias", "gate"), "all": ALL}
UNGATED = Features.of("mask", "bias", "qkv_bias")


def hopper_fused_serves(dtype: str, dim: int, heads: int) -> bool:
    """The Hopper fused kernel's specializations (on sm_90a): 16-bit, head_dim 32, even heads, dim <= 256."""
    return dtype != "float32" and dim // heads == 32 and heads % 2 == 0 and dim <= 256


def attn_sm90_serves(dtype: str, dim: int, heads: int) -> bool:
    """The Hopper attention kernel's specializations (the two-kernel path on sm_90a): 16-bit, head_dim 32 or 64."""
    return dtype != "float32" and dim // heads in (32, 64)


@dataclasses.dataclass(frozen=True)
class Case:
    dtype: str
    dim: int
    heads: int
    B: int
    H: int
    W: int
    features: Features = PLAIN
    path: str = "auto"
    fn: str = "attention"

    @property
    def spec(self) -> tuple[str, int, int]:
        return self.dtype, self.dim, self.heads

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return self.B, self.H, self.W, self.dim

    @property
    def lengths(self) -> tuple[int, ...]:
        """The sequence lengths of the call's passes."""
        return {"attention": (self.W, self.H), "row": (self.W,), "col": (self.H,)}[self.fn]

    @property
    def id(self) -> str:
        return (f"{self.dtype}-{self.dim}x{self.heads}-{self.B}x{self.H}x{self.W}-{self.features.name}-{self.path}"
                + ("" if self.fn == "attention" else f"-{self.fn}"))

    @property
    def input_seed(self) -> int:
        """A seed for the case's inputs, the same in every process."""
        return zlib.crc32(self.id.encode()) % 10_000

    def unservable(self) -> str | None:
        """Why the forced path cannot take this case on any GPU, or None. (Whether a forced mma.sync fused
        block fits in shared memory depends on the device: the kernel tests skip where it does not.)"""
        if self.path != "fused_sm90":
            return None
        if not hopper_fused_serves(*self.spec):
            return "the Hopper fused kernel does not serve this specialization"
        if self.features.gate:
            return "the Hopper fused kernel has no gate"
        if max(self.lengths) > HOPPER_FUSED_MAX_LEN:
            return f"the Hopper fused kernel takes sequences of at most {HOPPER_FUSED_MAX_LEN} tokens"
        return None


def specs(pred=None) -> list[tuple[str, int, int]]:
    """The compiled specializations (dtype, dim, heads) that satisfy pred, by dim, heads, dtype; [] without
    the extension."""
    return sorted((s for s in _ext.specs() if pred is None or pred(*s)), key=lambda s: (s[1], s[2], s[0]))


def default_specs() -> list[tuple[str, int, int]]:
    """The default build's specializations (every dtype of each default (dim, heads))."""
    return [(dt, d, h) for d, h in _specs.DEFAULT_PAIRS for dt in DTYPES]


def grid(spec_list, shapes, features=(PLAIN,), paths=("auto",), fns=("attention",)) -> list[Case]:
    """Every (specialization, shape, features, path, call), less those the path cannot take."""
    cases = (Case(dt, d, h, B, H, W, f, p, fn) for (dt, d, h), (B, H, W), f, p, fn
             in itertools.product(spec_list, shapes, features, paths, fns))
    return [c for c in cases if c.unservable() is None]


def sweep(spec_list, max_elems: int) -> list[Case]:
    """Each specialization at four (H, W) pairs of LENGTHS, a long length meeting a short one, the shorter
    cut to a quarter until B * H * W * dim <= max_elems, B = 3 (1 for the largest). The pairs step through
    LENGTHS so that across the default build's sweep every length appears on both axes."""
    n, cases = len(LENGTHS), []
    for i, (dt, d, h) in enumerate(spec_list):
        for j in range(4):
            a, b = LENGTHS[(7 * i + j) % n], LENGTHS[(7 * i + j + 11) % n]
            if j % 2:
                a, b = b, a
            while a * b * d > max_elems and min(a, b) > 1:
                a, b = (max(1, a // 4), b) if a <= b else (a, max(1, b // 4))
            cases.append(Case(dt, d, h, 1 if a * b * d > max_elems // 3 else 3, a, b))
    return cases


# ---- the seeded random sweep ------------------------------------------------------------------------

# "misaligned" and "odd_stride" are layouts the kernels cannot read in place: the op copies them once and
# still runs fused (docs/errors.md rows 19-20).
LAYOUTS = ("contiguous", "contiguous", "slice", "transpose", "expand", "channel_slice", "offset2", "misaligned",
           "odd_stride")
UNSUPPORTED = ("uncompiled", "float64")


@dataclasses.dataclass(frozen=True)
class Draw(Case):
    """A random case and the rest of its call: the layout of x (LAYOUTS), eps, the scale and shift of x,
    the scales of the q/k/v and output weights, TF32 for float32; the bias's form (batch 1 or B, float32
    or x's dtype, a transposed view); `unsupported`: a case the fused path must refuse (UNSUPPORTED)."""
    seed: int = 0
    index: int = 0
    layout: str = "contiguous"
    eps: float = 1e-5
    x_scale: float = 1.0
    x_shift: float = 0.0
    qkv_scale: float = 1.0
    out_scale: float = 1.0
    tf32: bool = False
    unsupported: str | None = None
    bias_batch1: bool = False
    bias_f32: bool = False
    bias_transposed: bool = False


def draw(seed: int, index: int, max_elems: int, spec_list, features: bool = False) -> Draw:
    """Case `index` of run `seed` (independent of the others): a specialization of spec_list, lengths half
    the time from LENGTHS, else log-uniform in [1, 1122], the longer axis halved until B * H * W * dim <=
    max_elems; about one in ten unsupported. features=False: the same draws with the features off (they
    are drawn last)."""
    rng = random.Random(f"axial-fuzz:{seed}:{index}")
    dt, dim, heads = rng.choice(spec_list)
    B = rng.choice([0, 1, 1, 2, 2, 3, 4])
    eps = 10 ** rng.uniform(-6, -2)
    fn = rng.choice(["attention", "attention", "row", "col"])
    layout = rng.choice(LAYOUTS)
    x_scale = 10 ** rng.uniform(-2, 2 if dt == "float16" else 3)
    x_shift = rng.gauss(0, 1)
    qkv_scale, out_scale = 10 ** rng.uniform(-0.5, 0.5), 10 ** rng.uniform(-0.5, 0.5)
    path = rng.choice(["auto", "auto", "fused", "two_kernel"])
    tf32 = rng.random() < 0.5
    length = lambda: rng.choice(LENGTHS) if rng.random() < 0.5 else int(10 ** rng.uniform(0, 3.05))
    H, W = length(), length()
    while max(B, 1) * H * W * dim > max_elems:  # shrink the longer axis until the case is cheap
        H, W = (max(1, H // 2), W) if H >= W else (H, max(1, W // 2))
    unsupported = None
    if rng.random() < 0.1:
        unsupported = rng.choice(UNSUPPORTED)
        if unsupported == "uncompiled":  # a (dim, heads) the reference serves but no kernel was built for
            dim, heads = rng.choice([(d, h) for d, h in [(64, 2), (96, 3), (128, 2), (192, 3), (320, 5)]
                                     if (dt, d, h) not in set(spec_list)])
        else:
            dt = "float64"
    esz = 8 if dt == "float64" else DTYPES[dt].itemsize
    if path == "fused" and (dim * esz > 512 or max(H, W) > 64):
        path = "auto"  # a forced fused block must fit in shared memory
    on = rng.random() < 0.5 and features  # half the draws have features, each of those a random subset
    mask, bias = on and rng.random() < 0.6, on and rng.random() < 0.6
    gate, qkv_bias = on and rng.random() < 0.5, on and rng.random() < 0.5
    residual = not (on and rng.random() < 0.3)
    bias_batch1, bias_f32, bias_transposed = rng.random() < 0.5, rng.random() < 0.5, rng.random() < 0.3
    bias_weight = bool(on and rng.random() < 0.3)
    if bias_weight:  # the bias from LN(x) itself: a square grid, no given bias
        H = W = min(H, W)
        bias = False
    feats = Features(bool(mask), bool(bias), bool(gate), bool(qkv_bias), bool(residual), bias_weight)
    return Draw(dt, dim, heads, B, H, W, feats, path, fn, seed=seed, index=index, layout=layout, eps=eps,
                x_scale=x_scale, x_shift=x_shift, qkv_scale=qkv_scale, out_scale=out_scale, tf32=tf32,
                unsupported=unsupported, bias_batch1=bias_batch1, bias_f32=bias_f32, bias_transposed=bias_transposed)


# ---- the benchmark's suite --------------------------------------------------------------------------

SUITE = {  # name: the shape the benchmark times, both passes
    "seed_fp32": Case("float32", 64, 4, 4, 32, 32),
    "seed": Case("bfloat16", 64, 4, 4, 32, 32),
    "vision": Case("bfloat16", 128, 4, 8, 64, 64),
    "odd": Case("bfloat16", 192, 6, 2, 56, 100),
    "latent": Case("bfloat16", 256, 8, 2, 128, 128),
    "msa": Case("bfloat16", 256, 8, 1, 512, 256),
    "esm": Case("bfloat16", 768, 12, 1, 64, 512),
}
