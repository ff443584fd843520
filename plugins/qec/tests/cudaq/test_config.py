"""CUDA-Q QEC decoder configs: a config cudaq-qec wrote, each type's mapping, bad input, export, the command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import stim

from backline_core import BoundFunction, InvalidArgumentError, plugins
from backline_core.sdk import dem_matrices
from backline_qec import SlidingWindowDecoder
from backline_qec.cudaq.config import MAX_DECODERS, export_config, load_config, read_config

DATA = Path(__file__).parent / "data" / "surface_d3_r2_cudaq.yaml"
BACKLINE = str(Path(sys.executable).with_name("backline"))


def surface(rounds: int = 2) -> stim.Circuit:
    return stim.Circuit.generated("surface_code:rotated_memory_z", distance=3, rounds=rounds,
                                  after_clifford_depolarization=0.004, before_measure_flip_probability=0.004,
                                  after_reset_flip_probability=0.004)


@pytest.fixture(scope="module")
def dets() -> np.ndarray:
    return surface().compile_detector_sampler(seed=3).sample(300).astype(np.uint8)


def test_real_cudaq_config(dets: np.ndarray) -> None:
    cfgs = read_config(str(DATA))
    assert [(c.id, c.type, c.decoder, c.params) for c in cfgs] == [
        (0, "single_error_lut", "lut", {"depth": 1}), (1, "multi_error_lut", "lut", {"depth": 2}),
        (2, "pymatching", "pymatching", {})]
    m = dem_matrices(surface().detector_error_model(decompose_errors=True))
    for c in cfgs[:2]:  # the LUTs carry the core's matrices of the DEM, which cudaq wrote out
        assert np.array_equal(c.H, m.h) and np.array_equal(c.O, m.o) and c.priors is None
        assert np.array_equal(c.D, np.eye(16, dtype=np.uint8)) and c.num_measurements == 16
    pm = cfgs[2]
    assert (pm.H.sum(axis=0) <= 2).all() and pm.priors is not None and pm.block_size == len(pm.priors)
    for c in cfgs:
        direct = plugins.get("decoder", c.decoder).build_from_matrices(c.H, c.O, c.priors, **c.params)
        assert np.array_equal(c.build().decode_batch(dets), direct.decode_batch(dets))


def _yaml(kind: str, args: str = "", h: str = "[ 0, 1, -1, 1, 2, -1 ]", extra: str = "", ident: int = 0,
          block: int = 3, rows: int = 2, d: str = "[ 0, -1, 1, -1 ]") -> str:
    head = (f"  - id: {ident}\n    type: {kind}\n    block_size: {block}\n    syndrome_size: {rows}\n"
            f"    H_sparse: {h}\n    O_sparse: [ 0, -1 ]\n    D_sparse: {d}\n{extra}")
    return head + (f"    decoder_custom_args:\n{args}" if args else "")


def _one(kind: str, args: str = "", **kw: object) -> str:
    return "decoders:\n" + _yaml(kind, args, **kw)


REP = np.array([[1, 1, 0], [0, 1, 1]], dtype=np.uint8)
ALL = np.array(list(np.ndindex(2, 2)), dtype=np.uint8)


@pytest.mark.parametrize("kind,args,decoder,params", [
    ("single_error_lut", "", "lut", {"depth": 1}),
    ("multi_error_lut", "      lut_error_depth: 2\n", "lut", {"depth": 2}),
    ("pymatching", "      error_rate_vec: [ 0.1, 0.2, 0.3 ]\n      merge_strategy: smallest_weight\n", "pymatching", {}),
    ("nv-qldpc-decoder", "      error_rate_vec: [ 0.1, 0.2, 0.3 ]\n      max_iterations: 12\n      bp_method: 1\n"
     "      scale_factor: 0.5\n      n_threads: 128\n", "bp",
     {"max_iter": 12, "bp_method": "min_sum", "ms_scaling_factor": 0.5}),
    ("nv-qldpc-decoder", "      error_rate_vec: [ 0.1, 0.2, 0.3 ]\n      use_osd: true\n      osd_method: 3\n"
     "      osd_order: 1\n", "bposd",
     {"max_iter": 30, "bp_method": "product_sum", "ms_scaling_factor": 1.0, "osd_method": "osd_cs", "osd_order": 1}),
])
def test_type_mapping(kind: str, args: str, decoder: str, params: dict) -> None:
    (c,) = load_config(_one(kind, args))
    assert (c.decoder, c.params) == (decoder, params)
    assert np.array_equal(c.H, REP) and np.array_equal(c.O, [[1, 0, 0]])
    direct = plugins.get("decoder", decoder).build_from_matrices(REP, c.O, c.priors, **params)
    fn = c.build()
    assert np.array_equal(fn.decode_batch(ALL), direct.decode_batch(ALL))
    with BoundFunction(fn) as bound:  # a coprocessor's round: the packed syndrome in, packed flips out
        for s in ALL:
            assert bound(0, np.packbits(s, bitorder="little").tobytes()) == \
                np.packbits(direct.decode_batch(s[None]), bitorder="little").tobytes()


def test_sliding_window(dets: np.ndarray) -> None:
    circuit = surface(rounds=4)
    dem = circuit.detector_error_model(decompose_errors=True)
    m = dem_matrices(dem)
    rows = " ".join(f"{x}," for r in m.h for x in (*np.flatnonzero(r), -1)).rstrip(",")
    obs = " ".join(f"{x}," for r in m.o for x in (*np.flatnonzero(r), -1)).rstrip(",")
    text = ("decoders:\n  - id: 0\n    type: sliding_window\n"
            f"    block_size: {m.num_columns}\n    syndrome_size: {m.num_detectors}\n"
            f"    H_sparse: [ {rows} ]\n    O_sparse: [ {obs} ]\n    D_sparse: [ ]\n"
            "    decoder_custom_args:\n      window_size: 3\n      step_size: 1\n      num_syndromes_per_round: 8\n"
            f"      error_rate_vec: {[float(p) for p in m.priors]}\n      inner_decoder_name: multi_error_lut\n"
            "      inner_decoder_params:\n        lut_error_depth: 1\n")
    # stim's rounds are 4, 8, 8, 8, 4 detectors: rows // 8 puts the first two rounds together
    (c,) = load_config(text)
    assert c.window == {"window": 3, "commit": 1, "syndromes_per_round": 8} and c.D is None
    shots = circuit.compile_detector_sampler(seed=4).sample(200).astype(np.uint8)
    direct = SlidingWindowDecoder.from_matrices(m.h, m.o, m.priors, np.arange(m.num_detectors) // 8, "lut",
                                                window=3, commit=1, depth=1)
    fn = c.build()
    assert np.array_equal(fn.decode_batch(shots), direct.decode_batch(shots))
    with BoundFunction(fn) as bound:
        assert bound(0, np.packbits(shots[5], bitorder="little").tobytes()) == \
            np.packbits(direct.decode_batch(shots[5:6]), bitorder="little").tobytes()


def test_window_matrices_equal_circuit() -> None:
    """The matrices build path decodes as the circuit path does with the circuit's own rounds."""
    circuit = surface(rounds=4)
    shots = circuit.compile_detector_sampler(seed=5).sample(200).astype(np.uint8)
    by_circuit = SlidingWindowDecoder(circuit, "lut", window=3, commit=1)
    m = dem_matrices(by_circuit.dem)
    by_matrices = SlidingWindowDecoder.from_matrices(m.h, m.o, m.priors, by_circuit.rounds, "lut", window=3, commit=1)
    assert np.array_equal(by_matrices.decode_batch(shots), by_circuit.decode_batch(shots))


