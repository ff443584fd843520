"""The Triton BP+OSD decoder against the C decoder, its coprocessor function, and user Triton kernels.

No GPU is assumed: the kernels run in Triton's interpreter on CPU tensors, which is slow, so
shot counts are small. The interpreter evaluates tanh and log with the host's C library, so
even product-sum agrees with the C decoder bit for bit here; the product-sum tests still only
demand 99% agreement, as a GPU's libdevice may differ in the last bit.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported (here or by the decoder module)

import subprocess
import sys
import textwrap
import uuid
import zlib

import numpy as np
import pytest

triton = pytest.importorskip("triton")
torch = pytest.importorskip("torch")

import triton.language as tl
from backline_decoder_bpod import (
    BpOsdDecoder,
    BpOsdParams,
    codes,
    css_bp_decoder,
    triton_bp,
)
from backline_decoder_bpod.triton_bp import TritonBpOsdDecoder, triton_decoder

from backline_core import BoundFunction, CoprocessorFunction, FunctionError, Session, plugins

steane = plugins.get("decoder", "steane").build  # the core's Steane lookup table

if not triton_bp.INTERPRETED and not torch.cuda.is_available():  # pragma: no cover
    pytest.skip("triton was imported before TRITON_INTERPRET=1 was set and there is no GPU", allow_module_level=True)

SMALL_CODES = ["steane", "hgp13", "toric-4", "hgp-rep-5"]
RATES = [0.01, 0.05, 0.1]


def gf2(h: np.ndarray, x: np.ndarray) -> np.ndarray:
    return (h.astype(np.int64) @ x.astype(np.int64) % 2).astype(np.uint8)


def seed_of(*parts: object) -> int:
    return zlib.crc32(repr(parts).encode())  # hash() of a str changes from run to run


def nonzero_syndromes(h: np.ndarray, p: float, shots: int, seed: int) -> list[np.ndarray]:
    """Syndromes of iid errors of rate p, the zero syndrome (no decode at all) left out."""
    rng = np.random.default_rng(seed)
    out: list[np.ndarray] = []
    for _ in range(1000 * shots):
        s = gf2(h, rng.random(h.shape[1]) < p)
        if s.any():
            out.append(s)
            if len(out) == shots:
                break
    return out


def pair(h: np.ndarray, **settings) -> tuple[TritonBpOsdDecoder, BpOsdDecoder]:
    return TritonBpOsdDecoder(h, BpOsdParams(**settings)), BpOsdDecoder(h, **settings)


# ---- the decoder against bpod.c ------------------------------------------------------------------


@pytest.mark.parametrize("p", RATES)
@pytest.mark.parametrize("name", SMALL_CODES)
def test_min_sum_osd0_is_bit_exact(name, p):
    """Min-sum + OSD-0: the same correction, status, iteration count and posterior LLRs, bit
    for bit, on every shot (the LLRs only after BP ran: the zero syndrome skips it)."""
    code = codes.named_code(name)
    osd = 0
    for which, h in (("hx", code.hx), ("hz", code.hz)):
        mine, ref = pair(h, bp_method="min_sum", osd_method="osd0", error_rate=p)
        for i, s in enumerate(nonzero_syndromes(h, p, 14, seed=seed_of(name, p, which))):
            got, want = mine.decode(s), ref.decode(s)
            where = f"{name} {which} p={p} shot {i} syndrome {s.tolist()}"
            assert np.array_equal(got, want), f"{where}: {got.tolist()} != {want.tolist()}"
            assert mine.last_status == ref.last_status, where
            assert mine.iterations == ref.iterations, where
            assert np.array_equal(mine.log_prob_ratios.view(np.int64), ref.log_prob_ratios.view(np.int64)), where
            assert np.array_equal(gf2(h, got), s), where
            osd += mine.last_status == triton_bp.OSD
        assert not mine.decode(np.zeros(h.shape[0], np.uint8)).any() and mine.iterations == 0
    if p == 0.1 and name != "steane":
        assert osd, f"{name}: no shot reached OSD at p={p}; the test would not exercise it"


def test_product_sum_osd_cs_agrees():
    """Product-sum + OSD-CS (order 3 or 4): >= 99% identical corrections, and every
    correction satisfies its syndrome."""
    total = same = osd = 0
    notes = []
    for name in SMALL_CODES:
        code = codes.named_code(name)
        order = 3 if code.n < 20 else 4
        for p in RATES:
            for which, h in (("hx", code.hx), ("hz", code.hz)):
                mine, ref = pair(h, bp_method="product_sum", osd_method="osd_cs", osd_order=order, error_rate=p)
                for s in nonzero_syndromes(h, p, 10, seed=seed_of(name, p, which, "ps")):
                    got = mine.decode(s)
                    assert np.array_equal(gf2(h, got), s), f"{name} {which} p={p}: correction misses the syndrome"
                    total += 1
                    same += np.array_equal(got, ref.decode(s))
                    osd += mine.last_status == triton_bp.OSD
                    if not np.array_equal(got, ref.decode(s)):
                        notes.append(f"{name} {which} p={p} {s.tolist()}")
    assert same >= 0.99 * total, f"{same}/{total} agree; differ: {notes}"
    assert osd >= 10, f"only {osd} shots reached OSD"


def test_gross_code_any_size():
    """The [[144,12,12]] gross code (72 x 144 checks, past one 64-bit word either way): min-sum
    + OSD-0 bit for bit and product-sum + OSD-CS agreeing, at a rate where OSD runs."""
    code = codes.named_code("gross")
    h = code.hz
    mine, ref = pair(h, bp_method="min_sum", osd_method="osd0", error_rate=0.1)
    osd = 0
    for s in nonzero_syndromes(h, 0.1, 20, seed=144):
        got = mine.decode(s)
        assert np.array_equal(got, ref.decode(s)) and mine.last_status == ref.last_status
        assert np.array_equal(gf2(h, got), s)
        osd += mine.last_status == triton_bp.OSD
    assert osd >= 8, osd
    mine, ref = pair(code.hx, bp_method="product_sum", osd_method="osd_cs", osd_order=4, error_rate=0.1)
    same = 0
    shots = nonzero_syndromes(code.hx, 0.1, 8, seed=12)
    for s in shots:
        got = mine.decode(s)
        assert np.array_equal(gf2(code.hx, got), s)
        same += np.array_equal(got, ref.decode(s))
    assert same >= len(shots) - 1  # >= 99% cannot be asked of 6 shots; all agree in the interpreter


CORNER_CASES = [
    # m > n (more checks than bits), adaptive min-sum scaling, max_iter 0 (= n), OSD-CS
    ((30, 20, 0.2), {"bp_method": "min_sum", "osd_method": "osd_cs", "osd_order": 3, "ms_scaling_factor": 0.0,
                     "max_iter": 0}),
    # OSD-E with every column a pivot (no candidates beyond OSD-0)
    ((30, 20, 0.25), {"bp_method": "min_sum", "osd_method": "osd_e", "osd_order": 2, "max_iter": 2}),
    # OSD-E on a short, wide matrix
    ((12, 40, 0.15), {"bp_method": "product_sum", "osd_method": "osd_e", "osd_order": 3, "max_iter": 5}),
    # two words per packed row (n = 130), a scaling not exact in float32
    ((70, 130, 0.04), {"bp_method": "min_sum", "osd_method": "osd_cs", "osd_order": 4, "ms_scaling_factor": 0.9,
                       "max_iter": 6}),
    # BP alone: its hard decision when it fails
    ((65, 66, 0.05), {"bp_method": "min_sum", "osd_method": "none", "max_iter": 4}),
    # per-bit channel probabilities (costs no longer equal: the order of the cost sum matters)
    ((20, 70, 0.1), {"bp_method": "min_sum", "osd_method": "osd_cs", "osd_order": 5, "channel": True, "max_iter": 3}),
]


@pytest.mark.parametrize("shape, settings", CORNER_CASES, ids=lambda v: str(v) if isinstance(v, tuple) else None)
def test_random_matrices_match_c(shape, settings):
    """Random matrices (one check empty) and arbitrary syndromes, some outside H's column
    space (OSD-0 fails and BP's hard decision is returned, as in C): identical results."""
    m, n, density = shape
    rng = np.random.default_rng(m * 1000 + n)
    h = (rng.random((m, n)) < density).astype(np.uint8)
    h[0] = 0
    settings = dict(settings)
    if settings.pop("channel", False):
        settings["channel_probs"] = tuple(rng.uniform(0.01, 0.2, n))
    else:
        settings["error_rate"] = 0.07
    mine, ref = pair(h, **settings)
    statuses = set()
    for i in range(9):
        s = (rng.random(m) < 0.3).astype(np.uint8) if i % 3 == 0 else gf2(h, rng.random(n) < 0.07)
        packed = np.packbits(s, bitorder="little").tobytes()
        assert mine.decode_packed(packed) == ref.decode_packed(packed), f"shot {i}"
        assert (mine.last_status, mine.iterations) == (ref.last_status, ref.iterations), f"shot {i}"
        statuses.add(mine.last_status)
    assert len(statuses) >= 2, statuses


def test_candidates_in_several_launches():
    """OSD-CS candidates evaluated a few at a time (a tiny scratch): the same winner, also when
    it lies in an earlier launch than the last."""
    h = codes.named_code("toric-4").hz
    mine, ref = pair(h, bp_method="min_sum", osd_method="osd_cs", osd_order=4, error_rate=0.1, max_iter=2)
    mine._scratch_rows = 5  # white box: force many launches of the candidate kernel
    osd = 0
    for s in nonzero_syndromes(h, 0.12, 10, seed=5):
        assert np.array_equal(mine.decode(s), ref.decode(s))
        osd += mine.last_status == triton_bp.OSD
    assert osd >= 3, osd


def test_decoder_input_checks():
    h = codes.named_code("steane").hz
    dec = TritonBpOsdDecoder(h, BpOsdParams(error_rate=0.05), device="cpu")
    assert dec.decode(np.array([1, 0, 0])).tolist() == [1, 0, 0, 0, 0, 0, 0]
    with pytest.raises(ValueError, match="vector of 3 entries"):
        dec.decode(np.zeros(4, np.uint8))
    with pytest.raises(ValueError, match="not 0 or 1"):
        dec.decode(np.array([0, 2, 0]))
    with pytest.raises(ValueError, match="2 bytes.*3 checks"):
        dec.decode_packed(b"\x00\x00")
    with pytest.raises(ValueError, match="beyond its 3 checks"):
        dec.decode_packed(b"\x08")
    with pytest.raises(TypeError, match="BpOsdParams"):
        TritonBpOsdDecoder(h, {"error_rate": 0.05})
    with pytest.raises(ValueError, match="choose 'cuda'"):
        TritonBpOsdDecoder(h, device="meta")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="no GPU found"):
            TritonBpOsdDecoder(h, device="cuda")


