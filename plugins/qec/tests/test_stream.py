"""Streaming: each round fed once to the engine on a coprocessor; the same predictions as the
window decoder offline, on every placement here; the engine's refusals; the command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import stim

from backline_core import BoundFunction, InvalidArgumentError, plugins
from backline_core.sdk import host_local_name
from backline_qec import SlidingWindowDecoder
from backline_qec.engine import Engine, encode_plan, engine_function
from backline_qec.stream import stream

DEM_DECODERS = [n for n in plugins.names("decoder") if plugins.get("decoder", n).from_dem is not None]
#: the decoders each test streams: the native ones and, where installed, a Python one
STREAMED = [n for n in ("lut", "bposd", "pymatching") if n in DEM_DECODERS]


def surface(d: int = 3, rounds: int = 6, p: float = 0.003) -> stim.Circuit:
    return stim.Circuit.generated("surface_code:rotated_memory_z", distance=d, rounds=rounds,
                                  after_clifford_depolarization=p, before_measure_flip_probability=p,
                                  after_reset_flip_probability=p)


@pytest.fixture(scope="module")
def shots() -> tuple[np.ndarray, np.ndarray]:
    dets, obs = surface().compile_detector_sampler(seed=8).sample(400, separate_observables=True)
    return dets.astype(np.uint8), obs.astype(np.uint8)


def places() -> list[tuple[str, str, dict[str, str]]]:
    out = [("memcpy", "thread", {}), ("memcpy", "process", {})]
    if plugins.names("executor") and _importable("backline_compiler"):  # the executor runs compiled code
        out.append(("memcpy", "executor", {}))
    if "ucx" in plugins.names("transport"):
        out += [("ucx", "process", {"tls": "shm"}), ("ucx", "process", {"tls": "tcp"})]
    return out


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


@pytest.mark.parametrize("name", STREAMED)
@pytest.mark.parametrize("transport, runs_in, args", places(), ids=lambda v: v if isinstance(v, str) else "")
def test_the_stream_predicts_what_the_window_decoder_does_offline(name: str, transport: str, runs_in: str,
                                                                 args: dict[str, str],
                                                                 shots: tuple[np.ndarray, np.ndarray]) -> None:
    dets, obs = shots
    sw = SlidingWindowDecoder(surface(), name, window=4, commit=2)
    offline = sw.decode_batch(dets)
    if runs_in == "executor" and any(d.is_python for d in sw.decoders):
        with pytest.raises(InvalidArgumentError, match="an executor runs native code only"):
            stream(surface(), name, detectors=dets, runs_in=runs_in, window=4, commit=2)
        return
    result = stream(surface(), name, detectors=dets, observables=obs, transport=transport, runs_in=runs_in,
                    transport_args=args, window=4, commit=2)
    assert (result.predictions == offline).all()
    assert result.logical_errors == int((offline != obs).any(axis=1).sum())
    report = result.to_json()
    assert report["shots"] == 400 and report["windows_per_shot"] == 3 and report["rounds"] == 7
    assert set(report["latency_ns"]) == {"p50", "p90", "p99", "p999", "max"}
    assert report["placement"] == {"transport": transport, "runs_in": runs_in, "init_args": args,
                                   "coprocessor": host_local_name("decoder")}
    json.dumps(report)


def test_the_whole_shot_as_one_window_equals_the_decoder_offline(shots: tuple[np.ndarray, np.ndarray]) -> None:
    dets, _ = shots
    for name in STREAMED:
        record = plugins.get("decoder", name)
        offline = record.build_from_dem(surface().detector_error_model(decompose_errors=record.decomposed_dem))
        assert (stream(surface(), name, detectors=dets).predictions == offline.decode_batch(dets)).all(), name


def test_the_whole_shot_equals_pymatching_and_ldpc_themselves(shots: tuple[np.ndarray, np.ndarray]) -> None:
    dets, _ = shots
    if "pymatching" in DEM_DECODERS:
        import pymatching

        matching = pymatching.Matching.from_detector_error_model(surface().detector_error_model(decompose_errors=True))
        assert (stream(surface(), "pymatching", detectors=dets).predictions == matching.decode_batch(dets)).all()
    if "bposd" in DEM_DECODERS and _importable("ldpc"):
        import ldpc
        from ldpc.ckt_noise.dem_matrices import detector_error_model_to_check_matrices

        params = {"max_iter": 20, "osd_method": "osd_cs", "osd_order": 3, "ms_scaling_factor": 0.625}
        m = detector_error_model_to_check_matrices(surface().detector_error_model(decompose_errors=False),
                                                   allow_undecomposed_hyperedges=True)
        ref = ldpc.BpOsdDecoder(m.check_matrix, error_channel=list(m.priors), bp_method="minimum_sum", **params)
        want = np.array([(m.observables_matrix @ ref.decode(s)) % 2 for s in dets], dtype=np.uint8)
        assert (stream(surface(), "bposd", detectors=dets, **params).predictions == want).all()


def test_a_paced_stream_reports_its_backlog_and_deadlines(shots: tuple[np.ndarray, np.ndarray]) -> None:
    result = stream(surface(), "lut", detectors=shots[0][:100], window=4, commit=2, cycle_us=1000.0,
                    reference=False)
    report = result.to_json()
    assert report["cycle_ns"] == 1_000_000 and report["backlog"]["max_pending_rounds"] >= 1
    assert 0 <= report["deadline_misses"] <= 300 and report["sustainable_cycle_ns"] > 0
    # a 1 ns cycle: no window is decoded within its two rounds
    fast = stream(surface(), "lut", detectors=shots[0][:20], window=4, commit=2, cycle_us=0.001, reference=False)
    assert fast.to_json()["deadline_misses"] == 20 * 3
    t, p = zip(*report["ler_at_deadline"])
    assert list(t) == sorted(t) and list(p) == sorted(p, reverse=True)


def _engine(name: str = "lut") -> tuple[Engine, SlidingWindowDecoder]:
    sw = SlidingWindowDecoder(surface(), name, window=4, commit=2)
    return Engine(encode_plan(sw), sw.decoders), sw


def test_the_engine_refuses_rounds_out_of_order_and_the_wrong_decoder_id() -> None:
    sw = SlidingWindowDecoder(surface(), "lut", window=4, commit=2)
    fn = engine_function(sw)
    assert fn.decoder_ids == (0,) and not fn.is_python  # native decoders: a native engine
    with BoundFunction(fn) as engine:
        round0 = bytes([0, 0]) + bytes(1)
        assert engine(0, round0) == b"\0"
        with pytest.raises(Exception, match="returned 2"):  # round 2 before round 1: QS_EORDER
            engine(0, bytes([2, 0]) + bytes(1))
        assert engine(0, round0) == b"\0"  # round 0 starts a shot again
        with pytest.raises(Exception, match="returned 2"):  # another decoder id
            engine(1, bytes([1, 0]) + bytes(1))
        with pytest.raises(Exception, match="returned 1"):  # a round of the wrong width: QS_EPAYLOAD
            engine(0, bytes([0, 0]) + bytes(5))
        with pytest.raises(Exception, match="returned 1"):
            engine(0, b"\0")


def test_the_python_built_engine_answers_as_the_native_one(shots: tuple[np.ndarray, np.ndarray]) -> None:
    from backline_core import CoprocessorFunction
    from backline_qec.engine import engine_init

    sw = SlidingWindowDecoder(surface(), "lut", window=4, commit=2)
    native = engine_function(sw)
    plan = encode_plan(sw)
    described = json.dumps([d.to_dict() for d in sw.decoders]).encode()
    python = CoprocessorFunction(name="qec-stream", python_init=engine_init,
                                 context=len(plan).to_bytes(4, "little") + plan + described)
    rounds = sw.rounds
    with BoundFunction(native) as a, BoundFunction(python) as b:
        for shot in shots[0][:50]:
            for r in range(sw.num_rounds):
                bits = np.packbits(shot[np.flatnonzero(rounds == r)], bitorder="little").tobytes()
                msg = r.to_bytes(2, "little") + bits
                assert a(0, msg) == b(0, msg)


def test_a_malformed_plan_is_refused() -> None:
    sw = SlidingWindowDecoder(surface(), "lut", window=4, commit=2)
    plan = encode_plan(sw)
    for bad in (plan[:20], b"XXXX" + plan[4:], plan[:-4]):
        with pytest.raises(InvalidArgumentError, match="refused its plan"):
            Engine(bad, sw.decoders)
    with pytest.raises(InvalidArgumentError, match="decoders were given"):
        Engine(plan, sw.decoders[:1])


@pytest.mark.parametrize("kwargs, says", [
    ({"window": 4}, "together"),
    ({"cycle_us": -1}, "cycle_us=-1"),
    ({"detectors": np.zeros((3, 5), np.uint8)}, "the circuit has 48 detectors"),
    ({"shots": 0}, "shots=0"),
    ({"no_such": 1}, "unknown parameter 'no_such'"),
    ({"controller_cpu": 4096}, "controller_cpu=4096: not a CPU this process may run on"),
    ({"coprocessor_cpu": "1"}, "coprocessor_cpu='1': not a CPU"),
    ({"coprocessor_cpu": 0, "runs_in": "controller-thread"}, "has no poller to pin"),
])
def test_bad_input_is_one_clear_error(kwargs: dict, says: str) -> None:
    with pytest.raises(InvalidArgumentError, match=says):
        stream(surface(), "lut", **kwargs)


def _backline(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-P", "-m", "backline_core", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def test_the_command_writes_predictions_a_report_and_a_plot(tmp_path: Path,
                                                            shots: tuple[np.ndarray, np.ndarray]) -> None:
    (tmp_path / "c.stim").write_text(str(surface()))
    dets, obs = shots
    (tmp_path / "d.b8").write_bytes(np.packbits(dets, axis=1, bitorder="little").tobytes())
    (tmp_path / "o.b8").write_bytes(np.packbits(obs, axis=1, bitorder="little").tobytes())
    proc = _backline("qec", "stream", "c.stim", "--decoder", "lut", "--detectors", "d.b8", "--observables", "o.b8",
                     "--window", "4", "--commit", "2", "--predictions", "p.b8", "--json", "r.json", "--plot", "r.png",
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "logical error rate" in proc.stdout and "reaction time" in proc.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    offline = SlidingWindowDecoder(surface(), "lut", window=4, commit=2).decode_batch(dets)
    predicted = np.unpackbits(np.frombuffer((tmp_path / "p.b8").read_bytes(), np.uint8).reshape(-1, 1), axis=1,
                              count=1, bitorder="little")
    assert (predicted == offline).all() and report["logical_errors"] == int((offline != obs).any(axis=1).sum())
    assert (tmp_path / "r.png").stat().st_size > 1000


@pytest.mark.parametrize("args, says", [
    (["nosuch.stim", "--decoder", "lut"], "no such file"),
    (["c.stim", "--decoder", "steane"], "does not build from a detector error model"),
    (["c.stim", "--decoder", "lut", "--window", "3", "--commit", "5"], "commit=5 is more than window=3"),
    (["c.stim", "--decoder", "lut", "--detectors", "odd.b8"], "not a whole number of shots"),
    (["c.stim", "--decoder", "lut", "--observables", "odd.b8"], "--observables goes with --detectors"),
    (["c.stim", "--decoder", "lut", "--decoder-param", "depth"], "is not KEY=VALUE"),
    (["c.stim", "--decoder", "lut", "--transport", "nosuch"], "nosuch"),
    (["bad.stim", "--decoder", "lut"], "not a stim circuit"),
    (["nocoords.stim", "--decoder", "lut"], "has no coordinates"),
])
def test_command_errors_are_one_line_and_status_2(tmp_path: Path, args: list[str], says: str) -> None:
    (tmp_path / "c.stim").write_text(str(surface()))
    (tmp_path / "odd.b8").write_bytes(b"12345")
    (tmp_path / "bad.stim").write_text("NOT_A_GATE 0\n")
    (tmp_path / "nocoords.stim").write_text("X_ERROR(0.1) 0\nM 0\nDETECTOR rec[-1]\nOBSERVABLE_INCLUDE(0) rec[-1]\n")
    proc = _backline("qec", "stream", *args, cwd=tmp_path)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not [p for p in os.listdir(tmp_path) if p.endswith((".json", ".png"))]


#: docs/streaming.md's command, run as written
DOC_COMMAND = "backline qec stream memory.stim --decoder pymatching --shots 2000 --seed 1 --window 6 --commit 3 --transport memcpy --runs-in process --cycle-us 2 --json report.json --plot report.png"  # noqa: E501


def test_the_documented_command(tmp_path: Path) -> None:
    if "pymatching" not in DEM_DECODERS:
        pytest.skip("the command names pymatching, which is not installed")
    (tmp_path / "memory.stim").write_text(str(surface(3, 9)))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(["bash", "-c", DOC_COMMAND], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["shots"] == 2000 and report["cycle_ns"] == 2000 and report["windows_per_shot"] == 3
    assert (tmp_path / "report.png").exists()


def test_a_cycle_shorter_than_pacing_holds_is_warned_and_the_achieved_cycle_reported(tmp_path: Path) -> None:
    (tmp_path / "c.stim").write_text(str(surface()))
    proc = _backline("qec", "stream", "c.stim", "--decoder", "lut", "--shots", "50", "--cycle-us", "0.01",
                     "--json", "r.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "warning: a 0.01 us cycle is shorter than busy-wait pacing holds" in proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["cycle_ns"] == 10 and report["achieved_cycle_ns"] > 10


def test_the_ler_interval_is_exact_at_no_and_at_all_errors() -> None:
    from backline_qec.stream import _wilson

    assert _wilson(0, 300)[0] == 0.0 and 0 < _wilson(0, 300)[1] < 0.02
    assert _wilson(300, 300)[1] == 1.0 and _wilson(300, 300)[0] > 0.98
    low, high = _wilson(10, 1000)
    assert low < 0.01 < high
    assert _wilson(None, 10) is None


def test_pinned_ends_predict_as_unpinned_and_leave_this_thread_as_it_was(shots: tuple[np.ndarray, np.ndarray]) -> None:
    import os

    before = os.sched_getaffinity(0)
    cpus = sorted(before)
    pinned = stream(surface(), "lut", detectors=shots[0][:50], window=4, commit=2, controller_cpu=cpus[0],
                    coprocessor_cpu=cpus[-1])
    assert (pinned.predictions == stream(surface(), "lut", detectors=shots[0][:50], window=4, commit=2).predictions).all()
    assert os.sched_getaffinity(0) == before
