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

Option ``extraction`` (default ``bare``, the rounds above) chooses the syndrome extraction:

* ``bare``: one ancilla per check, corrected in real time after every round (not
  fault-tolerant: one ancilla fault spreads to two data errors).
* ``flag``: every weight-4 check is measured with a syndrome ancilla and a flag ancilla
  (Chao & Reichardt 2018: the flag's two CNOTs sit after the first and before the last data
  CNOT, so a fault that spreads to two data errors fires the flag). ``|0_L>`` gets a
  verification measurement of logical ``Z`` (a preparation fault that leaves a weight-2
  ``X`` error flips it). No correction is applied between rounds: the errors are a Pauli
  frame, and each shot is decoded once, at its last logical measurement, over *every*
  detector of the shot -- each check compared with its previous value carried through the
  transversal gates (``H`` swaps a block's X and Z checks, ``S`` multiplies X by Z,
  ``CNOT c->t`` multiplies ``X_c`` by ``X_t`` and ``Z_t`` by ``Z_c``), the flags, the
  verifications and the measured blocks' final Z checks. That decode is the explicit
  ``bqec.decode`` (``decoder_id`` 0, the detectors packed little-endian, one reply bit per
  logical outcome in measurement order, xor-ed into it); it carries ``backline.detectors``
  and ``backline.observables`` (indices of the shot's measurements), from which
  :func:`backline_compiler.detector_model.detector_error_models` builds its detector error
  model, so the decoder is any decoder plugin that builds from one. A logical
  ``I`` is a round alone (a memory step). A shot's logical ops must sit in one block (the
  decode indexes its measurements in program order), and a logical outcome may feed only
  side-effect-free ops before the shot's last logical measurement (they are moved after it).
* ``steane`` (a verified ancilla block, transversal CNOT and measurement) is not built.

Preparation follows program order only: the pass does not analyse control flow, so a logical
qubit first used in one branch and then in another is prepared once, in the first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import ArrayAttr, DenseArrayBase, IntegerAttr, ModuleOp, i1, i8, i32, i64
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.traits import is_side_effect_free
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
#: flag extraction's check of |0_L>: logical Z on these data qubits (a weight-3 representative). One
#: fault in PREP leaves at worst X on {0,3}, {4,5} or {5,6}, each a weight-1 error times logical X that
#: only a representative meeting it in one qubit tells apart from that weight-1 error; {0,1,4} does not.
VERIFY = (0, 2, 5)
N = 7
TANNER = bqec.TannerAttr.from_matrix(H)
NAME = "encode-steane"
#: the syndrome extraction schemes (option ``extraction``)
EXTRACTIONS = ("bare", "flag")
#: a flag-extraction decode's attributes: per detector, and per logical outcome (in measurement order),
#: the indices of the shot's measurements it is the parity of
DETECTORS_ATTR, OBSERVABLES_ATTR = "backline.detectors", "backline.observables"


@dataclass(frozen=True)
class Bit:
    """A measurement outcome and its index among the shot's measurements."""

    value: SSAValue
    index: int


@dataclass
class _Shot:
    """What flag extraction tracks over one shot: its measurements, the detectors so far, and
    each live check's reference (the measurements whose parity the check's next value should equal)."""

    measurements: int = 0
    detectors: list[list[Bit]] = field(default_factory=list)
    refs: dict[tuple[int, str, int], dict[int, Bit]] = field(default_factory=dict)

    def detect(self, bits: list[Bit], key: tuple[int, str, int] | None = None) -> None:
        """A detector: ``bits`` against the check's reference, which ``bits`` then become."""
        ref = self.refs.get(key, {}) if key else {}
        self.detectors.append(list(_xor(ref, {b.index: b for b in bits}).values()))
        if key:
            self.refs[key] = {b.index: b for b in bits}

    def prepared(self, block: int) -> None:
        for r in range(len(H)):
            for t in "zx":
                self.refs[block, t, r] = {}

    def multiply(self, block: int, check: str, by_block: int, by_check: str) -> None:
        """Check ``check`` of ``block`` now reads as its old value times ``by_check`` of ``by_block``."""
        for r in range(len(H)):
            key = (block, check, r)
            self.refs[key] = _xor(self.refs[key], self.refs[by_block, by_check, r])


