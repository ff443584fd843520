"""Backline core: place a QEC workload on a controller and coprocessors, and run rounds.

These top-level names are the public API; ``backline_core.sdk`` adds what plugin authors
need and ``backline_core.testing`` what their tests need. Every other module is private.

>>> import backline_core as bl
>>> bl.Endpoint(host="10.0.0.2", port=18590)
Endpoint(host='10.0.0.2', port=18590)
"""

import importlib
from typing import Any

# name -> the private module that defines it; names load on first use, so ``import backline_core``
# (and the pytest plugin, backline_core.testing.plugin) costs next to nothing
_EXPORTS: dict[str, str] = {
    "plugins": "_plugins",
    "get_include": "_abi", "get_library": "_abi",
    "BoundFunction": "_bound_function",
    "CORE_KEYS": "_config", "format_config": "_config", "parse_config": "_config",
    "CoprocessorFunction": "_coprocessor_function", "NativeFunction": "_coprocessor_function",
    "DecoderFunction": "_decoder_function",
    "DemMatrices": "_dem", "dem_matrices": "_dem", "check_matrices": "_dem",
    "Deployment": "_deployment", "deploy": "_deployment", "connect_controller": "_deployment",
    "AbiError": "_errors", "AuthenticationError": "_errors", "BacklineError": "_errors", "DeadlineError":
    "_errors", "FunctionError": "_errors", "InvalidArgumentError": "_errors", "KeyTakenError": "_errors",
    "LifecycleError": "_errors", "NotFoundError": "_errors", "NothingPostedError": "_errors",
    "PayloadTooLargeError": "_errors", "PeerError": "_errors", "PlacementError": "_errors", "PluginError":
    "_errors", "RingFullError": "_errors", "TransportError": "_errors", "UnknownDecoderError": "_errors",
    "UnknownPluginError": "_errors",
    "Command": "_hookspecs", "Decoder": "_hookspecs", "Device": "_hookspecs", "Executor": "_hookspecs",
    "ObjectBuilder": "_hookspecs", "Pass": "_hookspecs", "RoundDriver": "_hookspecs", "Transport": "_hookspecs",
    "hookimpl": "_hookspecs", "hookspec": "_hookspecs",
    "Controller": "_placement", "Coprocessor": "_placement", "Endpoint": "_placement", "Node": "_placement",
    "Placement": "_placement",
    "Resolution": "_resolution", "ResolvedNode": "_resolution", "resolve": "_resolution",
    "RoundTripLog": "_session", "Session": "_session",
}

__version__ = "0.1.0"

__all__ = [
    "CORE_KEYS", "AbiError", "AuthenticationError", "BacklineError", "BoundFunction", "Command", "Controller",
    "Coprocessor", "CoprocessorFunction", "DeadlineError", "Decoder", "DecoderFunction", "DemMatrices",
    "Deployment", "Device", "Endpoint",
    "Executor", "FunctionError", "InvalidArgumentError", "KeyTakenError", "LifecycleError", "Node",
    "NativeFunction", "NotFoundError", "NothingPostedError", "ObjectBuilder", "Pass", "PayloadTooLargeError", "PeerError",
    "Placement",
    "PlacementError", "PluginError", "Resolution", "ResolvedNode", "RingFullError", "RoundDriver",
    "RoundTripLog", "Session", "Transport", "TransportError", "UnknownDecoderError", "UnknownPluginError",
    "check_matrices", "connect_controller", "dem_matrices", "deploy", "format_config", "get_include", "get_library", "hookimpl", "hookspec", "parse_config",
    "plugins", "resolve",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'backline_core' has no attribute {name!r}")
    mod = importlib.import_module(f"backline_core.{module}")
    value = mod if name == "plugins" else getattr(mod, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
