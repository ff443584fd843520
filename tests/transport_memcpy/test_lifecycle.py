"""Lifecycle of ``backline coprocessor serve`` children (each test is a defect once seen).

* A child started by ``deploy`` (runs_in="process") or by ``backline bench --runs-in
  process`` dies with its parent, however the parent dies (SIGTERM, SIGHUP, SIGKILL),
  and leaves no segment behind; so does one whose parent is gone before it could watch it.
* A child imports nothing from its working directory: neither a module there
  (``argparse.py``) nor a plugin a ``*.dist-info`` there names, whatever PYTHONPATH says.
* Start-up failures are clear (the child's last line of stderr, as the error class its
  status names), every wait has a deadline, and nothing is left running after one.

Segments are looked for in both places memcpy has kept them: ``/dev/shm/backline.<key>``
and ``/dev/shm/backline-<euid>/<key>`` (and ``$BACKLINE_MEMCPY_DIR`` when set).
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from backline_core import Controller, Coprocessor, Placement
from backline_core._deployment import CoprocessorProcess, child_environment, deploy
from backline_core._errors import DeadlineError, InvalidArgumentError, KeyTakenError, TransportError
from backline_core._process import ChildProcess
from backline_core._process import proc_stat as _stat  # the serve's own reading of /proc/PID/stat
from backline_core._session import Session

#: how long a child may take to notice its parent is gone and clean up
CHILD_GONE_S = 10.0
START_S = 60.0
PARENT_SIGNALS = [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL]
SIGNAL_IDS = [s.name for s in PARENT_SIGNALS]


# ---- helpers ------------------------------------------------------------------------------

def segments(key: str) -> list[str]:
    """Every segment file of ``key`` (and keys it prefixes) in any place memcpy has used."""
    patterns = [f"/dev/shm/backline.{key}*", f"/dev/shm/backline-{os.geteuid()}/{key}*"]
    if os.environ.get("BACKLINE_MEMCPY_DIR"):
        patterns.append(os.path.join(os.environ["BACKLINE_MEMCPY_DIR"], f"{key}*"))
    return sorted({path for pattern in patterns for path in glob.glob(pattern)})


def wait_until(predicate: Callable[[], object], timeout: float, step: float = 0.05) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(step)


def start_time(pid: int) -> int | None:
    stat = _stat(pid)
    return int(stat[19]) if stat else None


def running(pid: int, started: int | None) -> bool:
    """Whether the process ``pid`` that started at ``started`` still runs (a zombie, or a
    newer process with the same pid, does not)."""
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X") and int(stat[19]) == started


def cmdline(pid: int | str) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [part.decode(errors="replace") for part in fh.read().split(b"\0") if part]
    except OSError:
        return []


def serve_processes(key: str | None = None, parent: int | None = None, prefix: bool = False) -> list[int]:
    """Live ``coprocessor serve`` processes, of session ``key`` (or keys it prefixes) and/or
    children of ``parent``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        args = cmdline(entry)
        if "serve" not in args or "backline_core" not in args:
            continue
        their_key = args[args.index("--key") + 1] if "--key" in args[:-1] else None
        if key is not None and (their_key is None or not (their_key.startswith(key) if prefix else their_key == key)):
            continue
        stat = _stat(int(entry))
        if stat is None or stat[0] in ("Z", "X") or (parent is not None and int(stat[1]) != parent):
            continue
        out.append(int(entry))
    return out


def kill_all(pids_and_starts: list[tuple[int, int | None]]) -> None:
    for pid, started in pids_and_starts:
        if running(pid, started):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def no_leftovers(key: str) -> Iterator[list[tuple[int, int | None]]]:
    """After the test: no serve process of ``key`` runs and no segment of it remains (both
    removed, then reported). Tests add the (pid, start time) of processes they start."""
    started: list[tuple[int, int | None]] = []
    yield started
    kill_all(started)
    stray = serve_processes(key, prefix=True)
    for pid in stray:
        os.kill(pid, signal.SIGKILL)
    left = segments(key)
    for path in left:
        with contextlib.suppress(OSError):
            os.unlink(path)
    assert not stray, f"serve processes of {key!r} still running: {stray}"
    assert not left, f"segments left behind for {key!r}: {left}"


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str, str], str]:
    """``module_dir(source, stem)``: a module importable by serve children (on PYTHONPATH);
    returns its name."""
    where = tmp_path / "modules"
    where.mkdir()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(where), os.environ.get("PYTHONPATH")])))

    def make(source: str, stem: str = "bl_lifecycle") -> str:
        name = f"{stem}_{uuid.uuid4().hex[:8]}"
        (where / f"{name}.py").write_text(textwrap.dedent(source))
        return name

    return make