def _xor(a: dict[int, Bit], b: dict[int, Bit]) -> dict[int, Bit]:
    out = dict(a)
    for k, bit in b.items():
        if k in out:
            del out[k]
        else:
            out[k] = bit
    return out


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
                 correct: bool, shot: _Shot | None = None):
        self.anchor, self.device, self.correct = anchor, device, correct
        self.syndrome, self.correction = slots
        self.ancilla0 = ancilla0
        self.constants: dict[tuple[int, object], SSAValue] = {}
        #: flag extraction's record of the shot (None: bare extraction)
        self.shot = shot

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

    def record(self, wire: int) -> Bit:
        """Measure ``wire``, numbered among the shot's measurements."""
        assert self.shot is not None
        bit = Bit(self.measure(wire), self.shot.measurements)
        self.shot.measurements += 1
        return bit

    def parity(self, bits: list[SSAValue]) -> SSAValue:
        value = bits[0]
        for bit in bits[1:]:
            value = self.insert(llvm.XOrOp(value, bit)).res
        return value

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
        if self.shot is not None:
            # verification: logical Z of |0_L> is +1; a preparation fault leaving a weight-2 X error flips it
            a = self.ancilla0
            self.reset(a)
            for k in VERIFY:
                self.gate("CNOT", base + k, a)
            self.shot.detect([self.record(a)])
            self.shot.prepared(block)

    def flagged_round(self, block: int) -> None:
        """Every check of ``block`` with a syndrome and a flag ancilla; detectors, no correction."""
        assert self.shot is not None
        base, a, f = N * block, self.ancilla0, self.ancilla0 + 1
        for check in "zx":
            for r, row in enumerate(H):
                d = [base + k for k, h in enumerate(row) if h]
                self.reset(a)
                self.reset(f)
                # Z check: data -> a, the flag (|+>) -> a; X check: a (|+>) -> data, a -> the flag (|0>)
                self.gate("H", f if check == "z" else a)
                pairs = [(d[0], a), (f, a), (d[1], a), (d[2], a), (f, a), (d[3], a)] if check == "z" else \
                        [(a, d[0]), (a, f), (a, d[1]), (a, d[2]), (a, f), (a, d[3])]
                for c, t in pairs:
                    self.gate("CNOT", c, t)
                self.gate("H", f if check == "z" else a)
                self.shot.detect([self.record(a)], (block, check, r))
                self.shot.detect([self.record(f)])

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
            case "I", [_] if self.shot is not None:
                pass
            case _:
                raise _fail(f"logical gate {name} is not supported on the Steane code "
                            f"(supported: H, S, X, Z, CNOT{', I' if self.shot is not None else ''}; "
                            "non-Clifford gates need magic states)")
        if self.shot is not None:
            self.carry_frame(name, blocks)
            for b in blocks:
                self.flagged_round(b)
            return
        for b in blocks:
            self.correction_round(b)

    def carry_frame(self, name: str, blocks: list[int]) -> None:
        """The checks' references through a transversal gate (what each check now reads as)."""
        assert self.shot is not None
        refs = self.shot.refs
        if name == "H":
            (b,) = blocks
            for r in range(len(H)):
                refs[b, "z", r], refs[b, "x", r] = refs[b, "x", r], refs[b, "z", r]
        elif name == "S":
            self.shot.multiply(blocks[0], "x", blocks[0], "z")
        elif name == "CNOT":
            c, t = blocks
            self.shot.multiply(c, "x", t, "x")
            self.shot.multiply(t, "z", c, "z")

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

    def flagged_measure(self, block: int) -> list[Bit]:
        """Measure the block: its final Z checks become detectors; returns its logical bits."""
        assert self.shot is not None
        base = N * block
        bits = [self.record(base + k) for k in range(N)]
        for r, row in enumerate(H):
            self.shot.detect([bits[k] for k, h in enumerate(row) if h], (block, "z", r))
        for r in range(len(H)):
            for t in "zx":
                del self.shot.refs[block, t, r]
        return [bits[k] for k in LOGICAL]

    def flagged_decode(self, logicals: list[list[Bit]], buffer: SSAValue, correction: SSAValue) -> list[SSAValue]:
        """One decode over every detector of the shot; each logical outcome, corrected by its reply bit."""
        assert self.shot is not None
        detectors = self.shot.detectors
        values = [self.parity([b.value for b in det]) for det in detectors]
        nbytes, out_bytes = (len(values) + 7) // 8, (len(logicals) + 7) // 8
        for j in range(nbytes):
            slot = buffer if j == 0 else self.insert(llvm.GEPOp(buffer, [j], i8)).result
            self.insert(llvm.StoreOp(self.pack(values[8 * j: 8 * j + 8]), slot))
        decode = self.insert(bqec.DecodeOp.explicit(buffer, correction, decoder_id=0, syndrome_bytes=nbytes,
                                                    correction_bytes=out_bytes))
        decode.attributes[DETECTORS_ATTR] = _index_lists(detectors)
        decode.attributes[OBSERVABLES_ATTR] = _index_lists(logicals)
        outcomes = []
        for i, bits in enumerate(logicals):
            outcome = self.parity([b.value for b in bits])
            if self.correct:
                slot = correction if i < 8 else self.insert(llvm.GEPOp(correction, [i // 8], i8)).result
                byte = self.insert(llvm.LoadOp(slot, i8)).dereferenced_value
                if i % 8:
                    byte = self.insert(llvm.LShrOp(byte, self.const(i % 8, i8))).res
                outcome = self.insert(llvm.XOrOp(outcome, self.insert(llvm.TruncOp(byte, i1)).res)).res
            outcomes.append(outcome)
        return outcomes


def _index_lists(rows: list[list[Bit]]) -> ArrayAttr:
    return ArrayAttr([DenseArrayBase.from_list(i32, sorted(b.index for b in row)) for row in rows])


def _entry_slots(fn: Operation) -> tuple[SSAValue, SSAValue]:
    one = llvm.ConstantOp(IntegerAttr(1, i64), i64)
    syndrome = llvm.AllocaOp(one.result, i8)
    correction = llvm.AllocaOp(one.result, i8)
    for alloca in (syndrome, correction):
        del alloca.properties["alignment"]
    syndrome.res.name_hint, correction.res.name_hint = "syndrome", "correction"
    Rewriter.insert_op([one, syndrome, correction], InsertPoint.at_start(fn.regions[0].blocks.first))
    return syndrome.res, correction.res


def _buffer(fn: Operation, name: str) -> tuple[SSAValue, llvm.ConstantOp]:
    """A stack buffer at the function's entry, and its byte count (grown with :func:`_grow`)."""
    size = llvm.ConstantOp(IntegerAttr(1, i64), i64)
    buffer = llvm.AllocaOp(size.result, i8)
    del buffer.properties["alignment"]
    buffer.res.name_hint = name
    Rewriter.insert_op([size, buffer], InsertPoint.at_start(fn.regions[0].blocks.first))
    return buffer.res, size


@dataclass(frozen=True)
class EncodeSteane(ModulePass):
    """Encode a logical bquantum circuit in the Steane code (see the module docstring)."""

    name = NAME

    apply_correction: bool = True
    extraction: str = "bare"

    def __post_init__(self) -> None:
        if self.extraction not in EXTRACTIONS:
            hint = (" (Steane-style extraction with a verified ancilla block is not built)"
                    if self.extraction == "steane" else "")
            raise _fail(f"unknown extraction {self.extraction!r}; choose one of {', '.join(EXTRACTIONS)}{hint}")

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
            flag = self.extraction == "flag"
            if flag:
                last = _last_measures(ops)
                buffers = (_buffer(fn, "detectors"), _buffer(fn, "observables"))
            shot = _Shot() if flag else None
            pending: list[tuple[q.MeasureOp, list[Bit]]] = []
            prepared: set[int] = set()
            measured: set[int] = set()
            for o in ops:
                if isinstance(o, q.ResetAllOp):
                    prepared.clear()
                    measured.clear()
                    shot = _Shot() if flag else None
                    continue
                b = _Builder(o, o.device, slots, ancilla0, self.apply_correction, shot)
                for w in wires[o]:
                    if w not in prepared:
                        b.prepare(w, reset_first=w in measured)
                        prepared.add(w)
                        measured.discard(w)
                if isinstance(o, q.GateOp):
                    b.logical_gate(o.gate.data, wires[o])
                    Rewriter.erase_op(o)
                    continue
                block = wires[o][0]
                prepared.discard(block)
                measured.add(block)
                if shot is None:
                    _replace(o, b.logical_measure(block))
                    continue
                pending.append((o, b.flagged_measure(block)))
                if o in last:
                    moving = _defer_uses(pending, o)
                    outcomes = b.flagged_decode([bits for _, bits in pending], buffers[0][0], buffers[1][0])
                    for later in moving:
                        later.detach()
                        Rewriter.insert_op(later, InsertPoint.before(o))
                    _grow(buffers[0][1], len(shot.detectors))
                    _grow(buffers[1][1], len(pending))
                    for (m, _), outcome in zip(pending, outcomes, strict=True):
                        _replace(m, outcome)
                    pending.clear()


def _replace(o: q.MeasureOp, result: SSAValue) -> None:
    if o.outcome.name_hint:
        result.name_hint = o.outcome.name_hint
    o.outcome.replace_all_uses_with(result)
    Rewriter.erase_op(o)


def _grow(size: llvm.ConstantOp, bits: int) -> None:
    size.properties["value"] = IntegerAttr(max(size.value.value.data, (bits + 7) // 8), i64)


def _last_measures(ops: list[Operation]) -> set[Operation]:
    """Each shot's last logical measurement (flag extraction decodes the shot there)."""
    if len({id(o.parent_block()) for o in ops}) > 1:
        raise _fail("extraction=flag needs each shot's logical ops in one block (it decodes the shot over its "
                    "measurements in program order); this program branches or loops between them at run time -- "
                    "use extraction=bare, or give the loop static bounds so it is unrolled")
    last: set[Operation] = set()
    previous: Operation | None = None
    for o in [*ops, None]:
        if (o is None or isinstance(o, q.ResetAllOp)) and previous is not None:
            last.add(previous)
            previous = None
        elif isinstance(o, q.MeasureOp):
            previous = o
    return last


def _defer_uses(pending: list[tuple[q.MeasureOp, list[Bit]]], last: Operation) -> list[Operation]:
    """The side-effect-free ops between the shot's first pending logical measurement and its last
    that use an outcome (directly or through each other): they move after the shot's decode. Any
    other use before it is refused: the outcome is not known until the shot is decoded."""
    block = last.parent_block()
    assert block is not None
    tainted = {id(m.outcome) for m, _ in pending}
    moving: list[Operation] = []
    started = False
    for op in block.ops:
        if op is last:
            break
        started = started or op is pending[0][0]
        if not started or any(op is m for m, _ in pending) or not any(id(v) in tainted for v in op.operands):
            continue
        if not is_side_effect_free(op) or op.regions:
            raise _fail(f"extraction=flag decodes a shot once, after its last logical measurement; '{op.name}' uses "
                        "a logical outcome before that (a mid-circuit measurement that steers the program needs "
                        "extraction=bare)")
        moving.append(op)
        tainted |= {id(r) for r in op.results}
    return moving