# ---- the coprocessor function --------------------------------------------------------------------


def test_css_function_through_bound_function():
    code = codes.named_code("hgp-rep-5")
    settings = {"bp_method": "min_sum", "osd_method": "osd_cs", "osd_order": 3, "error_rate": 0.08}
    fn = css_bp_decoder(code.hx, code.hz, platform="triton", **settings)
    assert isinstance(fn, CoprocessorFunction) and fn.is_python and fn.decoder_ids == (0, 1)
    assert fn.name == "bposd" and fn.reply_bits == code.n == code.hx.shape[1]
    rng = np.random.default_rng(3)
    with BoundFunction(fn) as mine, BoundFunction(css_bp_decoder(code.hx, code.hz, **settings)) as ref:
        for _ in range(6):
            e = rng.random(code.n) < 0.08
            for decoder_id, h in ((0, code.hx), (1, code.hz)):
                payload = np.packbits(gf2(h, e), bitorder="little").tobytes()
                reply = mine(decoder_id, payload)
                assert len(reply) == (code.n + 7) // 8
                assert reply == ref(decoder_id, payload)
        with pytest.raises(FunctionError):
            mine(0, bytes(len(payload) + 1))  # wrong syndrome length: an error reply
        with pytest.raises(FunctionError):
            mine(2, payload)  # no such decoder
        assert mine(1, bytes(len(payload))) == bytes((code.n + 7) // 8)  # still serving


def test_css_function_in_a_memcpy_thread_session():
    code = codes.named_code("hgp13")
    settings = {"osd_method": "osd_cs", "osd_order": 2, "error_rate": 0.1}
    fn = css_bp_decoder(code.hx, code.hz, platform="triton", **settings)
    key = f"bltriton-{uuid.uuid4().hex[:12]}"
    in_bytes, out_bytes = 8, (code.n + 7) // 8  # room for a too-long syndrome to reach the function
    with Session.open("memcpy", "coprocessor", key, functions=[fn], runs_in="thread"), \
            Session.open("memcpy", "controller", key, config="timeout_ms=60000", in_bytes=in_bytes,
                         out_bytes=out_bytes) as ctl, \
            BoundFunction(css_bp_decoder(code.hx, code.hz, **settings)) as ref:
        rng = np.random.default_rng(11)
        for _ in range(5):
            e = rng.random(code.n) < 0.1
            for decoder_id, h in ((0, code.hx), (1, code.hz)):
                payload = np.packbits(gf2(h, e), bitorder="little").tobytes()
                assert ctl.round(payload, decoder_id) == ref(decoder_id, payload)
        with pytest.raises(FunctionError):
            ctl.round(b"\x00\x00", 0)  # 6 checks take 1 byte: the round fails, the session lives on
        payload = np.packbits(gf2(code.hz, np.eye(code.n, dtype=np.uint8)[4]), bitorder="little").tobytes()
        assert ctl.round(payload, 1) == ref(1, payload)


# ---- user-written kernels ----------------------------------------------------------------------


@triton.jit
def steane_kernel(syndrome_ptr, correction_ptr, m, n):
    """Minimum-weight Steane lookup: syndrome (s0, s1, s2) -> index s0*4 + s1*2 + s2 -> the
    qubit [-1, 6, 4, 5, 0, 3, 1, 2][index] to flip (-1: none)."""
    s0 = tl.load(syndrome_ptr + 0).to(tl.int32)
    s1 = tl.load(syndrome_ptr + 1).to(tl.int32)
    s2 = tl.load(syndrome_ptr + 2).to(tl.int32)
    index = s0 * 4 + s1 * 2 + s2
    qubit = tl.where(index == 1, 6,
            tl.where(index == 2, 4,
            tl.where(index == 3, 5,
            tl.where(index == 4, 0,
            tl.where(index == 5, 3,
            tl.where(index == 6, 1,
            tl.where(index == 7, 2, -1)))))))  # fmt: skip
    tl.store(correction_ptr + tl.maximum(qubit, 0), 1, mask=qubit >= 0)


def test_user_steane_kernel_matches_builtin():
    fn = triton_decoder((steane_kernel, steane_kernel), m=3, n=7, name="steane-triton")
    assert fn.decoder_ids == (0, 1) and fn.is_python and fn.name == "steane-triton" and fn.reply_bits == 7
    with BoundFunction(fn) as mine, BoundFunction(steane()) as ref:
        for decoder_id in (0, 1):
            for s in range(8):
                assert mine(decoder_id, bytes([s])) == ref(decoder_id, bytes([s])), (decoder_id, s)
        # and the lookup is a decoder: every correction reproduces its syndrome
        h = codes.named_code("steane").hz
        for s in range(8):
            bits = np.unpackbits(np.frombuffer(mine(0, bytes([s])), np.uint8), count=7, bitorder="little")
            assert np.packbits(gf2(h, bits), bitorder="little")[0] == s
        with pytest.raises(FunctionError):
            mine(0, b"\x00\x00")  # wrong length
        with pytest.raises(FunctionError):
            mine(0, b"\x08")  # a bit beyond the 3 checks
        with pytest.raises(FunctionError):
            mine(2, b"\x01")  # no kernel for decoder_id 2


def test_user_kernel_single_and_platforms():
    one = triton_decoder(steane_kernel, m=3, n=7, platform="cpu")
    assert one.decoder_ids == (0,)
    with BoundFunction(one) as fn:
        assert fn(0, b"\x01") == b"\x01"  # s0 alone: index 4, qubit 0
        assert fn(0, b"\x04") == b"\x40"  # s2 alone: index 1, qubit 6
    assert triton_decoder(steane_kernel, m=3, n=7, platform=None).decoder_ids == (0,)
    if not torch.cuda.is_available():
        for platform in ("cuda", "hip"):
            with pytest.raises(RuntimeError, match="no GPU found"):
                triton_decoder(steane_kernel, m=3, n=7, platform=platform)


def test_user_kernel_errors():
    with pytest.raises(ValueError, match="one Triton kernel or a pair"):
        triton_decoder((steane_kernel, steane_kernel, steane_kernel), m=3, n=7)
    with pytest.raises(ValueError, match="one Triton kernel or a pair"):
        triton_decoder((), m=3, n=7)
    with pytest.raises(TypeError, match="not a Triton kernel"):
        triton_decoder(lambda s, c, m, n: None, m=3, n=7)
    with pytest.raises(TypeError, match="not a Triton kernel"):
        triton_decoder((steane_kernel, "steane"), m=3, n=7)
    with pytest.raises(ValueError, match="platform='tpu'"):
        triton_decoder(steane_kernel, m=3, n=7, platform="tpu")
    with pytest.raises(ValueError, match="m=0"):
        triton_decoder(steane_kernel, m=0, n=7)
    with pytest.raises(ValueError, match="one per kernel"):
        triton_decoder(steane_kernel, m=(3, 3), n=7)
    with pytest.raises(ValueError, match="n=True"):
        triton_decoder(steane_kernel, m=3, n=True)


# ---- no GPU and no interpreter; the package import -----------------------------------------------

_NO_INTERPRETER = """
    import sys
    import backline_decoder_bpod
    assert "torch" not in sys.modules and "triton" not in sys.modules, "the package imported torch/triton"
    from backline_decoder_bpod import codes, css_bp_decoder
    from backline_decoder_bpod.triton_bp import INTERPRETED, TritonBpOsdDecoder, triton_decoder
    import triton
    assert not INTERPRETED
    h = codes.named_code("steane").hz
    for make in (lambda: TritonBpOsdDecoder(h), lambda: TritonBpOsdDecoder(h, device="cpu"),
                 lambda: css_bp_decoder(h, h, platform="triton")):
        try:
            make()
        except RuntimeError as exc:
            assert "TRITON_INTERPRET=1" in str(exc), exc
        else:
            raise AssertionError("no error without a GPU or the interpreter")

    @triton.jit
    def k(syndrome_ptr, correction_ptr, m, n):
        pass

    for platform in (None, "cpu"):
        try:
            triton_decoder(k, m=3, n=7, platform=platform)
        except RuntimeError as exc:
            assert "TRITON_INTERPRET=1" in str(exc), exc
        else:
            raise AssertionError(platform)
    print("ok")
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: the kernels would run on it")
def test_without_gpu_or_interpreter_says_what_to_set(tmp_path):
    script = tmp_path / "no_interpreter.py"  # @triton.jit needs its source in a file
    script.write_text(textwrap.dedent(_NO_INTERPRETER))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120,
                            check=False)
    assert result.returncode == 0 and "ok" in result.stdout, result.stdout + result.stderr


def test_package_exports_triton_decoder_lazily():
    import backline_decoder_bpod as pkg

    assert "triton_decoder" not in vars(pkg)  # not imported with the package: it needs torch
    assert pkg.triton_decoder is triton_decoder


def test_llr_order_is_bpod_sort():
    """Stable ascending, -0.0 equal to +0.0; with nan, bpod.c's merge sort itself."""
    llr = torch.tensor([0.5, 0.0, -1.0, -0.0, 0.5, 0.0, -1.0], dtype=torch.float64)
    assert triton_bp.llr_order(llr).tolist() == [2, 6, 1, 3, 5, 0, 4]
    rng = np.random.default_rng(2)
    values = rng.integers(-3, 4, 50).astype(np.float64)
    assert triton_bp.llr_order(torch.from_numpy(values)).tolist() == np.argsort(values, kind="stable").tolist()
    assert triton_bp._merge_order(values.tolist()) == np.argsort(values, kind="stable").tolist()
    # nan is neither less nor greater than anything: it stays where the merges leave it (a
    # plain sort would put it last: [2, 1, 0])
    nan = float("nan")
    assert triton_bp.llr_order(torch.tensor([nan, 2.0, 1.0], dtype=torch.float64)).tolist() == [0, 2, 1]
    assert triton_bp.llr_order(torch.tensor([2.0, nan, 1.0, 0.0], dtype=torch.float64)).tolist() == [3, 2, 0, 1]


# ---- the GPU path, compiled without a GPU ------------------------------------------------------

_COMPILE = '''
    """Compile every kernel for CUDA (sm_90) and HIP (gfx942) ahead of time: no GPU is needed
    to lower to PTX / AMDGCN, so this checks the GPU code path short of running it."""
    import sys

    import triton
    import triton.language as tl
    from triton.backends import backends
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from backline_decoder_bpod import triton_bp as t

    assert not t.INTERPRETED


    @triton.jit
    def steane_kernel(syndrome_ptr, correction_ptr, m, n):
        s0 = tl.load(syndrome_ptr + 0).to(tl.int32)
        s1 = tl.load(syndrome_ptr + 1).to(tl.int32)
        s2 = tl.load(syndrome_ptr + 2).to(tl.int32)
        index = s0 * 4 + s1 * 2 + s2
        qubit = tl.where(index == 1, 6, tl.where(index == 2, 4, tl.where(index == 3, 5, tl.where(
            index == 4, 0, tl.where(index == 5, 3, tl.where(index == 6, 1, tl.where(index == 7, 2, -1)))))))
        tl.store(correction_ptr + tl.maximum(qubit, 0), 1, mask=qubit >= 0)


    I, F, U, W = "*i64", "*fp64", "*u8", "*i32"
    KERNELS = [
        (t._ms_check_kernel, dict(row_ptr=I, b2c=F, c2b=F, syndrome=U, alphas=F, it="i32", m="i32"),
         dict(BLOCK=128, DEG=8)),
        (t._ps_check_kernel, dict(row_ptr=I, b2c=F, c2b=F, tbuf=F, pre=F, syndrome=U, m="i32", max_deg="i32"),
         dict(BLOCK=128)),
        (t._bit_kernel, dict(col_ptr=I, col_edges=I, init_llr=F, c2b=F, b2c=F, pfx=F, llr=F, hard=U, n="i32",
                             max_deg="i32"), dict(BLOCK=128)),
        (t._syndrome_kernel, dict(row_ptr=I, col_idx=I, hard=U, syndrome=U, flags=W, it="i32", m="i32"),
         dict(BLOCK=128, DEG=8)),
        (t._pack_rows_kernel, dict(row_ptr=I, col_idx=I, inv_order=I, R=I, m="i32", WN="i32"), dict(BLOCK=128, DEG=8)),
        (t._osd_eliminate_kernel, dict(R=I, syn=I, row_piv=I, nonpivots=I, counts=I, m="i32", n="i32", WN="i32"),
         dict(BLOCK_M=256, BLOCK_W=16)),
        (t._osd_candidates_kernel, dict(flips=I, C="i32", F="i32", nonpivots=I, order=I, R=I, syn=I, row_piv=I,
                                        cost=F, xs=U, out_cost=F, out_ok=W, m="i32", n="i32", WN="i32"),
         dict(BLOCK_C=1, BLOCK_M=256, BLOCK_N=256)),
        (steane_kernel, dict(syndrome_ptr=U, correction_ptr=U, m="i32", n="i32"), {}),
    ]
    targets = {"nvidia": GPUTarget("cuda", 90, 32), "amd": GPUTarget("hip", "gfx942", 64)}
    for backend, target in targets.items():
        if backend not in backends:
            print(f"skip {backend}")
            continue
        for fn, signature, constexprs in KERNELS:
            signature = dict(signature, **{name: "constexpr" for name in constexprs})
            compiled = triton.compile(ASTSource(fn, signature, constexprs), target=target,
                                      options={"enable_fp_fusion": False})
            assert compiled.asm, fn.__name__
        print(f"compiled {backend}")
'''


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: the decoder tests ran the kernels on it")
def test_kernels_compile_for_cuda_and_hip(tmp_path):
    script = tmp_path / "compile_kernels.py"
    script.write_text(textwrap.dedent(_COMPILE))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")
    env["TRITON_DEFAULT_FP_FUSION"] = "0"
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "compiled nvidia" in result.stdout, result.stdout + result.stderr