# ---- 1. a child dies with its parent ------------------------------------------------------

DEPLOYING_PARENT = """
import signal, sys, time
# A suite started under nohup hands SIGHUP down ignored; this parent is one that dies of it.
signal.signal(signal.SIGHUP, signal.SIG_DFL)
from backline_core import Controller, Coprocessor, Placement
from backline_core._deployment import deploy

key = sys.argv[1]
placement = Placement(controller=Controller(), transport="memcpy",
                      coprocessors=[Coprocessor(name=key, coprocessor_fn="echo", runs_in="process")])
d = deploy(placement, in_bytes=8, out_bytes=8)
assert d.session().round(b"12345678") == b"12345678"
print(d.processes[key].pid, flush=True)
time.sleep(300)
"""


@pytest.mark.defect("a coprocessor child outlived its parent (SIGTERM, SIGHUP, kill -9) with its segment")
@pytest.mark.parametrize("sig", PARENT_SIGNALS, ids=SIGNAL_IDS)
def test_deployed_child_dies_with_its_parent(tmp_path, key, no_leftovers, sig):
    script = tmp_path / "parent.py"
    script.write_text(DEPLOYING_PARENT)
    parent = ChildProcess([sys.executable, str(script), key], name="the deploying parent", ready=r"^(\d+)$",
                          cwd=str(tmp_path), process_group=False)
    no_leftovers.append((parent.pid, start_time(parent.pid)))
    try:
        child = int(parent.wait_ready(START_S).group(1))  # else: how the parent ended, and what it said
        started = start_time(child)
        no_leftovers.append((child, started))
        assert running(child, started) and segments(key)
        parent.signal(sig)
        parent.wait(30)
        assert wait_until(lambda: not running(child, started), CHILD_GONE_S), \
            f"the coprocessor (pid {child}) outlived its parent killed by {sig.name}"
        wait_until(lambda: not segments(key), 5)
        assert not segments(key), f"segments left behind: {segments(key)}"
    finally:
        parent.kill(10)


