"""User-named input files are read bounded and never block; ``--parent-pid`` is checked; two
``--fn`` never bind one decoder id (each a one-line error, exit status 2)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from backline_core.sdk import InputFileError, parent_pid, read_input_file, read_input_text


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "backline_core", "coprocessor", "serve", "--key", "inp",
                           "--duration", "0", *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return str(path)


def test_helper_refuses_what_is_not_a_small_regular_file(tmp_path, fifo):
    small = tmp_path / "f"
    small.write_bytes(b"abc")
    assert read_input_file(str(small), what="x", limit=3) == b"abc"
    assert read_input_text(str(small), what="x", limit=3) == "abc"
    for path, said in ((fifo, "FIFO"), ("/dev/zero", "character device"), (str(tmp_path), "directory"),
                       (str(tmp_path / "none"), "no such file"), (str(small), "more than the 2")):
        with pytest.raises(InputFileError, match=said) as info:
            read_input_file(path, what="the test's input", limit=2)
        assert path in str(info.value) and "the test's input" in str(info.value)


@pytest.mark.parametrize("target", ["fifo", "/dev/zero", "/nonexistent/spec", "dir"])
def test_fn_at_file_is_a_one_line_error(target, fifo, tmp_path):
    path = {"fifo": fifo, "dir": str(tmp_path)}.get(target, target)
    done = _serve("--fn", f"@{path}")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and path in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("pid", [str(2**40), "99999999", "0", "-3", "x"])
def test_parent_pid_must_name_a_process(pid):
    done = _serve("--fn", "echo", "--parent-pid", pid)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("backline: error: argument --parent-pid") and done.stderr.count("\n") == 1


def test_parent_pid_type_accepts_a_live_process_and_names_a_missing_one():
    assert parent_pid(str(os.getpid())) == os.getpid()
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=60)
    with pytest.raises(Exception, match="no such process"):
        parent_pid(str(proc.pid))


def test_one_decoder_id_bound_twice_is_an_error():
    done = _serve("--fn", "echo@0", "--fn", "steane@0")
    assert done.returncode == 2 and "decoder id 0 is bound twice" in done.stderr, done.stderr
