"""Developer tools that need no GPU (CPU, skipped without nvcc or nvdisasm): the SASS main-loop counter
`scripts/sass_loops.py`, run on the K1 kernel compiled for sm_90a in its default warp-specialized form
and on wg_gemm (-DAXIAL_FUSED_QKV_WS=0), checks what the warp specialization is for: its consumers'
main loop issues the same tensor-core products with no cp.async and no block barrier; that K1's q/k/v
and the attention kernel's outputs are stored with STG.E.128 only; that K1's cluster form loads
the weight by multicast tensor-map copies; that the tile-store experiment writes q/k/v only
through stmatrix and tensor-map stores; that esm's K1 (D = 768) takes part of A from registers; and
that the tensor-map output-projection experiment loads its weight by the copy engine alone."""
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


def _sass_loops(tmp_path: Path, flags: list[str], *extra: str, kernel: str = "ln_qkv_sm90",
                source: Path = KERNEL) -> str:
    """scripts/sass_loops.py's report on `kernel` (default K1) of `source` compiled for sm_90a with `flags`."""
    nvcc = _nvcc()
    if nvcc is None or not source.exists():
        pytest.skip("needs nvcc and the generated kernel files")
    cubin = tmp_path / ("k" + "".join(f.split("=")[0][-4:] for f in flags) + ".cubin")
    subprocess.run([nvcc, "-std=c++17", "-O3", f"-I{ROOT / 'include'}", "-arch=sm_90a", "-cubin", *flags,
                    "-o", str(cubin), str(source)], check=True, capture_output=True)
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "sass_loops.py"), str(cubin), kernel, *extra],
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


def _copy_engine_loop(out: str) -> bool:
    """Whether some product loop in sass_loops' output waits on mbarriers only: tensor-core products,
    mbarrier operations, no cp.async and no named/block barrier."""
    loops = re.findall(r"loop \S+: \d+ instructions, (\d+) tensor-core products, (\d+) cp.async, "
                       r"(\d+) named/block barriers, (\d+) mbarrier ops", out)
    return any(int(p) >= 1 and int(c) == 0 and int(b) == 0 and int(mb) >= 1 for p, c, b, mb in loops)


def _main_loop(tmp_path: Path, flags: list[str]) -> dict[str, int]:
    out = _sass_loops(tmp_path, flags)
    m = re.search(r"loop \S+: (\d+) instructions, (\d+) tensor-core products, (\d+) cp.async, "
                  r"(\d+) named/block barriers, (\d+) mbarrier ops", out)
    assert m, out
    keys = ("instructions", "products", "cp_async", "barriers", "mbarrier")
    return dict(zip(keys, map(int, m.groups())))


def test_sass_loops_finds_k1_main_loop(tmp_path):
    loop = _main_loop(tmp_path, ["-DAXIAL_FUSED_QKV_WS=0"])
    assert loop["products"] >= 1 and loop["cp_async"] >= 1 and loop["barriers"] >= 1, loop


def test_warp_specialized_k1_consumers_issue_no_copies_or_block_barriers(tmp_path):
    base = _main_loop(tmp_path, ["-DAXIAL_FUSED_QKV_WS=0"])
    ws = _main_loop(tmp_path, [])
    assert ws["products"] >= 1 and ws["mbarrier"] >= 1, ws
    assert ws["cp_async"] == 0 and ws["barriers"] == 0, ws
    # The same products per loop trip. (Instructions per product are no longer compared: against
    # wg_gemm with the hoisted copies, the default since session 8, the consumers' loop at this
    # specialization is 85 per product to wg_gemm's 78; the mbarrier waits replace the block barrier.)
    assert ws["products"] == base["products"], (base, ws)


def _store_widths(out: str) -> dict[str, int]:
    m = re.search(r"global stores: (.*)", out)
    assert m, out
    return dict((k, int(v)) for k, v in re.findall(r"(STG\.E\S*) x(\d+)", m.group(1)))


def test_k1_stores_q_k_v_sixteen_bytes_per_instruction(tmp_path):
    # A plain uint4 assignment compiled to four 32-bit STG.E (session 8); with st_global_16 every
    # q/k/v store is one STG.E.128 and no narrower global store is left (msa's K1 215 -> 174 us).
    widths = _store_widths(_sass_loops(tmp_path, [], "--stores"))
    assert widths.get("STG.E.128", 0) >= 1 and set(widths) == {"STG.E.128"}, widths


def test_attention_kernels_output_is_stored_sixteen_bytes_per_instruction(tmp_path):
    # The Hopper attention kernel's output projection (its only global stores) folds bias and
    # residual into the accumulators and writes 16-byte vectors (before session 9: 4-byte pairs).
    widths = _store_widths(_sass_loops(tmp_path, [], "--stores", kernel="attn_sm90"))
    assert widths.get("STG.E.128", 0) >= 1 and set(widths) == {"STG.E.128"}, widths


