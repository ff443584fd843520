"""Backline core: place a QEC workload on a controller and coprocessors, and run rounds.

>>> import backline_core as bl
>>> bl.Endpoint(host="10.0.0.2", port=18590)
Endpoint(host='10.0.0.2', port=18590)
"""

from . import plugins
from .config import CORE_KEYS, format_config, parse_config
from .coprocessor_function import CoprocessorFunction
from .errors import (
    BacklineError,
    DeadlineError,
    KeyTakenError,
    LifecycleError,
    PayloadTooLargeError,
    PeerError,
    PlacementError,
    PluginError,
    TransportError,
    UnknownDecoderError,
    UnknownPluginError,
)
from .hookspecs import Command, Decoder, Device, Executor, Pass, RoundDriver, Transport, hookimpl, hookspec
from .native import get_include, get_library
from .placement import Controller, Coprocessor, Endpoint, Node, Placement
from .resolution import Resolution, ResolvedNode, resolve
from .session import RoundTripLog, Session

__version__ = "0.1.0"

__all__ = [
    "CORE_KEYS", "BacklineError", "Controller", "Coprocessor", "CoprocessorFunction", "DeadlineError",
    "Command", "Decoder", "Device", "Endpoint", "Executor", "KeyTakenError", "LifecycleError", "Node", "Pass",
    "PayloadTooLargeError", "PeerError", "Placement", "PlacementError", "PluginError", "Resolution", "ResolvedNode",
    "RoundDriver", "RoundTripLog", "Session",
    "Transport", "TransportError", "UnknownDecoderError", "UnknownPluginError", "format_config",
    "get_include", "get_library", "hookimpl", "hookspec", "parse_config", "plugins", "resolve",
]