@pytest.mark.parametrize("text,words", [
    ("decoders: [", "not YAML"),
    ("foo: 1", "top-level 'decoders:'"),
    ("decoders: []\n", "non-empty list"),
    ("decoders:\n" + _yaml("single_error_lut", extra="    bogus: 1\n"), "decoder id 0: bogus: unknown key"),
    ("decoders:\n  - id: 0\n    type: single_error_lut\n", "decoder id 0: block_size: missing"),
    (_one("single_error_lut", block=-1), "block_size: -1 must be a whole number"),
    (_one("single_error_lut", rows=3), "H_sparse: has 2 rows but syndrome_size is 3"),
    (_one("single_error_lut", h="[ 0, 3, -1, 1, -1 ]"), "H_sparse: row 0 names column 3, but block_size is 3"),
    (_one("single_error_lut", h="[ 0, 1, -1, 1 ]"), "H_sparse: the last row"),
    (_one("single_error_lut", h="[ 0, x, -1 ]"), "H_sparse: entry 1 is 'x'"),
    (_one("single_error_lut", h="[ 0, 0, -1, 1, -1 ]"), "names column 0 twice"),
    (_one("single_error_lut", d="[ 0, -1 ]"), "D_sparse: has 1 rows but syndrome_size is 2"),
    (_one("single_error_lut", extra="    dem_chunks: {}\n"), "dem_chunks: per-round DEM pieces are not supported"),
    ("decoders:\n" + _yaml("single_error_lut") + _yaml("single_error_lut"), "decoder id 0: id: used twice"),
    ("decoders:\n" + _yaml("single_error_lut", ident=1), "decoder id 1: id: the ids of 1 decoders must be 0..0"),
    ("decoders:\n" + "".join(_yaml("single_error_lut", ident=i) for i in range(MAX_DECODERS + 1)),
     f"{MAX_DECODERS + 1} decoders; a config holds at most {MAX_DECODERS}"),
    (_one("tensor_network_decoder"), "type: 'tensor_network_decoder' is not a type Backline maps; known: "),
    (_one("single_error_lut", "      lut_error_depth: 2\n"), "decoder_custom_args.lut_error_depth: unknown"),
    (_one("multi_error_lut", "      lut_error_depth: two\n"), "lut_error_depth: 'two' must be a whole number"),
    (_one("pymatching", "      merge_strategy: independent\n"), "merge_strategy: 'independent' is not supported"),
    (_one("pymatching", "      error_rate_vec: [ 0.1 ]\n"), "error_rate_vec: has 1 entries but block_size is 3"),
    (_one("pymatching", "      error_rate_vec: [ 0.1, 0, 0.2 ]\n"), "error_rate_vec: entry 1 is 0.0"),
    (_one("nv-qldpc-decoder", "      bp_method: 3\n"), "bp_method: 3 is not supported; Backline maps 0 (product_sum)"),
    (_one("nv-qldpc-decoder", "      gamma0: 0.5\n"), "decoder_custom_args.gamma0: unknown to nv-qldpc-decoder"),
    (_one("nv-qldpc-decoder", "      proc_float: fp32\n"), "proc_float: 'fp32' is not supported"),
    (_one("sliding_window", "      window_size: 2\n"), "decoder_custom_args.error_rate_vec: missing"),
])
def test_bad_input(text: str, words: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        load_config(text, source="c.yaml")
    message = str(info.value)
    assert words in message and "\n" not in message and message.startswith("c.yaml: ")


@pytest.mark.parametrize("decoder,params", [
    ("lut", {}), ("lut", {"depth": 2}), ("pymatching", {}), ("bp", {"max_iter": 7, "bp_method": "product_sum"}),
    ("bposd", {"osd_method": "osd_e", "osd_order": 2, "ms_scaling_factor": 0.75}),
])
def test_export_round_trip(decoder: str, params: dict, dets: np.ndarray) -> None:
    circuit = surface()
    text = export_config(circuit, decoder, params=params, decoder_id=0)
    (c,) = load_config(text)
    assert c.decoder == decoder
    expected = plugins.get("decoder", decoder).check_params(params)
    assert {k: expected[k] for k in c.params} == c.params
    dem = circuit.detector_error_model(decompose_errors=decoder == "pymatching")
    if decoder != "pymatching":
        m = dem_matrices(dem)
        assert np.array_equal(c.H, m.h) and np.array_equal(c.O, m.o)
        assert c.priors is None if decoder == "lut" else np.array_equal(c.priors, m.priors)
    assert np.array_equal(c.D, np.eye(c.syndrome_size, dtype=np.uint8))
    direct = plugins.get("decoder", decoder).build_from_matrices(c.H, c.O, c.priors, **params)
    assert np.array_equal(c.build().decode_batch(dets), direct.decode_batch(dets))
    if decoder == "pymatching":  # the edges of the DEM's decomposition: matching as from the DEM itself
        from_dem = plugins.get("decoder", "pymatching").build_from_dem(dem)
        assert np.array_equal(c.build().decode_batch(dets), from_dem.decode_batch(dets))


def test_export_refusals() -> None:
    dem = surface().detector_error_model()
    for decoder, params, words in [("ldpc-bposd", {}, "has no CUDA-Q type"),
                                   ("pymatching", {"enable_correlations": True}, "enable_correlations"),
                                   ("bposd", {"max_iter": 0}, "max_iter=0"), ("lut", {"deep": 1}, "unknown parameter")]:
        with pytest.raises(InvalidArgumentError, match=words):
            export_config(dem, decoder, params=params)


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([BACKLINE, "qec", "export-config", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_command(tmp_path: Path) -> None:
    circuit = surface()
    (tmp_path / "c.stim").write_text(str(circuit))
    (tmp_path / "m.dem").write_text(str(circuit.detector_error_model()))
    done = _run("c.stim", "--decoder", "lut", "--decoder-param", "depth=2", "--out", "c.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (c,) = read_config(str(tmp_path / "c.yaml"))
    assert (c.type, c.params) == ("multi_error_lut", {"depth": 2})
    done = _run("m.dem", "--decoder", "bposd", "--decoder-param", "osd_order=1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (c,) = load_config(done.stdout)
    assert c.type == "nv-qldpc-decoder" and c.params["osd_order"] == 1
    # the command of docs/cudaq-interop.md, as written there
    (tmp_path / "memory.stim").write_text(str(circuit))
    env = {**os.environ, "PATH": f"{Path(BACKLINE).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = "backline qec export-config memory.stim --decoder bposd --decoder-param osd_order=2 --out config.yaml"
    done = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert read_config(str(tmp_path / "config.yaml"))[0].params["osd_order"] == 2
    for args, words in [(("missing.stim", "--decoder", "lut"), "no such file"),
                        (("m.dem", "--decoder", "lut", "--decoder-param", "depth=x"), "depth"),
                        (("m.dem", "--decoder", "echo"), "has no CUDA-Q type")]:
        done = _run(*args, cwd=tmp_path)
        assert done.returncode == 2 and words in done.stderr and done.stderr.count("\n") == 1, done.stderr
