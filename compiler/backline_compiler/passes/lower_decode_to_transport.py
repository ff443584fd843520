"""lower-decode-to-transport: each ``bqec.decode`` becomes one transport round.

::

    bqec.decode %syn, %corr {check_type = "z", tanner = #bqec.tanner<MxN, "...">}
    bqec.decode %syn, %corr {decoder_id = D : i32, syndrome_bytes = S : i32, correction_bytes = C : i32}

become, on the controller session of the chosen coprocessor ``K``::

    %s = transport.get_session {key = K} : !transport.session<controller>
    %len = llvm.mlir.constant(<syndrome bytes> : i32) : i32
    transport.stage_payload %s, %syn, %len {decoder_id = <id> : i32} : !transport.session<controller>
    transport.post %s : !transport.session<controller>
    %cap = llvm.mlir.constant(<correction bytes> : i32) : i32
    %n = transport.collect %s, %corr, %cap : !transport.session<controller> -> i32

The ids and sizes are the op's (:attr:`DecodeOp.decoder_id`, ``.syndrome_bytes``,
``.correction_bytes``), whichever form it has:

* implicit (``tanner`` + ``check_type``): ``decoder_id`` is 0 for ``check_type = "x"`` and 1
  for ``"z"``; the lengths are ``ceil(M/8)`` and ``ceil(N/8)`` (``tanner.syndrome_bytes``,
  ``tanner.correction_bytes``);
* explicit (``decoder_id`` + ``syndrome_bytes`` + ``correction_bytes``): ``D``, ``S`` and ``C``
  as written.

The session is found by key (``inject-transport-session`` brings it up in
``@backline_setup``), so the round may sit in any function.

Choosing ``K``:

* the op's ``coprocessor`` property, when given; it must name a coprocessor of the
  placement (otherwise an error listing them);
* otherwise the pass option ``policy``:

  - ``round-robin`` (default): the i-th ``bqec.decode`` of the module (0-based, in program
    order, i.e. a pre-order walk, counting decodes that name their coprocessor too) goes
    to coprocessor ``i mod count``, in the placement's order. Pinning one decode therefore
    does not move the others;
  - ``by-check-type``: ``"x"`` decodes go to the placement's first coprocessor, ``"z"``
    decodes to its second; explicit decodes likewise by ``decoder_id``: 0 to the first, 1 to
    the second, and any other id is an error (name the coprocessor on the op, or use
    ``round-robin``). An error too if a decode needs this policy and the placement has fewer
    than two coprocessors.

Checked against the resolved placement (:func:`~.placement.module_resolution`): the chosen
coprocessor's function must serve the decode's ``decoder_id``, and a reply as wide as the
function declares (``reply_bits``) must fit in ``correction_bytes``; otherwise the round
would fail at run time (``BL_EDECODER``, or a reply longer than the buffer).

No-op -- the module is left unchanged and decodes stay local -- when the module has no
``backline.placement`` attribute or the placement has no coprocessors, so one program
compiles with and without Backline. (An explicit decode left local then fails in
``convert-bqec-to-llvm``, which needs the Tanner matrix.)
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import llvm
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i32
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.utils.exceptions import PassFailedException

from backline_core._placement import Placement
from backline_core._resolution import Resolution

from ..dialects import bqec
from ..dialects import transport as t
from .placement import module_resolution

ROUND_ROBIN = "round-robin"
BY_CHECK_TYPE = "by-check-type"
POLICIES = (ROUND_ROBIN, BY_CHECK_TYPE)


def _names(placement: Placement) -> str:
    return ", ".join(repr(n.name) for n in placement.coprocessors)


def _round(key: str, decode: bqec.DecodeOp) -> list[Operation]:
    session = t.GetSessionOp(t.CONTROLLER, key)
    length = llvm.ConstantOp(IntegerAttr(decode.syndrome_bytes, i32), i32)
    capacity = llvm.ConstantOp(IntegerAttr(decode.correction_bytes, i32), i32)
    s = session.session
    return [
        session,
        length,
        t.StagePayloadOp(s, decode.syndrome, length.result, decode.decoder_id),
        t.PostOp(s),
        capacity,
        t.CollectOp(s, decode.correction, capacity.result),
    ]


@dataclass(frozen=True)
class LowerDecodeToTransport(ModulePass):
    """Each bqec.decode becomes a transport round on a coprocessor (see the module docstring).

    Option ``policy``: ``round-robin`` (default) or ``by-check-type`` (by check type, or by
    decoder_id for explicit decodes), for decodes that do not name their coprocessor.
    """

    name = "lower-decode-to-transport"

    policy: str = ROUND_ROBIN

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.policy not in POLICIES:
            raise PassFailedException(
                f"{self.name}: unknown policy {self.policy!r}; choose one of {', '.join(POLICIES)}"
            )
        res = module_resolution(op, self.name)
        if res is None or not res.coprocessors:
            return
        placement = res.placement
        names = [node.name for node in placement.coprocessors]
        decodes = [o for o in op.walk() if isinstance(o, bqec.DecodeOp)]

        # Choose every key first, so an error leaves the module as it was.
        keys: list[str] = []
        for i, decode in enumerate(decodes):
            if decode.coprocessor is not None:
                key = decode.coprocessor.data
                if key not in names:
                    raise PassFailedException(
                        f"{self.name}: bqec.decode #{i} names coprocessor {key!r}, which is not in the placement; "
                        f"coprocessors: {_names(placement)}"
                    )
            elif self.policy == ROUND_ROBIN:
                key = names[i % len(names)]
            else:
                key = self._by_check_type(i, decode, names, placement)
            self._check_reply(i, decode, key, res)
            keys.append(key)

        for decode, key in zip(decodes, keys):
            Rewriter.insert_op(_round(key, decode), InsertPoint.before(decode))
            Rewriter.erase_op(decode)

    def _check_reply(self, i: int, decode: bqec.DecodeOp, key: str, res: Resolution) -> None:
        """The coprocessor's function serves the decode's id, and its reply fits the correction."""
        fn = res.coprocessor(key).function
        assert fn is not None  # resolution builds every coprocessor's function
        if decode.decoder_id not in fn.decoder_ids:
            raise PassFailedException(
                f"{self.name}: bqec.decode #{i} sends decoder_id {decode.decoder_id} to coprocessor {key!r}, whose "
                f"function {fn.name!r} serves decoder_ids {list(fn.decoder_ids)}; use one of those, or route the "
                "decode to a coprocessor that serves it"
            )
        if fn.reply_bits is not None and (fn.reply_bits + 7) // 8 > decode.correction_bytes:
            raise PassFailedException(
                f"{self.name}: bqec.decode #{i} gives the reply of coprocessor {key!r} {decode.correction_bytes} "
                f"correction bytes, but its function {fn.name!r} replies with {fn.reply_bits} bits "
                f"({(fn.reply_bits + 7) // 8} bytes)"
            )

    def _by_check_type(self, i: int, decode: bqec.DecodeOp, names: list[str], placement: Placement) -> str:
        """Policy by-check-type: x (decoder_id 0) to the first coprocessor, z (decoder_id 1) to the second."""
        if decode.is_explicit:
            decoder_id = decode.decoder_id
            if decoder_id not in (0, 1):
                raise PassFailedException(
                    f"{self.name}: bqec.decode #{i} is an explicit decode with decoder_id {decoder_id}, but policy "
                    "by-check-type routes only decoder_id 0 (to the first coprocessor) and 1 (to the second); "
                    "name the coprocessor on the op (coprocessor = \"...\") or use policy=round-robin"
                )
            routes = "decoder_id 0 to the first coprocessor and decoder_id 1"
        else:
            routes = "x decodes to the first coprocessor and z decodes"
        if len(names) < 2:
            raise PassFailedException(
                f"{self.name}: policy by-check-type sends {routes} to the second, but the placement has only "
                f"{len(names)} ({_names(placement)}); add a coprocessor, use policy=round-robin, or name the "
                "coprocessor on each bqec.decode"
            )
        return names[decode.decoder_id]
