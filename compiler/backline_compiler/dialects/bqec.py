"""The ``bqec`` dialect: a syndrome decode, before it is placed on a coprocessor.

(Catalyst's own QEC dialects are ``qecl``/``qecp``; this one is Backline's.)

Attribute ``#bqec.tanner<MxN, "hex">`` (:class:`TannerAttr`): a CSS check matrix ``H`` with
``M`` checks (rows) and ``N`` bits (columns), bit-packed: ``H`` flattened row-major, bit
``k`` in byte ``k // 8`` at bit ``k % 8`` (least significant first, i.e.
``numpy.packbits(H.ravel(), bitorder="little")``), written as lowercase hex. Unused bits of
the last byte are 0, so each matrix has one spelling. Build it with
:meth:`TannerAttr.from_matrix`; get the matrix back with :meth:`TannerAttr.matrix`.

Op ``bqec.decode`` (:class:`DecodeOp`), destination-passing::

    bqec.decode %syndrome, %correction {check_type = "x", tanner = #bqec.tanner<3x7, "78b4e5">}
    bqec.decode %syndrome, %correction {check_type = "z", coprocessor = "dec", tanner = #bqec.tanner<3x7, "78b4e5">}

* ``%syndrome: !llvm.ptr`` points at ``ceil(M / 8)`` bytes: syndrome bit ``i`` (check row
  ``i``) in byte ``i // 8`` at bit ``i % 8`` (little-endian bit order, as above);
* ``%correction: !llvm.ptr`` points at ``ceil(N / 8)`` bytes the decode overwrites with a
  bit mask in the same order: bit ``j`` set = flip data bit ``j``;
* ``check_type`` (``"x"`` or ``"z"``) says which check family the syndrome came from
  (``lower-decode-to-transport`` maps ``"x"`` to decoder_id 0, ``"z"`` to 1);
* ``coprocessor`` (optional) names the placement's coprocessor that should run it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import IntAttr, StringAttr
from xdsl.dialects.llvm import LLVMPointerType
from xdsl.ir import Attribute, Dialect, Operation, ParametrizedAttribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
)
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

CHECK_TYPES = ("x", "z")
#: check_type -> decoder_id carried by transport.stage_payload.
DECODER_IDS = {"x": 0, "z": 1}

PTR = LLVMPointerType()
_HEX_DIGITS = frozenset("0123456789abcdef")


def packed_bytes(bits: int) -> int:
    """Bytes holding ``bits`` bit-packed bits."""
    return (bits + 7) // 8


@irdl_attr_definition
class TannerAttr(ParametrizedAttribute):
    """``#bqec.tanner<MxN, "hex">``: an ``M x N`` 0/1 check matrix, bit-packed (see the module doc)."""

    name = "bqec.tanner"

    rows: IntAttr
    cols: IntAttr
    packed: StringAttr

    def __init__(self, rows: int | IntAttr, cols: int | IntAttr, packed: str | StringAttr):
        super().__init__(
            IntAttr(rows) if isinstance(rows, int) else rows,
            IntAttr(cols) if isinstance(cols, int) else cols,
            StringAttr(packed) if isinstance(packed, str) else packed,
        )

    @staticmethod
    def from_matrix(h: Any) -> TannerAttr:
        """From a 2-D array-like of 0/1 (bool or int)."""
        a = np.asarray(h)
        if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1:
            raise ValueError(f"a Tanner matrix must be 2-D and non-empty, got shape {a.shape}")
        if not np.isin(a, (0, 1)).all():
            raise ValueError("a Tanner matrix holds only 0 and 1")
        packed = np.packbits(a.astype(np.uint8).ravel(), bitorder="little")
        return TannerAttr(int(a.shape[0]), int(a.shape[1]), packed.tobytes().hex())

    def matrix(self) -> np.ndarray:
        """The matrix as a ``(rows, cols)`` uint8 array of 0/1."""
        m, n = self.rows.data, self.cols.data
        bits = np.unpackbits(np.frombuffer(bytes.fromhex(self.packed.data), dtype=np.uint8), bitorder="little")
        return bits[: m * n].reshape(m, n)

    @property
    def num_checks(self) -> int:
        return self.rows.data

    @property
    def num_bits(self) -> int:
        return self.cols.data

    @property
    def syndrome_bytes(self) -> int:
        return packed_bytes(self.rows.data)

    @property
    def correction_bytes(self) -> int:
        return packed_bytes(self.cols.data)

    def verify(self) -> None:
        m, n, text = self.rows.data, self.cols.data, self.packed.data
        if m < 1 or n < 1:
            raise VerifyException(f"#bqec.tanner needs at least one row and one column, got {m}x{n}")
        want = 2 * packed_bytes(m * n)
        if len(text) != want:
            raise VerifyException(
                f"#bqec.tanner<{m}x{n}> needs {want} hex digits ({packed_bytes(m * n)} bytes), got {len(text)}"
            )
        if not set(text) <= _HEX_DIGITS:
            raise VerifyException("#bqec.tanner data must be lowercase hex digits (0-9, a-f)")
        used = (m * n) % 8
        if used and int(text[-2:], 16) >> used:
            raise VerifyException(f"#bqec.tanner<{m}x{n}>: the unused high bits of the last byte must be 0")

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.rows.data}x{self.cols.data}, ")
        printer.print_string_literal(self.packed.data)
        printer.print_string(">")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            rows = parser.parse_shape_dimension(allow_dynamic=False)
            parser.parse_shape_delimiter()
            cols = parser.parse_shape_dimension(allow_dynamic=False)
            parser.parse_punctuation(",")
            packed = parser.parse_str_literal(" (the bit-packed matrix in hex)")
        return (IntAttr(rows), IntAttr(cols), StringAttr(packed))


@irdl_op_definition
class DecodeOp(IRDLOperation):
    """Decode the bit-packed syndrome at ``syndrome`` into the correction mask at ``correction``."""

    name = "bqec.decode"

    syndrome = operand_def(PTR)
    correction = operand_def(PTR)
    tanner = prop_def(TannerAttr)
    check_type = prop_def(StringAttr)
    coprocessor = opt_prop_def(StringAttr)

    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$syndrome `,` $correction attr-dict"

    def __init__(
        self,
        syndrome: SSAValue | Operation,
        correction: SSAValue | Operation,
        tanner: TannerAttr,
        check_type: str | StringAttr,
        coprocessor: str | StringAttr | None = None,
    ):
        # Insertion order is print order: the (long) matrix goes last.
        props: dict[str, Attribute] = {
            "check_type": StringAttr(check_type) if isinstance(check_type, str) else check_type,
        }
        if coprocessor is not None:
            props["coprocessor"] = StringAttr(coprocessor) if isinstance(coprocessor, str) else coprocessor
        props["tanner"] = tanner
        super().__init__(operands=[syndrome, correction], properties=props)

    @property
    def decoder_id(self) -> int:
        """The transport decoder_id of ``check_type`` ("x" -> 0, "z" -> 1)."""
        return DECODER_IDS[self.check_type.data]

    def verify_(self) -> None:
        if self.check_type.data not in CHECK_TYPES:
            raise VerifyException(
                f"'bqec.decode' check_type must be \"x\" or \"z\", got {self.check_type.data!r}"
            )
        if self.coprocessor is not None and not self.coprocessor.data:
            raise VerifyException("'bqec.decode' coprocessor, when given, must be a non-empty node name")


BQEC = Dialect("bqec", [DecodeOp], [TannerAttr])