@pytest.mark.defect("a bench coprocessor child outlived the bench")
@pytest.mark.parametrize("sig", PARENT_SIGNALS, ids=SIGNAL_IDS)
def test_bench_child_dies_with_the_bench(sig):
    bench = subprocess.Popen([sys.executable, "-m", "backline_core", "bench", "--runs-in", "process", "--rounds",
                              "20000000", "--no-progress", "--controller-cpu", "none", "--coprocessor-cpu", "none"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    child = started = key = None
    try:
        found = wait_until(lambda: serve_processes(parent=bench.pid) or bench.poll() is not None, START_S)
        assert bench.poll() is None, f"the bench ended early: {bench.stderr.read()}"
        assert found, "the bench started no coprocessor process"
        child = found[0]
        started = start_time(child)
        args = cmdline(child)
        key = args[args.index("--key") + 1]
        assert wait_until(lambda: segments(key), START_S), "the coprocessor never came up"
        time.sleep(0.3)  # rounds are running
        bench.send_signal(sig)
        bench.wait(30)
        assert wait_until(lambda: not running(child, started), CHILD_GONE_S), \
            f"the bench's coprocessor (pid {child}) outlived the bench killed by {sig.name}"
        wait_until(lambda: not segments(key), 5)
        assert not segments(key), f"segments left behind: {segments(key)}"
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait(10)
        if child is not None and running(child, started):
            os.kill(child, signal.SIGKILL)
        for path in segments(key) if key else []:
            with contextlib.suppress(OSError):
                os.unlink(path)


EARLY_EXIT_PARENT = """
import os, subprocess, sys
key, log = sys.argv[1], sys.argv[2]
child = subprocess.Popen([sys.executable, "-P", "-m", "backline_core", "coprocessor", "serve", "--key", key,
                          "--fn", "echo", "--parent-pid", str(os.getpid())],
                         stdout=open(log + ".out", "w"), stderr=open(log + ".err", "w"))
print(child.pid, flush=True)
os._exit(0)  # gone before the child can have armed its watch
"""


def test_child_whose_parent_died_during_its_start_exits(tmp_path, key, no_leftovers):
    script = tmp_path / "parent.py"
    script.write_text(EARLY_EXIT_PARENT)
    log = str(tmp_path / "serve")
    proc = subprocess.run([sys.executable, str(script), key, log], capture_output=True, text=True, timeout=START_S)
    assert proc.returncode == 0, proc.stderr
    child = int(proc.stdout)
    started = start_time(child)
    no_leftovers.append((child, started))
    assert wait_until(lambda: not running(child, started), CHILD_GONE_S), "the orphaned coprocessor kept serving"
    assert not segments(key)


@pytest.mark.defect("an orphaned serve started serving")
def test_serve_with_a_parent_already_gone_never_serves(key, no_leftovers):
    # The ready line came before the watch was armed: an orphan announced itself first.
    gone = subprocess.Popen(["true"])
    gone.wait()
    proc = subprocess.run([sys.executable, "-m", "backline_core", "coprocessor", "serve", "--key", key, "--fn",
                           "echo", "--parent-pid", str(gone.pid)], capture_output=True, text=True, timeout=START_S)
    # It used to exit 0 silently; a parent that is already gone is a usage error (issue 23).
    assert proc.returncode == 2 and "no such process" in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert "ready" not in proc.stdout
    assert not segments(key)


def test_serve_watches_a_parent_pid_that_is_not_its_parent(key, no_leftovers):
    # --parent-pid of a process that is not the serve's parent was taken for a dead parent
    # (getppid() differs), so the serve stopped right after "ready".
    watched = subprocess.Popen(["sleep", "120"])
    serve = ChildProcess([sys.executable, "-m", "backline_core", "coprocessor", "serve", "--key", key, "--fn",
                          "echo", "--parent-pid", str(watched.pid)], name="the serve",
                         ready=rf"^ready key={re.escape(key)} ", process_group=False)
    no_leftovers.append((serve.pid, start_time(serve.pid)))
    try:
        serve.wait_ready(START_S)
        time.sleep(1.0)
        assert serve.returncode is None, f"the serve stopped while {watched.pid} lives: {serve.output_tail()}"
        with Session.open("memcpy", "controller", key, in_bytes=4, out_bytes=4) as ctl:
            assert ctl.round(b"ping") == b"ping"
        watched.kill()
        watched.wait(10)
        assert serve.wait(CHILD_GONE_S) == 0
        assert not segments(key)
    finally:
        if watched.poll() is None:
            watched.kill()
            watched.wait(10)
        serve.kill(10)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_serve_stops_cleanly_on_a_signal(key, no_leftovers, sig):
    cop = CoprocessorProcess("memcpy", key, ["echo"], ready_timeout=START_S)
    no_leftovers.append((cop.pid, start_time(cop.pid)))
    assert segments(key)
    os.kill(cop.pid, sig)
    assert cop.proc.wait(CHILD_GONE_S) == 0, cop.output_tail()
    assert not segments(key)


def test_serve_signalled_during_its_start_stops_cleanly(tmp_path, key, no_leftovers, module_dir):
    # Before the handlers were installed (they came after bring-up) a SIGTERM during start-up
    # killed the serve outright (status -15), whatever it held by then.
    mark = tmp_path / "importing"
    name = module_dir(f"""
        import pathlib, time
        from backline_core._builtins import echo
        pathlib.Path({str(mark)!r}).write_text("now")
        time.sleep(2)
        fn = echo()
    """)
    serve = subprocess.Popen([sys.executable, "-m", "backline_core", "coprocessor", "serve", "--key", key, "--fn",
                              f"{name}:fn"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    no_leftovers.append((serve.pid, start_time(serve.pid)))
    assert wait_until(mark.exists, START_S), "the serve never started importing its function"
    serve.send_signal(signal.SIGTERM)
    out, err = serve.communicate(timeout=CHILD_GONE_S + 5)
    assert serve.returncode == 0, err
    assert "ready" not in out
    assert not segments(key)


# ---- 2. nothing from the working directory ------------------------------------------------

DEPLOY_FROM_CWD = """
import os, sys
from backline_core import Controller, Coprocessor, Placement
from backline_core._deployment import deploy

key, pythonpath = sys.argv[1], sys.argv[2]
if pythonpath != "-":  # set here, for the child only: this process's sys.path is already fixed
    os.environ["PYTHONPATH"] = pythonpath.replace("{OLD}", os.environ.get("PYTHONPATH", ""))
placement = Placement(controller=Controller(), transport="memcpy",
                      coprocessors=[Coprocessor(name=key, coprocessor_fn="echo", runs_in="process")])
with deploy(placement, in_bytes=4, out_bytes=4) as d:
    assert d.session().round(b"safe") == b"safe"
print("deployed", flush=True)
"""


@pytest.fixture
def hostile_cwd(tmp_path: Path) -> tuple[Path, Path]:
    """A working directory holding ``argparse.py`` and a fake distribution whose
    ``backline.transports`` entry point ``memcpy`` names ``evil_plugin``; both write to the
    marker file if imported. Returns (the directory, the marker)."""
    work, marker = tmp_path / "work", tmp_path / "imported"
    work.mkdir()
    writes = f"import os\nopen({str(marker)!r}, 'a').write(__name__ + ' ' + str(os.getpid()) + '\\n')\n"
    (work / "argparse.py").write_text(writes + "raise ImportError('the working directory was imported from')\n")
    (work / "evil_plugin.py").write_text(writes)
    dist = work / "backline_transport_evil-6.6.6.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: backline-transport-evil\nVersion: 6.6.6\n")
    (dist / "entry_points.txt").write_text("[backline.transports]\nmemcpy = evil_plugin\n")
    return work, marker


@pytest.mark.parametrize("pythonpath", ["-", "{OLD}:", ":{OLD}", ".:{OLD}", "work-relative:{OLD}"],
                         ids=["inherited", "trailing-empty-entry", "leading-empty-entry", "dot-entry",
                              "relative-entry"])
@pytest.mark.defect("a child started as python -m imported argparse.py / a dist-info from the cwd")
def test_child_imports_nothing_from_the_working_directory(tmp_path, key, no_leftovers, hostile_cwd, pythonpath):
    work, marker = hostile_cwd
    (work / "work-relative").mkdir()
    (work / "work-relative" / "argparse.py").write_text((work / "argparse.py").read_text())
    script = tmp_path / "bin" / "deploy.py"  # not in the working directory: the parent itself is clean
    script.parent.mkdir()
    script.write_text(DEPLOY_FROM_CWD)
    proc = subprocess.run([sys.executable, str(script), key, pythonpath], cwd=work, capture_output=True, text=True,
                          timeout=START_S)
    imported = marker.read_text() if marker.exists() else ""
    assert not imported, f"the coprocessor imported from its working directory:\n{imported}{proc.stderr}"
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "deployed"


def test_child_environment_drops_only_working_directory_entries(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["", "/abs/one", ".", "rel/two", "/abs/three", ""]))
    monkeypatch.setenv("PYTHONSTARTUP", "/tmp/startup.py")
    monkeypatch.setenv("BACKLINE_TEST_KEPT", "yes")
    env = child_environment()
    assert env["PYTHONPATH"] == os.pathsep.join(["/abs/one", "/abs/three"])
    assert env["PYTHONSAFEPATH"] == "1"
    assert "PYTHONSTARTUP" not in env
    assert env["BACKLINE_TEST_KEPT"] == "yes"
    monkeypatch.setenv("PYTHONPATH", ":.")
    assert "PYTHONPATH" not in child_environment()


# ---- 3. start-up errors, deadlines, nothing left running ----------------------------------

def test_child_that_exits_at_once_reports_its_last_stderr_line(key, no_leftovers):
    with pytest.raises(TransportError) as exc:
        CoprocessorProcess("memcpy", key, ["nosuch"], ready_timeout=START_S)
    message = str(exc.value)
    assert "\n" not in message, message  # it was the child's whole stderr, a listing of many lines
    assert "exited with status 2" in message and "unknown decoder 'nosuch'" in message, message
    assert "backline: error:" not in message  # the child's prefix is not repeated


def test_child_start_error_keeps_its_status_class(key, no_leftovers):
    first = CoprocessorProcess("memcpy", key, ["echo"], ready_timeout=START_S)
    no_leftovers.append((first.pid, start_time(first.pid)))
    try:
        with pytest.raises(KeyTakenError, match="already served") as exc:  # it was a bare TransportError
            CoprocessorProcess("memcpy", key, ["echo"], ready_timeout=START_S)
        assert exc.value.status == "BL_EBUSY"
        assert serve_processes(key) == [first.pid]  # the refused one is gone
    finally:
        assert first.terminate() == 0


def test_child_killed_before_ready_is_not_reported_as_a_timeout(key, no_leftovers, module_dir):
    # A child dead of SIGKILL with nothing on stderr was reported "not ready within 30 s"
    # (DeadlineError), after the whole ready_timeout.
    name = module_dir("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    t0 = time.monotonic()
    with pytest.raises(TransportError) as exc:
        CoprocessorProcess("memcpy", key, [f"{name}:fn"], ready_timeout=30)
    assert not isinstance(exc.value, DeadlineError), exc.value
    assert "SIGKILL" in str(exc.value)
    assert time.monotonic() - t0 < 20


def test_child_never_ready_hits_the_deadline_and_is_killed(key, no_leftovers, module_dir):
    name = module_dir("import time\ntime.sleep(120)\n")
    t0 = time.monotonic()
    with pytest.raises(DeadlineError, match="not ready within"):
        CoprocessorProcess("memcpy", key, [f"{name}:fn"], ready_timeout=1.5)
    assert time.monotonic() - t0 < 15
    assert wait_until(lambda: not serve_processes(key), 5), "the child that was never ready is still running"


def test_terminate_has_a_deadline_for_a_child_that_ignores_sigterm(key, no_leftovers, module_dir):
    name = module_dir("""
        import signal
        from backline_core._builtins import echo
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        fn = echo()
    """)
    cop = CoprocessorProcess("memcpy", key, [f"{name}:fn"], ready_timeout=START_S)
    t0 = time.monotonic()
    assert cop.terminate(timeout=1.0) == -signal.SIGKILL
    assert time.monotonic() - t0 < 15
    for path in segments(key):  # a SIGKILLed coprocessor cannot clean up; not this test's point
        os.unlink(path)


def test_unstartable_interpreter_is_a_clear_error_and_leaves_no_spec_file(key, no_leftovers, monkeypatch):
    # Popen's FileNotFoundError escaped, and the --fn spec file it had written stayed behind.
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "backline-fn-*")))
    monkeypatch.setattr(sys, "executable", "/nonexistent/python3")
    with pytest.raises(TransportError, match="cannot start"):
        CoprocessorProcess("memcpy", key, ["x" * 5000], ready_timeout=5)
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "backline-fn-*"))) == before


