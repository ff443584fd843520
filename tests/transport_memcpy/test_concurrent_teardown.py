"""Leaving a ``with deploy(...)`` block while a worker thread is mid-round.

Before sessions counted their calls in progress, this freed the controller session under
the worker (a use-after-free that crashed 4 runs in 5). Each case runs in a subprocess so
a crash is a failed test, not a dead test run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = """
    import sys, threading, time
    from backline_core import Controller, Coprocessor, CoprocessorFunction, Placement
    from backline_core._deployment import deploy

    runs_in = sys.argv[1]

    def slow(decoder_id, payload):  # keeps rounds in flight while the block exits
        time.sleep(0.002)
        return payload

    fn = "echo" if runs_in == "process" else CoprocessorFunction(name="slow", python=slow)
    results = []
    for i in range(20):
        placement = Placement(controller=Controller(), transport="memcpy",
                              coprocessors=[Coprocessor(name=f"mid-{i}", coprocessor_fn=fn, runs_in=runs_in,
                                                        init_args={"timeout_ms": 4000})])
        seen = []
        started = threading.Event()

        def worker(session):
            started.set()
            try:
                while True:
                    session.round(b"syndrome")
            except Exception as exc:
                seen.append(type(exc).__name__)

        with deploy(placement, in_bytes=8, out_bytes=8) as d:
            t = threading.Thread(target=worker, args=(d.session(),))
            t.start()
            started.wait(5)
            time.sleep(0.01)
        t.join(10)
        assert not t.is_alive(), "the worker's round never returned"
        results.append(seen[0] if seen else "none")
    assert set(results) <= {"LifecycleError", "PeerError"}, results
    print("ok", sorted(set(results)))
"""


@pytest.mark.defect("leaving a with deploy(...) block while a worker thread was mid-round was a use-after-free")
@pytest.mark.parametrize("runs_in", ["thread", "controller-thread", "process"])
def test_leaving_deploy_while_a_worker_is_mid_round(runs_in: str) -> None:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT), runs_in], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.startswith("ok"), proc.stdout
