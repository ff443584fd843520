"""Backline's executor server: an llvmlite ORC JIT behind an authenticated TCP protocol.

``Executor`` (:mod:`.handle`: local, SSH, attach) starts or reaches one.
``backline executor serve`` (:mod:`.cli`) starts the supervisor (:mod:`.server`), which
authenticates each connection (:mod:`.wire`, :mod:`.secret`) and forks one session
process per client (:mod:`.session`) that links the client's object files and calls
their functions. Nothing heavy is imported here.
"""

from typing import Any

__all__ = ["Executor"]


def __getattr__(name: str) -> Any:
    # `from backline_executor_orc import Executor` without importing the handles at plugin load
    if name == "Executor":
        from .handle import Executor

        return Executor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
