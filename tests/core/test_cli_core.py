"""`backline` CLI with only backline-core installed: the built-in decoders are listed, the
plugins table has a row per transport part, and every error is one line and status 2.

The error cases run ``cli.main`` in this process (capturing stderr) where nothing would
start if the check works, so a check that is missing shows as a failure, not a hang; the
command line's own entry point runs as a subprocess for a few of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import backline_core._cli as backline_cli
from backline_core import plugins
from backline_core._hookspecs import ENTRY_POINT_GROUPS, Command, Transport, hookimpl
from backline_core._abi import lib
from backline_core._steane import STEANE_H as STEANE_MATRIX

KEYS = {"kind", "name", "distribution", "version", "serves", "error", "details"}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backline_core", *args], capture_output=True, text=True,
                          timeout=60)


@pytest.fixture(scope="module")
def listing_json() -> list[dict]:
    proc = cli("plugins", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_plugins_lists_the_builtin_decoders():
    proc = cli("plugins")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "decoders:" in lines
    decoders = lines[lines.index("decoders:") + 1:]
    for name in ("echo", "steane"):
        row = [line for line in decoders if line.split()[:1] == [name]]
        assert len(row) == 1, proc.stdout
        assert "backline-core" in row[0]
        assert "runs on cpu" in row[0]
        assert "FAILED" not in row[0]


def test_plugins_json_rows(listing_json):
    assert isinstance(listing_json, list) and listing_json
    for row in listing_json:
        assert set(row) == KEYS
        assert row["kind"] in set(ENTRY_POINT_GROUPS.values())
    builtin = {row["name"]: row for row in listing_json if row["kind"] == "decoder" and row["distribution"] == "backline-core"}
    assert {"echo", "steane"} <= set(builtin)
    for name in ("echo", "steane"):
        row = builtin[name]
        assert row["error"] is None
        assert row["serves"] == "runs on cpu"
        assert row["version"]


def test_plugins_json_matches_the_python_listing(listing_json):
    rows = {(r.kind, r.name, r.distribution): r for r in plugins.listing()}
    for row in listing_json:
        if row["distribution"] == "(registered in process)":
            continue
        r = rows[(row["kind"], row["name"], row["distribution"])]
        assert (r.distribution, r.version, r.serves, r.error) == (row["distribution"], row["version"], row["serves"], row["error"])


def test_help():
    proc = cli("--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: backline")
    for command in ("plugins", "bench", "coprocessor"):
        assert command in proc.stdout


def test_plugins_help():
    proc = cli("plugins", "--help")
    assert proc.returncode == 0
    assert "--json" in proc.stdout and "--strict" in proc.stdout


def test_no_command_is_a_usage_error():
    proc = cli()
    assert_one_line_error(proc.returncode, proc.stderr, "give a command", "bench", "plugins", "backline --help")


# ---- one line, status 2 -------------------------------------------------------------------

MAX_PAYLOAD = lib.BL_MAX_SLOT_BYTES - lib.BL_FRAME_HEADER_BYTES
#: options that keep a bench cheap should a check be missing (it would run, and the test fail on rc)
QUICK = ["--rounds", "100", "--block", "50", "--no-progress", "--controller-cpu", "none", "--coprocessor-cpu", "none"]


def assert_one_line_error(rc: int, stderr: str, *fragments: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert rc == 2, stderr
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1, f"want one line on stderr, got {len(lines)}:\n{stderr}"
    assert lines[0].startswith("backline: error: "), stderr
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} missing from {lines[0]!r}"
    return lines[0]


def main_rc(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``cli.main(args)`` here: (status, stdout, stderr); argparse's exits are statuses too."""
    try:
        rc = backline_cli.main(list(args))
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return rc, out, err


def bench_error(capsys: pytest.CaptureFixture[str], args: list[str], *fragments: str) -> str:
    rc, out, err = main_rc(capsys, "bench", *args)
    line = assert_one_line_error(rc, err, *fragments)
    assert "round 0" not in out, out  # nothing ran
    return line


@pytest.fixture
def code_file(tmp_path):
    """``code_file(name, Hx=..., Hz=...)``: an .npz of those arrays in tmp_path."""

    def make(name: str, **arrays: np.ndarray) -> str:
        path = str(tmp_path / name)
        np.savez(path, **arrays)
        return path

    return make


STEANE_H = np.array(STEANE_MATRIX, dtype=np.uint8)  # a valid code for the --code checks