def test_clustered_k1_loads_the_weight_by_multicast_copies(tmp_path):
    # K1's cluster form (by default at D >= 512; -DAXIAL_FUSED_QKV_TMA_MIN_D=0 instantiates it at this
    # file's D = 128) fetches weight chunks with multicast tensor-map copies: none of its own cp.async
    # in the consumers' loop, which waits on mbarriers only.
    out = _sass_loops(tmp_path, ["-DAXIAL_FUSED_QKV_TMA_MIN_D=0"], "--count", r"UTMALDG\S*MULTICAST",
                      kernel="ln_qkv_sm90_tma")
    assert _matched(out) >= 1, out
    loop = re.search(r"loop \S+: (\d+) instructions, (\d+) tensor-core products, (\d+) cp.async, "
                     r"(\d+) named/block barriers, (\d+) mbarrier ops", out)
    assert loop and int(loop.group(2)) >= 1 and int(loop.group(3)) == 0 and int(loop.group(4)) == 0, out


def test_tile_store_k1_writes_q_k_v_only_through_the_copy_engine(tmp_path):
    # The -DAXIAL_FUSED_QKV_TMA_STORE=1 experiment (session 10): K1's accumulators go to shared memory
    # by stmatrix (STSM) and out by tensor-map stores (UTMASTG); the kernel has no global store of
    # its own left.
    out = _sass_loops(tmp_path, ["-DAXIAL_FUSED_QKV_TMA_STORE=1"], "--stores", "--count", r"UTMASTG|STSM",
                      kernel="ln_qkv_sm90_st")
    assert _matched(out) >= 2, out
    assert "global stores: none" in out, out


def test_esm_k1_takes_half_of_a_from_registers(tmp_path):
    # Register A (sessions 11-12, docs/performance.md): at D = 768 K1's cluster form (384 threads,
    # setmaxnreg) keeps A's first six 64-column panels in registers, so 24 of each column chunk's 48
    # k-steps are register-A products (HGMMA with a register operand before the weight's descriptor),
    # the rest read A from shared memory. -DAXIAL_FUSED_QKV_RS=0 (the old form) has none; the
    # 288-thread form (-DAXIAL_FUSED_QKV_WIDE=0) has 16.
    rs = r"HGMMA\.64x128x16\S* R\d+, R\d+, gdesc"
    source = ROOT / "kernels" / "axial_bf16_d768_h12.cu"
    out = _sass_loops(tmp_path, [], "--count", rs, kernel="ln_qkv_sm90_tma", source=source)
    assert _matched(out) == 24, out
    # The one-block fallback of the same specialization (no tensor map) keeps A in shared memory: its
    # cp.async producer fills only the plain ring (register A there would hang it; e5eeb9b had it).
    out = _sass_loops(tmp_path, [], "--count", rs, kernel="ln_qkv_sm90_kernel", source=source)
    assert _matched(out) == 0, out


@pytest.mark.parametrize("kernel", ["attn_sm90_otma", "fused_sm90_otma"])
def test_tensor_map_output_projection_loads_by_copy_engine_alone(tmp_path, kernel):
    # The -DAXIAL_FUSED_OUT_TMA=1 experiment (session 11): the attention kernel's and the Hopper fused
    # kernel's output projections take their weight chunks from tensor-map copies (UTMALDG) issued by
    # one thread; the projection's loop waits on mbarriers only (no cp.async, no block barrier).
    # Their default forms' loops all hold cp.async and block barriers.
    out = _sass_loops(tmp_path, ["-DAXIAL_FUSED_OUT_TMA=1"], "--all", "--count", r"UTMALDG", kernel=kernel)
    assert _matched(out) >= 1, out
    assert _copy_engine_loop(out), out


def test_split_pass_kernels_stream_by_copy_engine(tmp_path):
    # The split pass (default at D >= 512 since session 13): at D = 768 the attention kernel writes
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


def test_cursor_attention_requests_without_division(tmp_path):
    # The cursor form (default since session 13): the attention kernel's key / value requests keep
    # running counters, so no signed division by the run-time tile count is left (its SASS begins
    # with I2F.RP, the divisor's reciprocal); -DAXIAL_FUSED_ATTN_CURSOR=0, the old form, has them.
    def divisions(flags):
        out = _sass_loops(tmp_path, flags, "--count", r"I2F\.RP", kernel="attn_sm90")
        counts = [int(c) for c in re.findall(r"matching .*: (\d+)", out)]
        assert counts, out
        return sum(counts)

    assert divisions(["-DAXIAL_FUSED_ATTN_CURSOR=0"]) >= 1
    assert divisions([]) == 0
