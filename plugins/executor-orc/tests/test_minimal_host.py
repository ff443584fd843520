"""What a machine that runs an executor needs: backline-core, this plugin and the node's plugins.

`.ci/run` builds a venv with only backline-core, backline-executor-orc and
backline-transport-memcpy (and their dependencies) and names its interpreter in
BACKLINE_EXECUTOR_MINIMAL_PYTHON; this test runs a Steane coprocessor in an executor started
from it. The controller side (this venv) compiles the node's code; the executor only links it.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from backline_core import BoundFunction, Controller, Coprocessor, Placement, deploy, plugins

steane = plugins.get("decoder", "steane").build  # the core's Steane lookup table

MINIMAL = os.environ.get("BACKLINE_EXECUTOR_MINIMAL_PYTHON")

pytestmark = pytest.mark.skipif(
    not MINIMAL, reason="needs BACKLINE_EXECUTOR_MINIMAL_PYTHON, the interpreter of a venv with only the core, "
                        "this plugin and the memcpy transport (.ci/run makes one)")


def test_the_minimal_environment_lacks_the_compiler_stack():
    for module in ("xdsl", "pennylane", "jax", "backline_compiler", "torch"):
        probe = subprocess.run([MINIMAL, "-P", "-c", f"import {module}"], capture_output=True, timeout=60)
        assert probe.returncode != 0, f"{module} is importable in the minimal executor environment"
    for module in ("backline_core", "backline_executor_orc", "backline_transport_memcpy", "llvmlite"):
        probe = subprocess.run([MINIMAL, "-P", "-c", f"import {module}"], capture_output=True, timeout=60)
        assert probe.returncode == 0, probe.stderr.decode()


def test_a_steane_coprocessor_runs_in_an_executor_of_the_minimal_environment():
    from backline_executor_orc.handle import Executor

    with Executor.local(python=MINIMAL) as ex:
        node = Coprocessor(name=f"minimal-{os.getpid()}", coprocessor_fn="steane", executor=ex)
        placement = Placement(controller=Controller(), transport="memcpy", coprocessors=[node])
        with deploy(placement, in_bytes=1, out_bytes=1) as d, BoundFunction(steane()) as expected:
            for syndrome in range(8):
                assert d.session().round(bytes([syndrome])) == expected(0, bytes([syndrome]))