# Each was a traceback, a wrong exit status, or a multi-line usage message.
BAD_BENCH_VALUES = [
    # --rounds 1e11 was argparse's "invalid int value" (with the usage); now it is read and bounded
    (["--rounds", "1e11"], ["--rounds 100,000,000,000", "memory", "at most"]),
    (["--rounds", "100000000000"], ["--rounds 100,000,000,000", "memory", "at most"]),  # numpy MemoryError
    (["--rounds", "1.5"], ["--rounds", "whole number"]),
    (["--payload-bytes", "1e10"], ["--payload-bytes 10000000000", f"at most {MAX_PAYLOAD}"]),
    (["--payload-bytes", "10000000000"], ["--payload-bytes 10000000000", f"at most {MAX_PAYLOAD}"]),  # OverflowError
    (["--payload-bytes", str(MAX_PAYLOAD + 1)], [f"at most {MAX_PAYLOAD}", "BL_MAX_SLOT_BYTES"]),
    (["--controller-cpu", "x"], ["--controller-cpu", "'x'", "CPU"]),  # ValueError traceback
    (["--controller-cpu", "-1"], ["--controller-cpu -1", "CPU"]),
    (["--coprocessor-cpu", "99"], ["--coprocessor-cpu 99", "CPU"]),
    (["--coprocessor-cpu", "x"], ["--coprocessor-cpu", "'x'"]),
    (["--seed", "x"], ["--seed", "'x'"]),
    (["--seed", "-1"], ["--seed -1", "32 bits"]),  # numpy ValueError traceback
    (["--seed", "0"], ["--seed 0"]),
    (["--seed", str(2 ** 32)], ["--seed 4294967296", "32 bits"]),
    (["--gap-ns", "-1"], ["--gap-ns -1"]),  # cffi OverflowError traceback
    (["--gap-span", "zz"], ["--gap-span", "'zz'"]),
    (["--gap-span", "-1"], ["--gap-span -1"]),  # cffi OverflowError traceback
    (["--gap-span", "0x1ffffffff"], ["--gap-span 8589934591", "0xffffffff"]),
    (["--decoder-id", "-1"], ["--decoder-id -1", f"{lib.BL_MAX_DECODERS - 1}"]),  # cffi OverflowError traceback
    (["--decoder-id", str(lib.BL_MAX_DECODERS)], [f"--decoder-id {lib.BL_MAX_DECODERS}", "BL_MAX_DECODERS"]),
    (["--error-rate", "nan"], ["--error-rate nan"]),
    (["--error-rate", "1.5"], ["--error-rate 1.5"]),
    (["--error-rate", "-0.1"], ["--error-rate -0.1"]),
    (["--block", "0"], ["--block"]),
    (["--cadence", "weird"], ["--cadence", "weird", "b2b", "backline bench --help"]),  # usage + error, two lines
    (["--runs-in", "nowhere"], ["--runs-in", "nowhere"]),
    (["--no-such-option"], ["unrecognized arguments", "--no-such-option"]),
]


@pytest.mark.defect("bad bench numbers (--rounds 1e11, --payload-bytes 1e10, cpu/seed/gap/decoder ids) gave tracebacks or two-line usage errors")
@pytest.mark.parametrize("args,fragments", BAD_BENCH_VALUES, ids=[" ".join(a) for a, _ in BAD_BENCH_VALUES])
def test_bench_bad_values_are_one_line(capsys, args, fragments):
    bench_error(capsys, [*QUICK, *args], *fragments)


def test_bench_cpu_outside_the_affinity_set_is_refused(capsys):
    # a CPU the machine has but this process may not use made sched_setaffinity raise (OSError)
    allowed = os.sched_getaffinity(0)
    outside = max(allowed) + 1
    bench_error(capsys, [*QUICK, "--controller-cpu", str(outside)], f"--controller-cpu {outside}", "CPU")


def test_bench_config_validate_is_the_python_api_check():
    from backline_core._bench.config import BenchConfig
    from backline_core._errors import BacklineError

    for bad in (dict(rounds=10 ** 11), dict(payload_bytes=10 ** 10), dict(seed=-1), dict(gap_ns=-1),
                dict(decoder_id=lib.BL_MAX_DECODERS), dict(rounds=1e6), dict(error_rate=float("nan")),
                dict(controller_cpu=-1), dict(runs_in="nowhere"), dict(rounds=True)):
        with pytest.raises(BacklineError):
            BenchConfig(**{"rounds": 100, "controller_cpu": None, "coprocessor_cpu": None, **bad}).validate()
    BenchConfig(rounds=100, controller_cpu=None, coprocessor_cpu=None).validate()


