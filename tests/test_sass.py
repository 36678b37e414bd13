"""The SASS of the sm_90a kernels has the structure their design relies on (CPU; skipped without nvcc
or nvdisasm), counted by the developer tool `scripts/dev/sass_loops.py`: K1's warp-specialized
consumers issue their tensor-core products with no cp.async and no block barrier; K1's q/k/v and the
attention kernels' outputs are stored with STG.E.128 only; K1's cluster form loads the weight by
multicast tensor-map copies; at D = 768 K1 takes part of A from registers; the tensor-map output
projection and the split pass's GEMM load by the copy engine alone; the attention kernel's requests
have no division by the run-time tile count and its key-tile loop one chunk start and no R2UR, its
tiles come by tensor-map copies where AttnSm90::KV_TMA; the mma.sync attention at head_dim 8 holds
its registers to three blocks an SM, adds its mask and bias a tile at a time, not with a branch per
score, and applies a mask without a bias on the tensor cores."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "kernels" / "axial_bf16_d128_h4.cu"  # in the minimal set


def _nvcc() -> str | None:
    home = os.environ.get("CUDA_HOME")
    if home and (Path(home) / "bin" / "nvcc").exists():
        return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


def _compile(cubin: Path, source: Path, flags: list[str]) -> subprocess.CompletedProcess:
    """`source` compiled for sm_90a with `flags` into `cubin` (skips without nvcc or the kernel files)."""
    nvcc = _nvcc()
    if nvcc is None or not source.exists():
        pytest.skip("needs nvcc and the generated kernel files")
    return subprocess.run([nvcc, "-std=c++17", "-O3", f"-I{ROOT / 'include'}", "-arch=sm_90a", "-cubin", *flags,
                           "-o", str(cubin), str(source)], check=True, capture_output=True, text=True)


def _sass_loops(tmp_path: Path, flags: list[str], *extra: str, kernel: str = "ln_qkv_sm90",
                source: Path = KERNEL) -> str:
    """scripts/dev/sass_loops.py's report on `kernel` (default K1) of `source` compiled for sm_90a with `flags`."""
    cubin = tmp_path / ("k" + "".join(f.split("=")[0][-4:] for f in flags) + ".cubin")
    _compile(cubin, source, flags)
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "dev" / "sass_loops.py"), str(cubin), kernel, *extra],
                         capture_output=True, text=True)
    if out.returncode != 0 and "no nvdisasm" in out.stderr + out.stdout:
        pytest.skip("no nvdisasm here")
    assert out.returncode == 0, out.stderr
    return out.stdout


def _matched(out: str) -> int:
    """The instruction count of sass_loops' --count line (the first kernel's)."""
    m = re.search(r"matching .*: (\d+)", out)
    assert m, out
    return int(m.group(1))


# One loop line of sass_loops' report: instructions, products, cp.async, barriers, mbarrier ops, branches.
_LOOP = (r"loop \S+: (\d+) instructions, (\d+) tensor-core products, (\d+) cp.async, (\d+) named/block barriers, "
         r"(\d+) mbarrier ops, (\d+) branches")


def _copy_engine_loop(out: str) -> bool:
    """Whether some product loop in sass_loops' output waits on mbarriers only: tensor-core products,
    mbarrier operations, no cp.async and no named/block barrier."""
    return any(int(p) >= 1 and int(c) == 0 and int(b) == 0 and int(mb) >= 1
               for _, p, c, b, mb, _ in re.findall(_LOOP, out))


def _main_loop(tmp_path: Path, flags: list[str]) -> dict[str, int]:
    out = _sass_loops(tmp_path, flags)
    m = re.search(_LOOP, out)
    assert m, out
    keys = ("instructions", "products", "cp_async", "barriers", "mbarrier")
    return dict(zip(keys, map(int, m.groups()[:5])))


