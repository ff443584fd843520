"""The Steane [[7,1,3]] code as ``backline/steane.h`` defines it (its one source, which
``bl_fn_steane``'s table is compiled from), read through cffi.

>>> STEANE_H[0], STEANE_LOGICAL
((1, 1, 1, 1, 0, 0, 0), (0, 1, 4))
>>> steane_correction(steane_syndrome(5)) == 1 << 5
True
"""

from __future__ import annotations

import os
from typing import Any

import cffi

from ._abi import get_include
from ._cffi_build import cdef_from_header


def _header() -> Any:
    """The header's integer #defines, as attributes (cffi reads them; nothing is loaded)."""
    ffi = cffi.FFI()
    with open(os.path.join(get_include(), "backline", "steane.h")) as fh:
        ffi.cdef(cdef_from_header(fh.read()))
    return ffi.dlopen(None)  # only a namespace for the constants


_defines: Any = _header()
_QUBITS = range(_defines.BL_STEANE_QUBITS)
_ROWS = (_defines.BL_STEANE_CHECK0, _defines.BL_STEANE_CHECK1, _defines.BL_STEANE_CHECK2)[:_defines.BL_STEANE_CHECKS]

#: the check matrix H (Hx = Hz): rows are checks, columns qubits
STEANE_H: tuple[tuple[int, ...], ...] = tuple(tuple((row >> q) & 1 for q in _QUBITS) for row in _ROWS)
#: the qubits of the logical X and Z operators (Lx = Lz)
STEANE_LOGICAL: tuple[int, ...] = tuple(q for q in _QUBITS if (_defines.BL_STEANE_LOGICAL >> q) & 1)


def steane_syndrome(qubit: int) -> int:
    """The syndrome byte (bit r = check r) of a flip of ``qubit``: column ``qubit`` of H."""
    return sum(row[qubit] << r for r, row in enumerate(STEANE_H))


def steane_correction(syndrome: int) -> int:
    """The minimum-weight correction byte (bit q = qubit q) of a syndrome byte: the qubit whose column it is."""
    return sum(1 << q for q in _QUBITS if syndrome and steane_syndrome(q) == syndrome)