@pytest.mark.parametrize("peer", ["10.0.0.2", "10.0.0.2:", ":18515", "h:0", "h:65536", "h:x", "[]:1"])
def test_bench_peer_that_is_not_host_and_port_is_one_line(capsys, peer):
    bench_error(capsys, [*QUICK, "--peer", peer], f"--peer {peer!r}: give HOST:PORT", "bench-peer")


def test_bench_transport_arg_that_is_not_key_value_is_one_line(capsys):
    bench_error(capsys, [*QUICK, "--transport-arg", "tls"], "--transport-arg", "tls")


def test_bench_transport_args_must_be_strings():
    from backline_core._bench.config import BenchConfig
    from backline_core._errors import BacklineError

    with pytest.raises(BacklineError, match="transport_args must be a dict of str to str"):
        BenchConfig(rounds=100, controller_cpu=None, coprocessor_cpu=None, transport_args={"tls": 1}).validate()


def test_bench_peer_address_and_what_it_leaves_to_the_peer():
    from backline_core._bench.config import BenchConfig
    from backline_core._errors import BacklineError

    assert BenchConfig(peer="10.0.0.2:18515").peer_address() == ("10.0.0.2", 18515)
    assert BenchConfig(peer="[fd00::2]:18515").peer_address() == ("fd00::2", 18515)
    # The coprocessor's CPU is the peer's to pin (not checked here); where it runs is a process there.
    BenchConfig(rounds=100, controller_cpu=None, coprocessor_cpu=4096, peer="h:1").validate()
    with pytest.raises(BacklineError, match="--runs-in thread: with --peer"):
        BenchConfig(rounds=100, controller_cpu=None, coprocessor_cpu=None, peer="h:1", runs_in="thread").validate()



# ---- --code files --------------------------------------------------------------------------

@pytest.mark.defect("a missing --code file was a traceback")
def test_code_missing_file(capsys, tmp_path):
    missing = str(tmp_path / "nope.npz")  # was FileNotFoundError from np.load
    bench_error(capsys, [*QUICK, "--code", missing], f"--code {missing}", "no such file")


@pytest.mark.defect("a malformed --code file was a traceback")
def test_code_not_an_npz(capsys, tmp_path):
    path = tmp_path / "code.npz"
    path.write_bytes(b"not an archive at all")  # was numpy's pickle ValueError
    bench_error(capsys, [*QUICK, "--code", str(path)], "--code", "not an .npz archive")


@pytest.mark.defect("--code on a FIFO waited for a writer forever, and /dev/zero was read without end")
def test_code_that_is_not_a_regular_file_is_refused_without_reading(capsys, tmp_path):
    fifo = tmp_path / "code.npz"
    os.mkfifo(fifo)
    bench_error(capsys, [*QUICK, "--code", str(fifo)], f"--code {fifo}", "is a FIFO (named pipe), not a regular file")
    bench_error(capsys, [*QUICK, "--code", "/dev/zero"], "--code /dev/zero", "not a regular file")
    bench_error(capsys, [*QUICK, "--code", str(tmp_path)], f"--code {tmp_path}", "directory")


