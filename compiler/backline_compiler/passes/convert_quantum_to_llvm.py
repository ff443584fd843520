"""convert-quantum-to-llvm: bquantum ops become calls into the device runtime ABI.

The calls go to libbackline's ``bl_dev_*`` functions (``backline/device.h``), built by
:class:`~.llvm_lowering.LLVMLowering`. A ``!bquantum.device`` is the runtime's ``bl_device *``
(``!llvm.ptr``): ``bquantum.device_from_ptr`` just forwards its operand.

* ``bquantum.gate`` -> ``bl_dev_gate1`` (one wire), ``bl_dev_gate2`` (two wires) or
  ``bl_dev_rotation`` (one wire and an angle), with the ``bl_gate`` id of :data:`GATE_IDS`;
* ``bquantum.measure`` -> ``bl_dev_measure``, which returns the outcome (0 or 1) or a negative
  status: ``select(rc < 0, rc, 0)`` is recorded and the ``i1`` outcome is ``rc == 1``;
* ``bquantum.reset`` -> ``bl_dev_reset``; ``bquantum.reset_all`` -> ``bl_dev_reset_all``;
* ``bquantum.apply_mask`` -> ``bl_dev_apply_mask`` (gate id, first wire, mask pointer, nbits);
* ``bquantum.noise`` -> ``bl_dev_noise`` with the ``bl_noise`` id of :data:`NOISE_IDS`, its
  wires stored in an entry-block ``i32`` array.

As in ``convert-transport-to-llvm``, no call branches on its status: each passes through
``bl_status_record`` (the thread keeps its first failure), so a function that ends with
``transport.take_status`` returns the first device error and ``bl_last_error()`` its text.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import llvm
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, ModuleOp, f64, i32, i64
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from backline_core._native import lib

from ..dialects import bquantum as q
from .llvm_lowering import STATUS_RECORD, LLVMLowering, abi_table

#: The device.h enum values (``BL_GATE_<NAME>``, ``BL_NOISE_<CHANNEL>``): gate name -> bl_gate,
#: noise channel -> bl_noise.
GATE_IDS: dict[str, int] = {name: getattr(lib, f"BL_GATE_{name}") for name in q.GATES}
NOISE_IDS: dict[str, int] = {name: getattr(lib, f"BL_NOISE_{name.upper()}") for name in q.NOISE_CHANNELS}

#: runtime function -> (argument types, result type), from device.h and backline.h
RUNTIME: dict[str, tuple[tuple[Attribute, ...], Attribute]] = abi_table(
    "bl_dev_gate1", "bl_dev_gate2", "bl_dev_rotation", "bl_dev_measure", "bl_dev_reset", "bl_dev_noise",
    "bl_dev_reset_all", "bl_dev_apply_mask", STATUS_RECORD,
)


def _insert(op: Operation, before: Operation) -> SSAValue:
    Rewriter.insert_op(op, InsertPoint.before(before))
    return op.results[0]


def _icmp(flag: str, lhs: SSAValue, rhs: SSAValue, before: Operation) -> SSAValue:
    predicate = llvm.ICmpPredicateFlag(flag).to_int()
    return _insert(llvm.ICmpOp(lhs, rhs, IntegerAttr(predicate, i64)), before)


def _lower(lo: LLVMLowering, op: Operation) -> list[SSAValue]:
    """Insert the runtime calls that ``op`` becomes, before it; its replacement results."""
    def i32_(value: int) -> SSAValue:
        return lo.constant(value, i32, op)

    match op:
        case q.GateOp():
            gate, wires, params = i32_(GATE_IDS[op.gate.data]), list(op.wires), list(op.params)
            if params:
                lo.recorded("bl_dev_rotation", [op.device, gate, wires[0], params[0]], op)
            else:
                lo.recorded("bl_dev_gate1" if len(wires) == 1 else "bl_dev_gate2", [op.device, gate, *wires], op)
            return []
        case q.MeasureOp():
            rc = lo.call("bl_dev_measure", [op.device, op.wire], op)
            rc.name_hint = "rc"
            zero = i32_(0)
            failed = _icmp("slt", rc, zero, op)
            lo.call(STATUS_RECORD, [_insert(llvm.SelectOp(failed, rc, zero), op)], op)
            return [_icmp("eq", rc, i32_(1), op)]
        case q.ResetOp():
            lo.recorded("bl_dev_reset", [op.device, op.wire], op)
            return []
        case q.NoiseOp():
            wires = list(op.wires)
            array = lo.entry_slot(op, i32, count=len(wires))
            for index, wire in enumerate(wires):
                slot = array if index == 0 else _insert(llvm.GEPOp(array, [index], i32), op)
                lo.store(wire, slot, op)
            p = _insert(llvm.ConstantOp(FloatAttr(op.p.value.data, f64), f64), op)
            lo.recorded("bl_dev_noise", [op.device, i32_(NOISE_IDS[op.channel.data]), array, i32_(len(wires)), p], op)
            return []
        case q.ApplyMaskOp():
            lo.recorded("bl_dev_apply_mask", [op.device, i32_(GATE_IDS[op.gate.data]), op.first_wire, op.mask,
                                              i32_(op.nbits.value.data)], op)
            return []
        case q.ResetAllOp():
            lo.recorded("bl_dev_reset_all", [op.device], op)
            return []
    raise lo.fail(f"no lowering for {op.name}")


@dataclass(frozen=True)
class ConvertQuantumToLLVM(ModulePass):
    """Lower the bquantum dialect to llvm.call into libbackline's device runtime (see module docstring)."""

    name = "convert-quantum-to-llvm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        lowering = LLVMLowering(op, RUNTIME, pass_name=self.name, abi="the device runtime ABI (backline/device.h)")
        for arg in (a for o in op.walk() for r in o.regions for b in r.blocks for a in b.args):
            if isinstance(arg.type, q.DeviceType):
                raise lowering.fail("a !bquantum.device block argument cannot be lowered; "
                                    "pass the !llvm.ptr and use bquantum.device_from_ptr")
        for old in [o for o in op.walk() if o.dialect_name() == "bquantum"]:
            if isinstance(old, q.DeviceFromPtrOp):  # forwards the pointer (keeping its name)
                old.device.replace_all_uses_with(old.ptr)
                Rewriter.erase_op(old)
            else:
                lowering.replace(old, _lower(lowering, old))
        lowering.finish()
