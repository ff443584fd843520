"""The one import surface for plugin authors: what a transport, decoder, executor, device or
compiler plugin may use from the core besides ``backline_core``'s own top-level names.

Everything else in ``backline_core`` is private (underscore-named) and may change without
notice; a test fails if code under ``plugins/`` imports it. Build-time helpers for a
plugin's ``setup.py`` are in :mod:`backline_core.sdk.build` (setuptools only); test helpers
in :mod:`backline_core.testing`. The C surface is ``backline/sdk/*.h`` under
:func:`backline_core.get_include`.

Names load on first use, so ``from backline_core.sdk import free_port`` in a process that
must start fast imports neither numpy nor the bench.

>>> from backline_core.sdk import from_status, lib
>>> type(from_status(lib.BL_ETIMEOUT, "late")).__name__
'DeadlineError'
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the private module that defines it (one source; this table only re-exports)
_EXPORTS: dict[str, str] = {
    # the native runtime through cffi: constants and signatures come from backline.h
    "ffi": "_abi", "lib": "_abi", "check": "_abi", "last_error": "_abi", "load_symbol": "_abi",
    "cdef_from_header": "_cffi_build", "open_library": "_cffi_build",
    # errors: every BL_E* status has its class
    "from_status": "_errors", "status_code": "_errors", "short_repr": "_errors",
    "InvalidArgumentError": "_errors", "RingFullError": "_errors", "NothingPostedError": "_errors",
    "FunctionError": "_errors", "AbiError": "_errors", "NotFoundError": "_errors",
    "AuthenticationError": "_errors",
    # the trust kit (backline/trust.h): secrets, handshake tags bound to a connection, limits
    "SecretError": "_trust", "read_secret_file": "_trust", "generate_secret_file": "_trust",
    "DeploymentSecret": "_trust", "new_nonce": "_trust", "address_bytes": "_trust",
    "connection_addresses": "_trust", "transcript": "_trust", "tag": "_trust", "tags_equal": "_trust",
    "HandshakeGate": "_trust",
    # decoders of detection events: the DEM as matrices, the reply's layout, declared parameters
    "DemMatrices": "_dem", "dem_matrices": "_dem", "check_matrices": "_dem", "check_dem": "_dem",
    "reply_matrix": "_dem", "encode_reply_map": "_dem", "reply_bits": "_dem", "REPLIES": "_hookspecs",
    "DecoderFunction": "_decoder_function", "object_schema": "_decoder_params", "check_params": "_decoder_params",
    # records and the vocabulary of a placement
    "HARDWARE": "_hookspecs", "ROLES": "_hookspecs", "RUNS_IN": "_hookspecs", "REMOTE_INIT_ARGS": "_hookspecs",
    "runs_in_code": "_session", "c_string": "_session", "FORMAT": "_serialization", "QuantumDevice": "_device",
    # the CLI: a plugin command's parser, its one main, one-line errors
    "Parser": "_cli", "run_command": "_cli", "one_line": "_cli", "cpu_or_none": "_cli", "parent_pid": "_cli",
    # user-named input files: bounded, regular files only, never blocking
    "InputFileError": "_input", "read_input_file": "_input", "read_input_text": "_input",
    # processes
    "CoprocessorProcess": "_deployment", "child_environment": "_deployment", "start_process": "_deployment",
    "ChildProcess": "_process", "StopWatch": "_process", "proc_state": "_process", "children": "_process",
    "describe_exit": "_process", "free_port": "_process", "host_local_name": "_process", "gone": "_process", "pause": "_process",
    "resume": "_process", "proc_stat": "_process", "interpreter": "_deployment", "stop_process": "_process",
    "zombie": "_process", "signal_name": "_process", "exit_on_stop_signals": "_process",
    "private_tempdir": "_process", "sweep_orphaned_tempdirs": "_process",
    # the bench and the floor kit
    "local_executor": "_bench.runner",
    # every DEM decoder as a sinter.Decoder, for a plugin that drives sinter (backline-sweeps)
    "sinter_decoders": "sinter",
    "BenchConfig": "_bench.config", "PEER_KEY": "_bench.config", "RoundRunner": "_bench.runner",
    "BenchResult": "_bench.report", "Series": "_bench.report", "format_report": "_bench.report",
    "PERCENTILES": "_bench.stats", "summary": "_bench.stats", "wilson": "_bench.stats", "Progress": "_bench.progress",
    "BenchPayloads": "_bench.payloads", "PayloadSpec": "_bench.payloads", "PayloadTable": "_bench.payloads",
    "BenchFloor": "_bench.protocols", "BenchFloorFactory": "_bench.protocols", "ControllerBench": "_bench.protocols",
    "ControllerBenchResult": "_bench.protocols", "PayloadGenerator": "_bench.protocols",
    # the Steane [[7,1,3]] code, as backline/steane.h defines it
    "STEANE_H": "_steane", "STEANE_LOGICAL": "_steane", "steane_syndrome": "_steane",
    "steane_correction": "_steane",
    "DEFAULT_TIMEOUT_MS": "_bench_floor", "FLOOR_PORT_OFFSET": "_bench_floor", "READY_TIMEOUT_S": "_bench_floor",
    "FloorLibrary": "_bench_floor", "NativeFloor": "_bench_floor", "Responder": "_bench_floor",
    "as_int": "_bench_floor", "floor_settings": "_bench_floor", "parse_responder_args": "_bench_floor",
    "responder_parser": "_bench_floor", "serve_responder": "_bench_floor", "run_tool_pair": "_bench_floor",
    "listening": "_bench_floor", "say_error": "_bench_floor",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"backline_core.sdk has no {name!r}; the SDK's names are listed in "
                             "backline_core.sdk.__all__ (docs/plugins.md)")
    value = getattr(importlib.import_module(f"backline_core.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
