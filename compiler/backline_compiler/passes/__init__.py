"""Compiler passes, one module each, named in kebab-case.

:data:`PASSES` is the one table of them: :mod:`backline_compiler.passes.plugin` turns it into
``backline.passes`` records and :mod:`backline_compiler.universe` into xDSL's pass table.
Importing this package imports no pass (nor the core): a pass's module loads when its
loader is called.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

#: pass name -> (module under backline_compiler.passes, class, summary)
PASSES: dict[str, tuple[str, str, str]] = {
    "inject-transport-session": ("inject_transport_session", "InjectTransportSession",
                                 "bring-up into setup(), teardown into teardown(), per coprocessor session key"),
    "lower-decode-to-transport": ("lower_decode_to_transport", "LowerDecodeToTransport",
                                  "each bqec.decode becomes a transport round on a coprocessor"),
    "cross-compile-targets": ("cross_compile_targets", "CrossCompileTargets",
                              "each target module becomes an object file for its triple"),
    "dispatch-executor-targets": ("dispatch_executor_targets", "DispatchExecutorTargets",
                                  "calls to remote kernels become executor open/send_binary/launch"),
    "convert-transport-to-llvm": ("convert_transport_to_llvm", "ConvertTransportToLLVM",
                                  "transport ops become calls into the runtime's C ABI"),
    "convert-quantum-to-llvm": ("convert_quantum_to_llvm", "ConvertQuantumToLLVM",
                                "bquantum ops become calls into the device runtime ABI (device.h)"),
    "convert-executor-to-llvm": ("convert_executor_to_llvm", "ConvertExecutorToLLVM",
                                 "executor ops become calls into the executor runtime's C ABI"),
    "encode-steane": ("encode_steane", "EncodeSteane",
                      "a logical bquantum circuit becomes Steane-encoded, with a correction round per gate"),
    "inject-noise": ("inject_noise", "InjectNoise",
                     "depolarizing noise after every gate, a bit flip before every measurement"),
    "convert-bqec-to-llvm": ("convert_bqec_to_llvm", "ConvertBqecToLLVM",
                             "local bqec.decode ops become direct calls of a coprocessor function"),
}


def loader(name: str) -> Callable[[], Any]:
    """A function importing the class of the compiler's pass ``name`` (a ``ModulePass`` subclass)."""
    module, cls = PASSES[name][:2]
    return lambda: getattr(importlib.import_module(f"{__name__}.{module}"), cls)


def loaders() -> dict[str, Callable[[], Any]]:
    """Pass name -> loader, for every pass of the compiler."""
    return {name: loader(name) for name in PASSES}