def test_warp_specialized_k1_consumers_issue_no_copies_or_block_barriers(tmp_path):
    ws = _main_loop(tmp_path, [])
    assert ws["products"] >= 1 and ws["mbarrier"] >= 1, ws
    assert ws["cp_async"] == 0 and ws["barriers"] == 0, ws


def _store_widths(out: str) -> dict[str, int]:
    m = re.search(r"global stores: (.*)", out)
    assert m, out
    return dict((k, int(v)) for k, v in re.findall(r"(STG\.E\S*) x(\d+)", m.group(1)))


def test_k1_stores_q_k_v_sixteen_bytes_per_instruction(tmp_path):
    # With st_global_16 every q/k/v store is one STG.E.128 (a plain uint4 assignment compiles to four
    # 32-bit STG.E) and no narrower global store is left.
    widths = _store_widths(_sass_loops(tmp_path, [], "--stores"))
    assert widths.get("STG.E.128", 0) >= 1 and set(widths) == {"STG.E.128"}, widths


def test_attention_kernels_output_is_stored_sixteen_bytes_per_instruction(tmp_path):
    # The Hopper attention kernel's output projection (its only global stores) folds bias and
    # residual into the accumulators and writes 16-byte vectors.
    widths = _store_widths(_sass_loops(tmp_path, [], "--stores", kernel="attn_sm90"))
    assert widths.get("STG.E.128", 0) >= 1 and set(widths) == {"STG.E.128"}, widths


def test_clustered_k1_loads_the_weight_by_multicast_copies(tmp_path):
    # K1's cluster form (D >= 512) fetches weight chunks with multicast tensor-map copies: none of its
    # own cp.async in the consumers' loop, which waits on mbarriers only.
    out = _sass_loops(tmp_path, [], "--count", r"UTMALDG\S*MULTICAST", kernel="ln_qkv_sm90_tma",
                      source=ROOT / "kernels" / "axial_bf16_d512_h8.cu")
    assert _matched(out) >= 1, out
    loop = re.search(_LOOP, out)
    assert loop and int(loop.group(2)) >= 1 and int(loop.group(3)) == 0 and int(loop.group(4)) == 0, out


def test_esm_k1_takes_half_of_a_from_registers(tmp_path):
    # Register A (QkvSm90::RS): at D = 768 K1's cluster form (384 threads, setmaxnreg) keeps A's first
    # six 64-column panels in registers, so 24 of each column chunk's 48 k-steps are register-A
    # products (HGMMA with a register operand before the weight's descriptor), the rest read A from
    # shared memory.
    rs = r"HGMMA\.64x128x16\S* R\d+, R\d+, gdesc"
    source = ROOT / "kernels" / "axial_bf16_d768_h12.cu"
    out = _sass_loops(tmp_path, [], "--count", rs, kernel="ln_qkv_sm90_tma", source=source)
    assert _matched(out) == 24, out
    # The one-block fallback of the same specialization (no tensor map) keeps A in shared memory: its
    # cp.async producer fills only the plain ring.
    out = _sass_loops(tmp_path, [], "--count", rs, kernel="ln_qkv_sm90_kernel", source=source)
    assert _matched(out) == 0, out


def test_tensor_map_output_projection_loads_by_copy_engine_alone(tmp_path):
    # At D <= 256 the attention kernel's output projection takes its weight chunks from tensor-map
    # copies (UTMALDG) issued by one thread; the projection's loop waits on mbarriers only (no
    # cp.async, no block barrier).
    out = _sass_loops(tmp_path, [], "--all", "--count", r"UTMALDG", kernel="attn_sm90_otma")
    assert _matched(out) >= 1, out
    assert _copy_engine_loop(out), out