@pytest.mark.defect("a 20,000 x 20,000 zero matrix in --code was checked for minutes")
def test_code_too_large_to_check_is_refused_before_it_is_decompressed(capsys, tmp_path):
    path = tmp_path / "huge.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:  # 400 MB of zeros, a few hundred kB zipped
        for name in ("Hx", "Hz"):
            with z.open(f"{name}.npy", "w", force_zip64=True) as fh:
                np.lib.format.write_array_header_1_0(fh, {"descr": "|u1", "fortran_order": False,
                                                          "shape": (20000, 20000)})
                zeros = bytes(1 << 22)
                for _ in range(20000 * 20000 // len(zeros)):
                    fh.write(zeros)
    bench_error(capsys, [*QUICK, "--code", str(path)], "Hx has shape (20000, 20000), 400,000,000 entries",
                "at most 33,554,432")


def test_code_truncated_npz(capsys, tmp_path, code_file):
    good = code_file("good.npz", Hx=STEANE_H, Hz=STEANE_H)
    path = tmp_path / "cut.npz"
    path.write_bytes(open(good, "rb").read()[:60])  # was zipfile.BadZipFile
    bench_error(capsys, [*QUICK, "--code", str(path)], "--code", "not a .npz archive")


def test_code_single_npy_array(capsys, tmp_path):
    path = tmp_path / "one.npz"
    with open(path, "wb") as fh:
        np.save(fh, STEANE_H)
    bench_error(capsys, [*QUICK, "--code", str(path)], "--code", "single .npy array")


def test_code_without_hx_hz(capsys, code_file):
    path = code_file("other.npz", A=STEANE_H)  # was KeyError 'Hx is not a file in the archive'
    bench_error(capsys, [*QUICK, "--code", path], "--code", "Hx", "Hz", "holds A")


@pytest.mark.parametrize("name,hx,fragments", [
    ("one-d", np.array([1, 0, 1]), ["Hx", "2-D", "(3,)"]),
    ("empty", np.zeros((0, 7)), ["Hx", "2-D"]),
    ("ragged", np.array([[1, 0], [1]], dtype=object), ["Hx", "ragged"]),
    ("text", np.array([["1", "0"]]), ["Hx", "0 and 1"]),
], ids=["one-d", "empty", "ragged", "text"])
def test_code_malformed_matrix(capsys, code_file, name, hx, fragments):
    path = code_file(f"{name}.npz", Hx=hx, Hz=STEANE_H)  # np.savez pickles an object (ragged) array
    bench_error(capsys, [*QUICK, "--code", path], "--code", *fragments)


@pytest.mark.parametrize("value,shown", [(np.nan, "nan"), (2, "2"), (0.5, "0.5"), (-1, "-1"), (257, "257")],
                         ids=["nan", "two", "half", "minus-one", "257"])
@pytest.mark.defect("a --code matrix with NaN or non-binary entries silently became another code")
def test_code_non_binary_entry_is_refused_and_named(capsys, code_file, value, shown):
    # Cast to uint8 these became 0 (nan, 0.5), 255 or 1 (257): another code, and the bench passed.
    hz = STEANE_H.astype(np.float64 if isinstance(value, float) else np.int64)
    hz[1, 4] = value
    path = code_file("bad.npz", Hx=STEANE_H, Hz=hz)
    line = bench_error(capsys, [*QUICK, "--code", path, "--decoder-id", "1"], "Hz[1, 4]", shown, "0 and 1")
    assert "--code" in line


def test_code_columns_must_agree(capsys, code_file):
    path = code_file("cols.npz", Hx=STEANE_H, Hz=STEANE_H[:, :6])
    bench_error(capsys, [*QUICK, "--code", path], "--code", "columns")


def test_code_for_a_decoder_not_built_from_a_code_is_one_line(capsys, code_file):
    # which decoder_id decodes which matrix is the decoder's (bposd: 0 Hx, 1 Hz; its tests)
    path = code_file("steane.npz", Hx=STEANE_H, Hz=STEANE_H)
    bench_error(capsys, [*QUICK, "--code", path, "--coprocessor-fn", "steane"], "decoder 'steane'", "hx, hz",
                "--code needs a decoder built from Hx and Hz")


# ---- --json / --plot: refused before the run ------------------------------------------------

@pytest.fixture
def file_in_the_way(tmp_path):
    path = tmp_path / "a-file"
    path.write_text("x")
    return path


@pytest.mark.defect("--json/--plot paths were checked only after the run")
@pytest.mark.parametrize("option", ["--json", "--plot"])
@pytest.mark.parametrize("where", ["missing-dir", "under-a-file", "a-directory"])
def test_output_path_that_cannot_be_written_is_refused_first(capsys, tmp_path, file_in_the_way, option, where):
    # Was: the whole run, then FileNotFoundError at the end (the results lost).
    target = {"missing-dir": tmp_path / "no" / "such" / "out", "under-a-file": file_in_the_way / "out",
              "a-directory": tmp_path}[where]
    bench_error(capsys, [*QUICK, option, str(target)], option, str(target))
    assert file_in_the_way.read_text() == "x"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory anyway")
def test_output_in_a_read_only_directory_is_refused_first(capsys, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        bench_error(capsys, [*QUICK, "--json", str(ro / "out.json")], "--json", "cannot be written")
    finally:
        ro.chmod(0o700)


def test_output_check_neither_truncates_nor_leaves_files(tmp_path):
    from backline_core._bench.report import check_outputs

    kept = tmp_path / "old.json"
    kept.write_text("previous results")
    new = tmp_path / "new.json"
    check_outputs(str(kept), None)
    check_outputs(str(new), None)
    assert kept.read_text() == "previous results"
    assert not new.exists()


def test_plot_without_matplotlib_is_refused_first(tmp_path):
    fake = tmp_path / "site"
    (fake / "matplotlib").mkdir(parents=True)
    (fake / "matplotlib" / "__init__.py").write_text("raise ImportError('No module named matplotlib (test)')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(fake), os.environ.get("PYTHONPATH")]))}
    # 10**7 rounds would run for a good while: the refusal must come first
    proc = subprocess.run([sys.executable, "-m", "backline_core", "bench", *QUICK, "--rounds", "10000000",
                           "--plot", str(tmp_path / "out.png")], capture_output=True, text=True, timeout=60, env=env)
    assert_one_line_error(proc.returncode, proc.stderr, "--plot", "matplotlib")
    assert not (tmp_path / "out.png").exists()


# ---- the entry point itself (subprocess) ----------------------------------------------------

@pytest.mark.parametrize("args,fragments", [
    (["bench", "--rounds", "1e11"], ["--rounds"]),
    (["bench", "--rounds", "abc"], ["--rounds", "'abc'", "backline bench --help"]),
    (["bench", "--payload-bytes", "10000000000"], ["--payload-bytes"]),
    (["coprocessor"], ["required", "backline coprocessor --help"]),
    (["nosuch"], ["invalid choice", "nosuch"]),
], ids=["rounds-1e11", "rounds-abc", "payload-1e10", "coprocessor-no-subcommand", "unknown-command"])
def test_entry_point_errors_are_one_line(args, fragments):
    proc = cli(*args, *(QUICK[2:] if args[0] == "bench" else []))
    assert_one_line_error(proc.returncode, proc.stderr, *fragments)
    assert "usage:" not in proc.stderr


def test_subcommand_help_still_works():
    for args in (["bench", "--help"], ["coprocessor", "serve", "--help"]):
        proc = cli(*args)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(f"usage: backline {args[0]}")


@pytest.mark.defect("serve --duration inf crashed after ready")
@pytest.mark.parametrize("value", ["inf", "nan", "-1", "soon"])
def test_serve_duration_must_be_finite_and_not_negative(value):
    # inf and nan reached select() (OverflowError / ValueError tracebacks), -1 too, after "ready"
    proc = cli("coprocessor", "serve", "--key", "cli-core-duration", "--fn", "echo", "--duration", value)
    assert_one_line_error(proc.returncode, proc.stderr, "--duration", value)
    assert "ready" not in proc.stdout


@pytest.mark.parametrize("spec,fragments", [
    ("echo@-1", ["echo@-1", "decoder id -1", f"{lib.BL_MAX_DECODERS - 1}"]),  # cffi OverflowError traceback
    ("echo@x", ["echo@x", "integers"]),
    ("echo@300", ["echo@300", "decoder id 300"]),
    ("echo@0,0", ["echo@0,0", "repeated"]),
    ("@", ["--fn"]),
    ('{"name": "x", "decoder_ids": 5}', ["--fn", "CoprocessorFunction"]),  # TypeError traceback
], ids=["minus-one", "x", "300", "repeated", "empty-file-name", "json-bad-ids"])
@pytest.mark.defect("serve --fn echo@-1 was a traceback")
def test_serve_bad_function_spec(spec, fragments):
    proc = cli("coprocessor", "serve", "--key", "cli-core-fn", "--fn", spec, "--duration", "0")
    assert_one_line_error(proc.returncode, proc.stderr, *fragments)
    assert "ready" not in proc.stdout


def test_serve_parent_pid_must_be_a_pid():
    proc = cli("coprocessor", "serve", "--key", "cli-core-pid", "--fn", "echo", "--parent-pid", "0")
    assert_one_line_error(proc.returncode, proc.stderr, "--parent-pid")


def test_unknown_transport_is_one_line(capsys):
    # The list of what is installed was several lines.
    line = bench_error(capsys, [*QUICK, "--transport", "nosuch"], "unknown transport 'nosuch'", "backline plugins")
    for name in plugins.names("transport"):
        assert name in line


def test_one_line_keeps_every_part_of_a_listing():
    assert backline_cli.one_line("unknown x 'y'. Installed xs:\n  a (d): s\n  b (e): t\nInstall one.") == \
        "unknown x 'y'. Installed xs: a (d): s; b (e): t; Install one."


def test_other_errors_escaping_a_command_are_one_line(capsys, monkeypatch):
    def broken(args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(backline_cli, "_cmd_plugins", broken)
    rc, _, err = main_rc(capsys, "plugins")
    assert_one_line_error(rc, err, "No space left on device")


def test_programming_errors_keep_their_traceback(capsys, monkeypatch):
    def buggy(args):
        raise AttributeError("a bug")

    monkeypatch.setattr(backline_cli, "_cmd_plugins", buggy)
    with pytest.raises(AttributeError):
        backline_cli.main(["plugins"])


# ---- the plugins table: one row per transport part ------------------------------------------

class TwoPartTransport:
    """One transport name served by two distributions (as rdma could be)."""

    @hookimpl
    def backline_transports(self):
        lib_path = lambda hardware, role: "/nonexistent.so"  # noqa: E731
        return [
            Transport(name="cli-split", summary="host side", serves=(("cpu", "controller"), ("cpu", "coprocessor")),
                      runs_in=("process",), library=lib_path, distribution="backline-transport-cli-split"),
            Transport(name="cli-split", summary="fpga side", serves=(("fpga", "controller"),), runs_in=("process",),
                      library=lib_path, needs_endpoint=True, distribution="backline-fpga-cli-split-with-a-long-name",
                      init_args={"board": "which FPGA board", "clock_mhz": "its clock"}),
        ]


@pytest.fixture
def two_part_transport():
    plugin = TwoPartTransport()
    plugins.register(plugin)
    yield plugin
    plugins.unregister(plugin)


def test_plugins_table_has_a_row_per_transport_part(capsys, two_part_transport):
    rc, out, err = main_rc(capsys, "plugins")
    assert rc == 0, err
    lines = out.splitlines()
    section = lines[lines.index("transports:") + 1:]
    section = section[:next((i for i, line in enumerate(section) if not line.startswith("  ")), len(section))]
    rows = [line for line in section if line.split()[0] == "cli-split"]
    assert len(rows) == 2, out
    host, fpga = sorted(rows, key=lambda line: "fpga" in line)
    assert "backline-transport-cli-split" in host and "serves cpu/controller, cpu/coprocessor" in host
    assert "backline-fpga-cli-split-with-a-long-name" in fpga and "serves fpga/controller" in fpga
    assert "needs a network endpoint" in fpga and fpga.endswith("; keys board, clock_mhz")
    assert "keys" not in host  # a part without keys of its own says none
    # the columns line up: what each part serves starts in the same column on every row
    starts = {line.index("serves") for line in section if "serves" in line}
    assert len(starts) == 1, "\n".join(section)
    assert all(len(line.split("  ")) >= 2 for line in section)


def test_plugins_json_has_a_row_per_transport_part(capsys, two_part_transport):
    rc, out, _ = main_rc(capsys, "plugins", "--json")
    assert rc == 0
    rows = [row for row in json.loads(out) if row["name"] == "cli-split"]
    assert {row["distribution"] for row in rows} == {"backline-transport-cli-split",
                                                      "backline-fpga-cli-split-with-a-long-name"}
    assert all(row["serves"].startswith("serves ") for row in rows)


# ---- every subcommand is a command record ---------------------------------------------------

def test_the_core_s_own_commands_are_command_records_of_backline_core():
    records = {r.name: r for r in plugins.listing() if r.kind == "command"}
    for name in ("plugins", "bench", "coprocessor", "executor"):
        assert records[name].distribution == "backline-core", records.get(name)


def test_help_lists_every_command_record():
    proc = cli("--help")
    assert proc.returncode == 0, proc.stderr
    for name in plugins.names("command"):
        assert f"  {name} " in proc.stdout, (name, proc.stdout)


def test_a_command_record_a_plugin_registers_is_run_with_its_arguments(capsys):
    class Plugin:
        @hookimpl
        def backline_commands(self):
            return [Command(name="cli-core-echo", summary="prints its arguments",
                            load=lambda: lambda argv: print("got", *argv) or 7)]

    plugin = Plugin()
    plugins.register(plugin)
    try:
        assert backline_cli.main(["cli-core-echo", "a", "--b"]) == 7
        assert capsys.readouterr().out == "got a --b\n"
    finally:
        plugins.unregister(plugin)
