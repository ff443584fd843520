"""inject-noise: a circuit-level depolarizing noise model on bquantum ops.

* after every one-wire ``bquantum.gate``: ``bquantum.noise "depolarize1"`` on its wire;
* after every two-wire ``bquantum.gate``: ``bquantum.noise "depolarize2"`` on both wires;
* before every ``bquantum.measure``: ``bquantum.noise "x_flip"`` on its wire;

each with probability ``p`` (option, default 0.001; must be in [0, 1]). Resets, ``reset_all``
and ``bquantum.apply_mask`` (a decoder's correction, modelled as perfect) get no noise. Run
it on the physical circuit, e.g. after ``encode-steane``.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.utils.exceptions import PassFailedException

from ..dialects import bquantum as q


@dataclass(frozen=True)
class InjectNoise(ModulePass):
    """Depolarizing noise after gates, bit flips before measurements (see the module docstring)."""

    name = "inject-noise"

    p: float = 0.001

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        p = float(self.p)
        if not 0.0 <= p <= 1.0:
            raise PassFailedException(f"{self.name}: p must be in [0, 1], got {self.p}")
        for o in list(op.walk()):
            if isinstance(o, q.GateOp):
                channel = "depolarize1" if len(o.wires) == 1 else "depolarize2"
                Rewriter.insert_op(q.NoiseOp(channel, o.device, list(o.wires), p), InsertPoint.after(o))
            elif isinstance(o, q.MeasureOp):
                Rewriter.insert_op(q.NoiseOp("x_flip", o.device, [o.wire], p), InsertPoint.before(o))
