"""encode-steane: a logical bquantum circuit becomes a Steane-encoded physical one, with an
error-correction round after every logical gate.

Input: bquantum ops on *logical* wires ``0..L-1`` (each wire an ``i32`` ``llvm.mlir.constant``;
anything else is an error). ``L`` is the largest logical wire of the module plus one.
Output, on physical wires: logical qubit ``l`` is data wires ``7l..7l+6``; three ancillas
``7L, 7L+1, 7L+2`` (one per check row) are reset before each use. A device needs ``7L + 3``
qubits.

Steane code: ``Hx = Hz = H`` (:data:`H`), logicals ``Lx = Lz`` on data qubits {0, 1, 4}.

* Preparation of ``|0_L>`` before the first use of a logical qubit in program order (again
  after a ``bquantum.reset_all``, and after the qubit was measured -- then its data wires are
  reset first): H on data 0, 4, 6, then CNOT 0->{1,2,3}, 4->{1,2,5}, 6->{2,3,5};
* logical gates: ``H`` = 7 x H, ``X`` / ``Z`` = X / Z on {0,1,4}, ``S`` = 7 x SDG, ``CNOT`` =
  7 transversal CNOTs; any other gate (and ``bquantum.reset`` / ``bquantum.noise`` on a
  logical wire) is an error;
* after each logical gate, one round on every block it touched: Z-check extraction (per row
  ``r``: reset ancilla ``r``, CNOT data -> ancilla, measure), the 3 bits packed into a syndrome
  byte (``zext``/``shl``/``or``, stored to a stack slot), ``bqec.decode {check_type = "z"}``,
  ``bquantum.apply_mask "X"``; then X-check extraction (reset, H, CNOT ancilla -> data, H,
  measure), ``check_type = "x"`` decode, ``bquantum.apply_mask "Z"``;
* ``bquantum.measure`` of a logical wire: its 7 data wires are measured, packed into a byte,
  the Hz syndrome computed with ``llvm.xor``, decoded (``check_type = "z"``), the byte xor-ed
  with the correction, and the outcome is the parity of bits {0, 1, 4};
* ``bquantum.reset_all`` is kept (a new shot).

Option ``apply-correction`` (default true): when false, decodes still run but no
``bquantum.apply_mask`` is emitted and the final readout is not corrected (a baseline).

Preparation follows program order only: the pass does not analyse control flow, so a logical
qubit first used in one branch and then in another is prepared once, in the first.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i1, i8, i32, i64
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.utils.exceptions import PassFailedException

from backline_core.sdk import STEANE_H, STEANE_LOGICAL

from ..dialects import bqec
from ..dialects import bquantum as q

#: The Steane code's check matrix (Hx = Hz), from its one source (backline/steane.h).
H: tuple[tuple[int, ...], ...] = STEANE_H
#: Support of the logical X and Z operators.
LOGICAL: tuple[int, ...] = STEANE_LOGICAL
#: |0_L> preparation: H on the pivots, then CNOT pivot -> targets.
PREP = ((0, (1, 2, 3)), (4, (1, 2, 5)), (6, (2, 3, 5)))
N = 7
TANNER = bqec.TannerAttr.from_matrix(H)
NAME = "encode-steane"


def _fail(message: str) -> PassFailedException:
    return PassFailedException(f"{NAME}: {message}")


def logical_wire(op: Operation, wire: SSAValue) -> int:
    owner = wire.owner
    if not (isinstance(owner, llvm.ConstantOp) and isinstance(owner.value, IntegerAttr)):
        raise _fail(f"'{op.name}' needs its logical wires as llvm.mlir.constant i32 values")
    value = owner.value.value.data
    if value < 0:
        raise _fail(f"'{op.name}' logical wire {value} is negative")
    return value


class _Builder:
    """Inserts physical ops before ``anchor`` (the logical op being encoded)."""

    def __init__(self, anchor: Operation, device: SSAValue, slots: tuple[SSAValue, SSAValue], ancilla0: int,
                 correct: bool):
        self.anchor, self.device, self.correct = anchor, device, correct
        self.syndrome, self.correction = slots
        self.ancilla0 = ancilla0
        self.constants: dict[tuple[int, object], SSAValue] = {}

    def insert(self, op: Operation) -> Operation:
        Rewriter.insert_op(op, InsertPoint.before(self.anchor))
        return op

    def const(self, value: int, type_=i32) -> SSAValue:
        """One ``llvm.mlir.constant`` per value and type for this logical op."""
        key = (value, type_)
        if key not in self.constants:
            self.constants[key] = self.insert(llvm.ConstantOp(IntegerAttr(value, type_), type_)).result
        return self.constants[key]

    def gate(self, name: str, *wires: int) -> None:
        self.insert(q.GateOp(name, self.device, [self.const(w) for w in wires]))

    def reset(self, wire: int) -> None:
        self.insert(q.ResetOp(self.device, self.const(wire)))

    def measure(self, wire: int) -> SSAValue:
        return self.insert(q.MeasureOp(self.device, self.const(wire))).outcome

    def pack(self, bits: list[SSAValue]) -> SSAValue:
        """Bit ``i`` of the ``i8`` result is ``bits[i]``."""
        packed: SSAValue | None = None
        for i, bit in enumerate(bits):
            value = self.insert(llvm.ZExtOp(bit, i8)).res
            if i:
                value = self.insert(llvm.ShlOp(value, self.const(i, i8))).res
            packed = value if packed is None else self.insert(llvm.OrOp(packed, value)).res
        assert packed is not None
        return packed

    def decode(self, syndrome: SSAValue, check_type: str) -> None:
        self.insert(llvm.StoreOp(syndrome, self.syndrome))
        self.insert(bqec.DecodeOp(self.syndrome, self.correction, TANNER, check_type))

    def prepare(self, block: int, reset_first: bool) -> None:
        base = N * block
        if reset_first:
            for k in range(N):
                self.reset(base + k)
        for pivot, _ in PREP:
            self.gate("H", base + pivot)
        for pivot, targets in PREP:
            for t in targets:
                self.gate("CNOT", base + pivot, base + t)

    def correction_round(self, block: int) -> None:
        base = N * block
        # Z checks find X errors: corrected with X.
        bits = []
        for r, row in enumerate(H):
            a = self.ancilla0 + r
            self.reset(a)
            for k, h in enumerate(row):
                if h:
                    self.gate("CNOT", base + k, a)
            bits.append(self.measure(a))
        self.decode(self.pack(bits), "z")
        if self.correct:
            self.insert(q.ApplyMaskOp("X", self.device, self.const(base), self.correction, N))
        # X checks find Z errors: corrected with Z.
        bits = []
        for r, row in enumerate(H):
            a = self.ancilla0 + r
            self.reset(a)
            self.gate("H", a)
            for k, h in enumerate(row):
                if h:
                    self.gate("CNOT", a, base + k)
            self.gate("H", a)
            bits.append(self.measure(a))
        self.decode(self.pack(bits), "x")
        if self.correct:
            self.insert(q.ApplyMaskOp("Z", self.device, self.const(base), self.correction, N))

    def logical_gate(self, name: str, blocks: list[int]) -> None:
        match name, blocks:
            case "H", [b]:
                for k in range(N):
                    self.gate("H", N * b + k)
            case "S", [b]:
                for k in range(N):
                    self.gate("SDG", N * b + k)
            case ("X" | "Z"), [b]:
                for k in LOGICAL:
                    self.gate(name, N * b + k)
            case "CNOT", [c, t]:
                for k in range(N):
                    self.gate("CNOT", N * c + k, N * t + k)
            case _:
                raise _fail(f"logical gate {name} is not supported on the Steane code "
                            "(supported: H, S, X, Z, CNOT; non-Clifford gates need magic states)")
        for b in blocks:
            self.correction_round(b)

    def logical_measure(self, block: int) -> SSAValue:
        base = N * block
        bits = [self.measure(base + k) for k in range(N)]
        parities = []
        for row in H:
            support = [bits[k] for k, h in enumerate(row) if h]
            parity = support[0]
            for bit in support[1:]:
                parity = self.insert(llvm.XOrOp(parity, bit)).res
            parities.append(parity)
        self.decode(self.pack(parities), "z")
        data = self.pack(bits)
        if self.correct:
            mask = self.insert(llvm.LoadOp(self.correction, i8)).dereferenced_value
            data = self.insert(llvm.XOrOp(data, mask)).res
        logical = self.insert(llvm.AndOp(data, self.const(sum(1 << k for k in LOGICAL), i8))).res
        parity = logical
        for k in LOGICAL[1:]:
            shifted = self.insert(llvm.LShrOp(logical, self.const(k, i8))).res
            parity = self.insert(llvm.XOrOp(parity, shifted)).res
        return self.insert(llvm.TruncOp(parity, i1)).res


def _entry_slots(fn: Operation) -> tuple[SSAValue, SSAValue]:
    one = llvm.ConstantOp(IntegerAttr(1, i64), i64)
    syndrome = llvm.AllocaOp(one.result, i8)
    correction = llvm.AllocaOp(one.result, i8)
    for alloca in (syndrome, correction):
        del alloca.properties["alignment"]
    syndrome.res.name_hint, correction.res.name_hint = "syndrome", "correction"
    Rewriter.insert_op([one, syndrome, correction], InsertPoint.at_start(fn.regions[0].blocks.first))
    return syndrome.res, correction.res


@dataclass(frozen=True)
class EncodeSteane(ModulePass):
    """Encode a logical bquantum circuit in the Steane code (see the module docstring)."""

    name = NAME

    apply_correction: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        logical_ops = [o for o in op.walk() if isinstance(o, q.GateOp | q.MeasureOp | q.ResetOp | q.NoiseOp)]
        if not logical_ops:
            return
        wires: dict[Operation, list[int]] = {}
        for o in logical_ops:
            if isinstance(o, q.ResetOp | q.NoiseOp):
                raise _fail(f"'{o.name}' on a logical wire is not supported (reset_all starts a new shot; "
                            "noise goes on the physical circuit, e.g. with inject-noise)")
            if isinstance(o, q.GateOp) and o.params:
                raise _fail(f"logical gate {o.gate.data} is not supported on the Steane code "
                            "(supported: H, S, X, Z, CNOT; non-Clifford gates need magic states)")
            wires[o] = [logical_wire(o, w) for w in (o.wires if isinstance(o, q.GateOp) else [o.wire])]
        ancilla0 = N * (max(w for ws in wires.values() for w in ws) + 1)

        functions = [f for f in op.walk() if isinstance(f, llvm.FuncOp | func.FuncOp) and f.regions[0].blocks]
        for fn in functions:
            ops = [o for o in fn.walk() if isinstance(o, q.GateOp | q.MeasureOp | q.ResetAllOp)]
            if not any(not isinstance(o, q.ResetAllOp) for o in ops):
                continue
            slots = _entry_slots(fn)
            prepared: set[int] = set()
            measured: set[int] = set()
            for o in ops:
                if isinstance(o, q.ResetAllOp):
                    prepared.clear()
                    measured.clear()
                    continue
                b = _Builder(o, o.device, slots, ancilla0, self.apply_correction)
                for w in wires[o]:
                    if w not in prepared:
                        b.prepare(w, reset_first=w in measured)
                        prepared.add(w)
                        measured.discard(w)
                if isinstance(o, q.GateOp):
                    b.logical_gate(o.gate.data, wires[o])
                    Rewriter.erase_op(o)
                else:
                    block = wires[o][0]
                    result = b.logical_measure(block)
                    prepared.discard(block)
                    measured.add(block)
                    if o.outcome.name_hint:
                        result.name_hint = o.outcome.name_hint
                    o.outcome.replace_all_uses_with(result)
                    Rewriter.erase_op(o)