def test_split_pass_kernels_stream_by_copy_engine(tmp_path):
    # The split pass (D >= 512): at D = 768 the attention kernel writes
    # each head's output into the scratch as 16-byte vectors (STG.E.128) and keeps no output tile;
    # the output projection is its own GEMM, whose loop takes both operands from tensor-map copies
    # (UTMALDG) and waits on mbarriers only: no cp.async, no block barrier.
    source = ROOT / "kernels" / "axial_bf16_d768_h12.cu"
    flags = []
    out = _sass_loops(tmp_path, flags, "--all", "--count", r"STG\.E\.128", kernel="attn_sm90_split", source=source)
    assert _matched(out) >= 1, out
    out = _sass_loops(tmp_path, flags, "--all", "--count", r"UTMALDG", kernel="out_gemm_sm90", source=source)
    assert _matched(out) >= 2, out
    assert _copy_engine_loop(out), out


def test_attention_requests_without_division(tmp_path):
    # The attention kernel's key / value requests keep running counters, so no signed division by the
    # run-time tile count is left (its SASS would begin with I2F.RP, the divisor's reciprocal).
    out = _sass_loops(tmp_path, [], "--count", r"I2F\.RP", kernel="attn_sm90")
    counts = [int(c) for c in re.findall(r"matching .*: (\d+)", out)]
    assert counts and sum(counts) == 0, out


def _key_tile_loops(out: str, pattern: str = _LOOP) -> dict[str, tuple[int, ...]]:
    """Per kernel of a sass_loops --all report, its key-tile loop: the innermost loop with tensor-core
    products and requests, by cp.async or (tensor-map copies) with mbarrier waits and a warpgroup
    barrier. {kernel: the groups of `pattern`, _LOOP's six fields first}."""
    loops = {}
    for name, report in re.findall(r"^(_Z\S+): \d+ instructions$(.*?)(?=^_Z|\Z)", out, flags=re.M | re.S):
        found = [tuple(map(int, m)) for m in re.findall(pattern, report)]
        tile = [loop for loop in found if loop[1] and (loop[2] or (loop[3] and loop[4]))]
        assert tile, report
        loops[name] = min(tile)
    return loops


def test_attention_key_tile_loop_has_one_chunk_start(tmp_path):
    # Each Hopper attention kernel's key-tile loop (its innermost loop with products and requests)
    # holds one warpgroup barrier, its chunk start's: the path for a ring with no room to run ahead
    # (two barriers and a second copy of the requests) is compiled only where it runs (LA = 0, not at
    # 128x4), and the chunk start waits for a compile-time count of copy groups (3 barriers a loop at
    # 128x4 with that path compiled in).
    out = _sass_loops(tmp_path, [], "--all", kernel="attn_sm90")
    loops = _key_tile_loops(out)
    assert len(loops) >= 2 and all(loop[3] == 1 for loop in loops.values()), out


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_attention_tiles_come_by_tensor_map_copies(tmp_path, dtype):
    # AttnSm90::KV_TMA (at 128x4, both 16-bit dtypes): the tensor-map output projection's kernel takes
    # its queries, keys and values by tensor-map copies (UTMALDG) from one thread and waits on
    # mbarriers; its key-tile loops hold no cp.async but the bias slot's (the mask + bias variants'),
    # the plain variant's none. The cp.async kernel keeps its ring.
    out = _sass_loops(tmp_path, [], "--all", "--count", "UTMALDG", kernel="attn_sm90",
                      source=ROOT / "kernels" / f"axial_{dtype}_d128_h4.cu")
    loops = _key_tile_loops(out, _LOOP + r", (\d+) matching")
    otma = {name: loop for name, loop in loops.items() if "otma" in name}
    plain = [loop for name, loop in otma.items() if "ELb0ELi0E" in name]
    assert otma and len(plain) == 1, out
    assert all(loop[4] >= 1 and loop[-1] >= 1 and loop[2] <= 4 for loop in otma.values()), out
    assert plain[0][2] == 0, out
    assert all(loop[2] >= 1 and loop[-1] == 0 for name, loop in loops.items() if "otma" not in name), out


