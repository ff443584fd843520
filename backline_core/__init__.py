"""Backline core: place a QEC workload on a controller and coprocessors, and run rounds.

These top-level names are the public API; ``backline_core.sdk`` adds what plugin authors
need and ``backline_core.testing`` what their tests need. Every other module is private.

>>> import backline_core as bl
>>> bl.Endpoint(host="10.0.0.2", port=18590)
Endpoint(host='10.0.0.2', port=18590)
"""

from . import _plugins as plugins
from ._abi import get_include, get_library
from ._bound_function import BoundFunction
from ._config import CORE_KEYS, format_config, parse_config
from ._coprocessor_function import CoprocessorFunction
from ._deployment import Deployment, deploy
from ._errors import (
    AbiError,
    AuthenticationError,
    BacklineError,
    DeadlineError,
    FunctionError,
    InvalidArgumentError,
    KeyTakenError,
    LifecycleError,
    NotFoundError,
    NothingPostedError,
    PayloadTooLargeError,
    PeerError,
    PlacementError,
    PluginError,
    RingFullError,
    TransportError,
    UnknownDecoderError,
    UnknownPluginError,
)
from ._hookspecs import Command, Decoder, Device, Executor, Pass, RoundDriver, Transport, hookimpl, hookspec
from ._placement import Controller, Coprocessor, Endpoint, Node, Placement
from ._resolution import Resolution, ResolvedNode, resolve
from ._session import RoundTripLog, Session

__version__ = "0.1.0"

__all__ = [
    "CORE_KEYS", "AbiError", "AuthenticationError", "BacklineError", "BoundFunction", "Command", "Controller",
    "Coprocessor", "CoprocessorFunction", "DeadlineError", "Decoder", "Deployment", "Device", "Endpoint",
    "Executor", "FunctionError", "InvalidArgumentError", "KeyTakenError", "LifecycleError", "Node",
    "NotFoundError", "NothingPostedError", "Pass", "PayloadTooLargeError", "PeerError", "Placement",
    "PlacementError", "PluginError", "Resolution", "ResolvedNode", "RingFullError", "RoundDriver",
    "RoundTripLog", "Session", "Transport", "TransportError", "UnknownDecoderError", "UnknownPluginError",
    "deploy", "format_config", "get_include", "get_library", "hookimpl", "hookspec", "parse_config",
    "plugins", "resolve",
]