@pytest.mark.parametrize("timeout", [0, -1, float("inf"), float("nan")])
def test_ready_timeout_must_be_a_deadline(key, timeout):
    with pytest.raises(InvalidArgumentError, match="ready_timeout"):
        CoprocessorProcess("memcpy", key, ["echo"], ready_timeout=timeout)


def test_a_printing_function_does_not_block_on_a_full_pipe(key, no_leftovers, module_dir):
    # Nobody read the child's stdout after "ready": once the pipe (64 KiB) was full, a
    # function that prints blocked the coprocessor and rounds timed out.
    name = module_dir("""
        import sys
        from backline_core._coprocessor_function import CoprocessorFunction

        def _chatty(decoder_id, payload):
            print("x" * 32768, flush=True)
            print("y" * 32768, file=sys.stderr, flush=True)
            return payload

        chatty = CoprocessorFunction(name="chatty", python=_chatty)
    """)
    cop = CoprocessorProcess("memcpy", key, [f"{name}:chatty"], ready_timeout=START_S)
    try:
        with Session.open("memcpy", "controller", key, config="timeout_ms=5000", in_bytes=4, out_bytes=4) as ctl:
            for i in range(12):  # 12 x 32 KiB on each pipe
                assert ctl.round(b"%04d" % i) == b"%04d" % i
        assert any(line.startswith("x") for line in cop.output_tail())
    finally:
        assert cop.terminate() == 0


def test_failed_deployment_leaves_no_child_running(key, no_leftovers):
    # The second coprocessor's key is taken: the first one's child must not outlive the failure.
    blocker_key = f"{key}-b"
    blocker = CoprocessorProcess("memcpy", blocker_key, ["echo"], ready_timeout=START_S)
    try:
        placement = Placement(controller=Controller(), transport="memcpy", coprocessors=[
            Coprocessor(name=f"{key}-a", coprocessor_fn="echo", runs_in="process"),
            Coprocessor(name=blocker_key, coprocessor_fn="echo", runs_in="process")])
        with pytest.raises(KeyTakenError):
            deploy(placement, in_bytes=4, out_bytes=4)
        assert wait_until(lambda: not serve_processes(f"{key}-a"), 5), "the first coprocessor outlived the failure"
        assert serve_processes(blocker_key) == [blocker.pid]
    finally:
        assert blocker.terminate() == 0
