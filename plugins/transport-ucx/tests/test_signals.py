"""Loading the ucx backend leaves this process's signals as they were: libucs catches SIGHUP
for its debug handler, which would make every process that loads the backend ignore SIGHUP."""

from __future__ import annotations

import signal
import subprocess
import sys

from backline_core.testing import ServeProcess, free_port

PROBE = """
import re, signal
from backline_core import plugins
from backline_core.sdk import ffi, lib
path = plugins.transport_backend("ucx", "cpu", "coprocessor").library("cpu", "coprocessor")
handle = ffi.dlopen(path)  # what opening a session does first
status = open("/proc/self/status").read()
caught = int(re.search(r"SigCgt:\\s*(\\w+)", status).group(1), 16)
ignored = int(re.search(r"SigIgn:\\s*(\\w+)", status).group(1), 16)
bit = 1 << (signal.SIGHUP - 1)
print("caught" if caught & bit else "ignored" if ignored & bit else "default")
"""


def test_loading_the_backend_leaves_sighup_at_its_default() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "default", out.stdout + out.stderr


def test_a_served_coprocessor_ends_on_sighup() -> None:
    with ServeProcess("ucx", free_port("127.0.0.1"), "steane", tls="tcp") as serve:
        serve.proc.send_signal(signal.SIGHUP)
        code = serve.proc.wait(60)
    assert code in (0, -signal.SIGHUP), code
