"""The ``bqec`` dialect: a syndrome decode, before it is placed on a coprocessor.

(Catalyst's own QEC dialects are ``qecl``/``qecp``; this one is Backline's.)

Attribute ``#bqec.tanner<MxN, "hex">`` (:class:`TannerAttr`): a CSS check matrix ``H`` with
``M`` checks (rows) and ``N`` bits (columns), bit-packed: ``H`` flattened row-major, bit
``k`` in byte ``k // 8`` at bit ``k % 8`` (least significant first, i.e.
``numpy.packbits(H.ravel(), bitorder="little")``), written as lowercase hex. Unused bits of
the last byte are 0, so each matrix has one spelling. Build it with
:meth:`TannerAttr.from_matrix`; get the matrix back with :meth:`TannerAttr.matrix`.

Op ``bqec.decode`` (:class:`DecodeOp`), destination-passing, in one of two forms (exactly
one per op; the verifier rejects a mix or a partial form):

(a) *implicit QEC decode*: the op carries the code. ``tanner`` + ``check_type``::

        bqec.decode %syndrome, %correction {check_type = "x", tanner = #bqec.tanner<3x7, "78b4e5">}
        bqec.decode %syndrome, %correction {check_type = "z", coprocessor = "dec", tanner = #bqec.tanner<3x7, "78b4e5">}

    ``check_type`` (``"x"`` or ``"z"``) says which check family the syndrome came from; the
    decoder_id is derived from it (``"x"`` -> 0, ``"z"`` -> 1) and the sizes from the matrix
    (``ceil(M / 8)`` syndrome bytes, ``ceil(N / 8)`` correction bytes).

(b) *explicit decode*: the coprocessor knows its code; the op names only which of its
    decoders to run and how many bytes go each way (the paper's
    ``decode(syndrome, decoder_id=0)``)::

        bqec.decode %syndrome, %correction {decoder_id = 0 : i32, syndrome_bytes = 1 : i32, correction_bytes = 2 : i32, coprocessor = "dec"}

    ``decoder_id`` (``i32``, ``0 <= id < BL_MAX_DECODERS`` = 256, the id carried by
    ``transport.stage_payload``), ``syndrome_bytes`` and ``correction_bytes`` (positive
    ``i32``). Without a matrix the decode cannot run locally: it must be routed to a
    coprocessor by ``lower-decode-to-transport``.

In both forms:

* ``%syndrome: !llvm.ptr`` points at the syndrome bytes (``syndrome_bytes``); in the
  implicit form syndrome bit ``i`` (check row ``i``) is in byte ``i // 8`` at bit ``i % 8``
  (little-endian bit order, as above);
* ``%correction: !llvm.ptr`` points at the ``correction_bytes`` bytes the decode
  overwrites; in the implicit form a bit mask in the same order: bit ``j`` set = flip data
  bit ``j``;
* ``coprocessor`` (optional) names the placement's coprocessor that should run it.

Passes read :attr:`DecodeOp.decoder_id`, :attr:`DecodeOp.syndrome_bytes` and
:attr:`DecodeOp.correction_bytes`, which answer for either form; :attr:`DecodeOp.is_explicit`
tells them apart. Build the implicit form with ``DecodeOp(syn, corr, tanner, check_type)``
and the explicit one with :meth:`DecodeOp.explicit`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import I32, IntAttr, IntegerAttr, StringAttr, i32
from xdsl.dialects.llvm import LLVMPointerType
from xdsl.ir import Attribute, Dialect, Operation, ParametrizedAttribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
)
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from backline_core._native import lib

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


#: The properties of each form of ``bqec.decode`` (exactly one form per op).
IMPLICIT_PROPS = ("tanner", "check_type")
EXPLICIT_PROPS = ("decoder_id", "syndrome_bytes", "correction_bytes")
_IMPLICIT = "tanner + check_type"
_EXPLICIT = "decoder_id + syndrome_bytes + correction_bytes"
_FORMS = f"{_IMPLICIT} (an implicit QEC decode) or {_EXPLICIT} (an explicit decode)"


def _i32(value: int | IntegerAttr) -> IntegerAttr:
    return IntegerAttr(value, i32) if isinstance(value, int) else value


def _listed(names: Sequence[str]) -> str:
    return ", ".join(names)


@irdl_op_definition
class DecodeOp(IRDLOperation):
    """Decode the syndrome at ``syndrome`` into the correction at ``correction``.

    Implicit form (``tanner`` + ``check_type``) or explicit form (``decoder_id`` +
    ``syndrome_bytes`` + ``correction_bytes``); see the module docstring.
    """

    name = "bqec.decode"

    syndrome = operand_def(PTR)
    correction = operand_def(PTR)
    # implicit form
    tanner = opt_prop_def(TannerAttr)
    check_type = opt_prop_def(StringAttr)
    # explicit form (Python names differ so that the int properties below can use the IR names)
    decoder_id_attr = opt_prop_def(IntegerAttr[I32], prop_name="decoder_id")
    syndrome_bytes_attr = opt_prop_def(IntegerAttr[I32], prop_name="syndrome_bytes")
    correction_bytes_attr = opt_prop_def(IntegerAttr[I32], prop_name="correction_bytes")
    # both forms
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
        """The implicit form; :meth:`explicit` builds the explicit one."""
        # Insertion order is print order: the (long) matrix goes last.
        props: dict[str, Attribute] = {
            "check_type": StringAttr(check_type) if isinstance(check_type, str) else check_type,
        }
        if coprocessor is not None:
            props["coprocessor"] = StringAttr(coprocessor) if isinstance(coprocessor, str) else coprocessor
        props["tanner"] = tanner
        super().__init__(operands=[syndrome, correction], properties=props)

    @classmethod
    def explicit(
        cls,
        syndrome: SSAValue | Operation,
        correction: SSAValue | Operation,
        *,
        decoder_id: int | IntegerAttr,
        syndrome_bytes: int | IntegerAttr,
        correction_bytes: int | IntegerAttr,
        coprocessor: str | StringAttr | None = None,
    ) -> DecodeOp:
        """The explicit form: ``decoder_id`` and the sizes, no matrix."""
        props: dict[str, Attribute] = {
            "decoder_id": _i32(decoder_id),
            "syndrome_bytes": _i32(syndrome_bytes),
            "correction_bytes": _i32(correction_bytes),
        }
        if coprocessor is not None:
            props["coprocessor"] = StringAttr(coprocessor) if isinstance(coprocessor, str) else coprocessor
        return cls.create(operands=[SSAValue.get(syndrome), SSAValue.get(correction)], properties=props)

    @property
    def is_explicit(self) -> bool:
        """True for the explicit form (``decoder_id`` and sizes, no ``tanner``)."""
        return self.tanner is None

    def _explicit_value(self, attr: IntegerAttr | None, name: str) -> int:
        if attr is None:
            raise ValueError(f"'bqec.decode' has neither tanner + check_type nor {name}; verify the op first")
        return attr.value.data

    @property
    def decoder_id(self) -> int:
        """The transport decoder_id: ``check_type`` "x" -> 0, "z" -> 1, or the explicit ``decoder_id``."""
        if self.check_type is not None:
            return DECODER_IDS[self.check_type.data]
        return self._explicit_value(self.decoder_id_attr, "decoder_id")

    @property
    def syndrome_bytes(self) -> int:
        """Bytes at ``syndrome``: from the Tanner matrix, or the explicit ``syndrome_bytes``."""
        if self.tanner is not None:
            return self.tanner.syndrome_bytes
        return self._explicit_value(self.syndrome_bytes_attr, "syndrome_bytes")

    @property
    def correction_bytes(self) -> int:
        """Bytes at ``correction``: from the Tanner matrix, or the explicit ``correction_bytes``."""
        if self.tanner is not None:
            return self.tanner.correction_bytes
        return self._explicit_value(self.correction_bytes_attr, "correction_bytes")

    def verify_(self) -> None:
        implicit = [n for n in IMPLICIT_PROPS if n in self.properties]
        explicit = [n for n in EXPLICIT_PROPS if n in self.properties]
        if implicit and explicit:
            raise VerifyException(
                f"'bqec.decode' mixes the two forms: it has {_listed(implicit)} (implicit form) and "
                f"{_listed(explicit)} (explicit form); give either {_FORMS}, not both"
            )
        if not implicit and not explicit:
            raise VerifyException(f"'bqec.decode' needs either {_FORMS}; it has neither")
        if implicit:
            missing = [n for n in IMPLICIT_PROPS if n not in implicit]
            if missing:
                raise VerifyException(
                    f"'bqec.decode' has {_listed(implicit)} but is missing {_listed(missing)}; "
                    f"the implicit form needs {_IMPLICIT} (or give {_EXPLICIT} instead for an explicit decode)"
                )
            assert self.check_type is not None
            if self.check_type.data not in CHECK_TYPES:
                raise VerifyException(
                    f"'bqec.decode' check_type must be \"x\" or \"z\", got {self.check_type.data!r}"
                )
        else:
            missing = [n for n in EXPLICIT_PROPS if n not in explicit]
            if missing:
                raise VerifyException(
                    f"'bqec.decode' has {_listed(explicit)} but is missing {_listed(missing)}; "
                    f"the explicit form needs {_EXPLICIT} (or give {_IMPLICIT} instead for an implicit QEC decode)"
                )
            assert self.decoder_id_attr is not None
            decoder_id = self.decoder_id_attr.value.data
            if not 0 <= decoder_id < lib.BL_MAX_DECODERS:
                raise VerifyException(f"'bqec.decode' decoder_id must be in [0, {lib.BL_MAX_DECODERS}), got {decoder_id}")
            for name, attr in (("syndrome_bytes", self.syndrome_bytes_attr),
                               ("correction_bytes", self.correction_bytes_attr)):
                assert attr is not None
                if attr.value.data < 1:
                    raise VerifyException(f"'bqec.decode' {name} must be positive, got {attr.value.data}")
        if self.coprocessor is not None and not self.coprocessor.data:
            raise VerifyException("'bqec.decode' coprocessor, when given, must be a non-empty node name")


BQEC = Dialect("bqec", [DecodeOp], [TannerAttr])
