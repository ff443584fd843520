"""The PennyLane-facing frontend: the ``Backline`` device, ``qjit``, ``decode`` and ``runtime_call``.

Importing it needs PennyLane and the jax version PennyLane's program capture pins
(``pip install backline-compiler[frontend]``).
"""

from .decode import DecodeError, decode
from .device import Backline
from .qjit import QJIT, qjit
from .runtime_call import RuntimeFunction, SignatureError, runtime_call, runtime_declare
from .values import CaptureError

__all__ = ["Backline", "CaptureError", "DecodeError", "QJIT", "RuntimeFunction", "SignatureError", "decode", "qjit", "runtime_call",
           "runtime_declare"]