def test_attention_descriptors_are_built_on_the_uniform_datapath(tmp_path):
    # The warpgroup index is broadcast from lane 0 (sync.cuh's warp_uniform), so the attention kernels'
    # key-tile loops compute their stages' and descriptors' addresses on the uniform datapath, with no
    # R2UR moving them there before each wgmma (16 to 32 a loop at 128x4 with the index as tid >> 7).
    # One exception: the tensor-map kernel's variant with the mask by selects and the bias from global
    # memory (bfloat16 past kMaskMmaMaxLen keys) moves its key descriptor with 13 (its loop is still 40
    # instructions shorter than the cp.async kernel's).
    out = _sass_loops(tmp_path, [], "--all", "--count", "R2UR", kernel="attn_sm90")
    loops = _key_tile_loops(out, _LOOP + r", (\d+) matching")
    rest = [loop for name, loop in loops.items() if not ("otma" in name and "ELb1ELi3E" in name)]
    assert len(rest) >= 2 and all(loop[-1] == 0 for loop in rest), out


def test_small_head_attention_fits_three_blocks_an_sm(tmp_path):
    # attn_out_kernel at head_dim 16 or less (Traits::k2_min_blocks; extra_msa's head_dim 8): every
    # variant at D = 64 (plain, EXTRAS and the tensor-core mask, each for sm_90a's two forms) asks for
    # three blocks of 256 threads an SM, so ptxas holds it to 85 registers.
    out = _compile(tmp_path / "k.cubin", ROOT / "kernels" / "axial_bf16_d64_h8.cu", ["-Xptxas=-v"])
    regs = [int(n) for name, n in re.findall(r"Compiling entry function '(\w+)'.*?Used (\d+) registers",
                                             out.stdout + out.stderr, re.S) if "attn_out_kernel" in name]
    assert len(regs) == 6 and max(regs) <= 65536 // (3 * 256), regs


def _attn_out_loops(tmp_path: Path) -> dict[tuple[str, str], list[list[int]]]:
    """attn_out_kernel's key-tile loop at (64, 8) bfloat16 per (EXTRAS, MASK_MMA): each sm_90a form's
    loop line (instructions, products, cp.async, barriers, mbarrier ops, branches)."""
    out = _sass_loops(tmp_path, [], kernel="attn_out_kernel", source=ROOT / "kernels" / "axial_bf16_d64_h8.cu")
    loops: dict[tuple[str, str], list[list[int]]] = {}
    for g in re.findall(r"attn_out_kernel\w*?ELb\dELb(\d)ELb(\d)EE\w*: \d+ instructions\n\s*" + _LOOP, out):
        loops.setdefault(g[:2], []).append([int(n) for n in g[2:]])
    assert sorted(loops) == [("0", "0"), ("1", "0"), ("1", "1")] and all(len(v) == 2 for v in loops.values()), out
    return loops


def test_two_kernel_attention_terms_branch_per_tile(tmp_path):
    # attn_out_kernel's mask and bias (TileTerms::add): a tile's absent-key bits shifted to the thread's
    # columns and its biases loaded together, the bias dtype and the aligned / bounded load form chosen
    # once a tile, so the variants with the terms (EXTRAS) branch about as often in their key-tile loop
    # as the plain ones (a branch and a dependent load per score gave 126 branches against 25).
    loops = _attn_out_loops(tmp_path)
    plain = [loop[-1] for loop in loops["0", "0"]]
    terms = [loop[-1] for loop in loops["1", "0"]]
    assert max(terms) <= 2 * max(plain), (plain, terms)


def test_two_kernel_attention_mask_on_tensor_cores(tmp_path):
    # attn_out_kernel's MASK_MMA variant (a mask without a bias, bfloat16, head_dim 8) puts the mask in
    # the padded head column of q and k, so S's product applies it: its key-tile loop issues the plain
    # loop's products and about its instructions (483 against 554 with the bits' stores; the terms'
    # loop, which holds both attend_tile forms, about 1700).
    loops = _attn_out_loops(tmp_path)
    for plain, mma in zip(loops["0", "0"], loops["1", "1"]):
        assert mma[1] == plain[1] and mma[0] <= 1.25 * plain[0], (plain, mma)
