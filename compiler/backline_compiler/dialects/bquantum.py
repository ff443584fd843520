"""The ``bquantum`` dialect: gates, measurements and noise on an open quantum-device runtime.

(Catalyst owns ``quantum``; this one is Backline's, and maps one-to-one onto the device
runtime ABI of ``backline/device.h``.)

Type ``!bquantum.device`` (:class:`DeviceType`): a handle to an open device runtime (a
``bl_device *``). The host opens the device and passes the pointer in.

Ops (wires are ``i32`` qubit numbers, gate parameters ``f64`` angles)::

    %d = bquantum.device_from_ptr %p : !llvm.ptr -> !bquantum.device
    bquantum.gate "H" %d, %q0 : !bquantum.device
    bquantum.gate "CNOT" %d, %q0, %q1 : !bquantum.device
    bquantum.gate "RZ" %d, %q0 (%theta) : !bquantum.device
    %m = bquantum.measure %d, %q0 : !bquantum.device -> i1
    bquantum.reset %d, %q0
    bquantum.noise "depolarize1" %d, %q0 {p = 0.01 : f64}
    bquantum.reset_all %d
    bquantum.apply_mask "X" %d, %first, %mask {nbits = 7 : i32} : !bquantum.device

``bquantum.apply_mask`` applies gate ``X`` or ``Z`` (:data:`MASK_GATES`) to wire ``%first + q``
for every set bit ``q < nbits`` of the bit-packed mask at ``%mask: !llvm.ptr`` (bit ``q`` in
byte ``q // 8`` at bit ``q % 8``) -- a decoder's correction (``bl_dev_apply_mask``).

Gate names (:data:`GATES`) are upper case and channel names (:data:`NOISE_CHANNELS`) lower
case; either is accepted in any case in the custom form and printed canonical. The
verifiers check the name, the number of wires and of parameters, and ``0 <= p <= 1``.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import I32, Float64Type, FloatAttr, IntegerAttr, StringAttr, f64, i1, i32
from xdsl.dialects.llvm import LLVMPointerType
from xdsl.ir import (
    Attribute,
    Dialect,
    Operation,
    ParametrizedAttribute,
    SSAValue,
    TypeAttribute,
)
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    var_operand_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

PTR = LLVMPointerType()

#: gate name -> (wires, parameters), as listed in ``bl_gate`` (backline/device.h)
GATES: dict[str, tuple[int, int]] = {
    "I": (1, 0), "X": (1, 0), "Y": (1, 0), "Z": (1, 0), "H": (1, 0), "S": (1, 0), "SDG": (1, 0), "SX": (1, 0),
    "CNOT": (2, 0), "CZ": (2, 0), "SWAP": (2, 0),
    "RX": (1, 1), "RY": (1, 1), "RZ": (1, 1),
}

#: the gates ``bquantum.apply_mask`` may apply
MASK_GATES = ("X", "Z")

#: noise channel name -> wires, as listed in ``bl_noise`` (backline/device.h)
NOISE_CHANNELS: dict[str, int] = {"x_flip": 1, "z_flip": 1, "y_flip": 1, "depolarize1": 1, "depolarize2": 2}


@irdl_attr_definition
class DeviceType(ParametrizedAttribute, TypeAttribute):
    """``!bquantum.device``: an open device runtime (a ``bl_device *``)."""

    name = "bquantum.device"


DEVICE = DeviceType()


def _s(value: str | StringAttr) -> StringAttr:
    return StringAttr(value) if isinstance(value, str) else value


def _check_name(op: Operation, what: str, name: str, table: Sequence[str], canonical: str) -> None:
    if name in table:
        return
    if canonical in table:
        raise VerifyException(f"'{op.name}' {what} {name!r} must be written {canonical!r}")
    raise VerifyException(f"'{op.name}' {what} {name!r} is unknown; choose from {', '.join(table)}")


def _check_distinct(op: Operation, wires: Sequence[SSAValue]) -> None:
    if len(wires) == 2 and wires[0] is wires[1]:
        raise VerifyException(f"'{op.name}' needs two distinct wires, got the same value twice")


@irdl_op_definition
class DeviceFromPtrOp(IRDLOperation):
    """The device runtime the host opened, from its ``bl_device *``."""

    name = "bquantum.device_from_ptr"

    ptr = operand_def(PTR)
    device = result_def(DEVICE)

    assembly_format = "$ptr attr-dict `:` type($ptr) `->` type($device)"

    def __init__(self, ptr: SSAValue | Operation):
        super().__init__(operands=[ptr], result_types=[DEVICE])


@irdl_op_definition
class GateOp(IRDLOperation):
    """Apply gate ``gate`` to ``wires`` (control first), with angle ``params`` for RX/RY/RZ."""

    name = "bquantum.gate"

    device = operand_def(DEVICE)
    wires = var_operand_def(I32)
    params = var_operand_def(Float64Type)
    gate = prop_def(StringAttr)

    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(
        self,
        gate: str | StringAttr,
        device: SSAValue | Operation,
        wires: Sequence[SSAValue | Operation],
        params: Sequence[SSAValue | Operation] = (),
        attributes: dict[str, Attribute] | None = None,
    ):
        name = gate.upper() if isinstance(gate, str) else gate
        super().__init__(operands=[device, wires, params], properties={"gate": _s(name)}, attributes=attributes)

    @property
    def gate_name(self) -> str:
        return self.gate.data

    def verify_(self) -> None:
        name = self.gate.data
        _check_name(self, "gate", name, GATES, name.upper())
        want_wires, want_params = GATES[name]
        if len(self.wires) != want_wires:
            raise VerifyException(
                f"'bquantum.gate' {name} acts on {want_wires} wire{'s' if want_wires > 1 else ''}, got {len(self.wires)}")
        if len(self.params) != want_params:
            raise VerifyException(f"'bquantum.gate' {name} takes {want_params} parameter(s), got {len(self.params)}")
        _check_distinct(self, self.wires)

    @classmethod
    def parse(cls, parser: Parser) -> GateOp:
        gate = parser.parse_str_literal(" (the gate name)")
        device = parser.parse_unresolved_operand()
        wires = []
        while parser.parse_optional_punctuation(",") is not None:
            wires.append(parser.resolve_operand(parser.parse_unresolved_operand(), i32))
        params: list[SSAValue] = []
        if parser.parse_optional_punctuation("(") is not None:
            params.append(parser.resolve_operand(parser.parse_unresolved_operand(), f64))
            while parser.parse_optional_punctuation(",") is not None:
                params.append(parser.resolve_operand(parser.parse_unresolved_operand(), f64))
            parser.parse_punctuation(")")
        attributes = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        dev = parser.resolve_operand(device, parser.parse_type())
        return cls(gate, dev, wires, params, attributes)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_string_literal(self.gate.data)
        printer.print_string(" ")
        printer.print_list([self.device, *self.wires], printer.print_operand)
        if self.params:
            printer.print_string(" (")
            printer.print_list(self.params, printer.print_operand)
            printer.print_string(")")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.device.type)


@irdl_op_definition
class MeasureOp(IRDLOperation):
    """Measure ``wire`` in the Z basis (the state collapses); the outcome as an ``i1``."""

    name = "bquantum.measure"

    device = operand_def(DEVICE)
    wire = operand_def(I32)
    outcome = result_def(i1)

    assembly_format = "$device `,` $wire attr-dict `:` type($device) `->` type($outcome)"

    def __init__(self, device: SSAValue | Operation, wire: SSAValue | Operation):
        super().__init__(operands=[device, wire], result_types=[i1])


@irdl_op_definition
class ResetOp(IRDLOperation):
    """Put ``wire`` in |0>."""

    name = "bquantum.reset"

    device = operand_def(DEVICE)
    wire = operand_def(I32)

    assembly_format = "$device `,` $wire attr-dict"

    def __init__(self, device: SSAValue | Operation, wire: SSAValue | Operation):
        super().__init__(operands=[device, wire])


@irdl_op_definition
class NoiseOp(IRDLOperation):
    """Apply noise channel ``channel`` with error probability ``p`` to ``wires``."""

    name = "bquantum.noise"

    device = operand_def(DEVICE)
    wires = var_operand_def(I32)
    channel = prop_def(StringAttr)
    p = prop_def(FloatAttr[Float64Type])

    def __init__(
        self,
        channel: str | StringAttr,
        device: SSAValue | Operation,
        wires: Sequence[SSAValue | Operation],
        p: float | FloatAttr,
        attributes: dict[str, Attribute] | None = None,
    ):
        name = channel.lower() if isinstance(channel, str) else channel
        prob = FloatAttr(float(p), f64) if isinstance(p, int | float) else p
        super().__init__(operands=[device, wires], properties={"channel": _s(name), "p": prob}, attributes=attributes)

    def verify_(self) -> None:
        name = self.channel.data
        _check_name(self, "channel", name, NOISE_CHANNELS, name.lower())
        want = NOISE_CHANNELS[name]
        if len(self.wires) != want:
            raise VerifyException(
                f"'bquantum.noise' {name} acts on {want} wire{'s' if want > 1 else ''}, got {len(self.wires)}")
        p = self.p.value.data
        if not 0.0 <= p <= 1.0:  # also rejects NaN
            raise VerifyException(f"'bquantum.noise' p must be in [0, 1], got {p}")
        _check_distinct(self, self.wires)

    @classmethod
    def parse(cls, parser: Parser) -> NoiseOp:
        channel = parser.parse_str_literal(" (the noise channel)")
        device = parser.resolve_operand(parser.parse_unresolved_operand(), DEVICE)
        wires = []
        while parser.parse_optional_punctuation(",") is not None:
            wires.append(parser.resolve_operand(parser.parse_unresolved_operand(), i32))
        pos = parser.pos
        attributes = parser.parse_optional_attr_dict()
        p = attributes.pop("p", None)
        if not isinstance(p, FloatAttr) or p.type != f64:
            parser.raise_error("'bquantum.noise' needs {p = <probability> : f64}", pos, parser.pos)
        return cls(channel, device, wires, p, attributes)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_string_literal(self.channel.data)
        printer.print_string(" ")
        printer.print_list([self.device, *self.wires], printer.print_operand)
        printer.print_string(" ")
        printer.print_attr_dict({"p": self.p, **self.attributes})


@irdl_op_definition
class ResetAllOp(IRDLOperation):
    """Start a new shot: every qubit back to |0>."""

    name = "bquantum.reset_all"

    device = operand_def(DEVICE)

    assembly_format = "$device attr-dict"

    def __init__(self, device: SSAValue | Operation):
        super().__init__(operands=[device])


@irdl_op_definition
class ApplyMaskOp(IRDLOperation):
    """Apply ``gate`` (X or Z) to wire ``first_wire + q`` for each set bit ``q`` of the mask at ``mask``."""

    name = "bquantum.apply_mask"

    device = operand_def(DEVICE)
    first_wire = operand_def(I32)
    mask = operand_def(PTR)
    gate = prop_def(StringAttr)
    nbits = prop_def(IntegerAttr[I32])

    def __init__(
        self,
        gate: str | StringAttr,
        device: SSAValue | Operation,
        first_wire: SSAValue | Operation,
        mask: SSAValue | Operation,
        nbits: int | IntegerAttr,
        attributes: dict[str, Attribute] | None = None,
    ):
        name = gate.upper() if isinstance(gate, str) else gate
        bits = IntegerAttr(nbits, i32) if isinstance(nbits, int) else nbits
        super().__init__(operands=[device, first_wire, mask], properties={"gate": _s(name), "nbits": bits},
                         attributes=attributes)

    def verify_(self) -> None:
        name = self.gate.data
        _check_name(self, "gate", name, MASK_GATES, name.upper())
        if self.nbits.value.data < 0:
            raise VerifyException(f"'bquantum.apply_mask' nbits must be >= 0, got {self.nbits.value.data}")

    @classmethod
    def parse(cls, parser: Parser) -> ApplyMaskOp:
        gate = parser.parse_str_literal(" (the gate name)")
        device = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        first = parser.resolve_operand(parser.parse_unresolved_operand(), i32)
        parser.parse_punctuation(",")
        mask = parser.resolve_operand(parser.parse_unresolved_operand(), PTR)
        pos = parser.pos
        attributes = parser.parse_optional_attr_dict()
        nbits = attributes.pop("nbits", None)
        if not isinstance(nbits, IntegerAttr):
            parser.raise_error("'bquantum.apply_mask' needs {nbits = <bits in the mask>}", pos, parser.pos)
        parser.parse_punctuation(":")
        dev = parser.resolve_operand(device, parser.parse_type())
        return cls(gate, dev, first, mask, nbits.value.data, attributes)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_string_literal(self.gate.data)
        printer.print_string(" ")
        printer.print_list([self.device, self.first_wire, self.mask], printer.print_operand)
        printer.print_string(" ")
        printer.print_attr_dict({"nbits": self.nbits, **self.attributes})
        printer.print_string(" : ")
        printer.print_attribute(self.device.type)


BQuantum = Dialect(
    "bquantum",
    [DeviceFromPtrOp, GateOp, MeasureOp, ResetOp, NoiseOp, ResetAllOp, ApplyMaskOp],
    [DeviceType],
)
