"""Explicit bqec.decode ops through lower-decode-to-transport and convert-bqec-to-llvm,
driven from Python."""

from __future__ import annotations

import pytest
from backline_compiler import pipeline
from backline_compiler.dialects import bqec
from backline_compiler.dialects import transport as t
from xdsl.dialects import llvm
from xdsl.utils.exceptions import PassFailedException

PLACEMENT = (
    '#transport.backline<transport = "memcpy", controller = #transport.node<name = "controller", hardware = "cpu">, '
    'coprocessors = [#transport.node<name = "a", hardware = "cpu", coprocessor_fn = "steane">, '
    '#transport.node<name = "b", hardware = "cpu", coprocessor_fn = "steane">]>'
)
BODY = """
  llvm.func @f(%syn: !llvm.ptr, %corr: !llvm.ptr) -> i32 {{
    bqec.decode %syn, %corr {{check_type = "z", tanner = #bqec.tanner<3x7, "787315">}}
    bqec.decode %syn, %corr {{decoder_id = {decoder_id} : i32, syndrome_bytes = 6 : i32, correction_bytes = 11 : i32}}
    %st = llvm.mlir.constant(0 : i32) : i32
    llvm.return %st : i32
  }}
"""


def program(decoder_id: int = 0, placed: bool = True) -> str:
    attrs = f" attributes {{backline.placement = {PLACEMENT}}}" if placed else ""
    return f"builtin.module{attrs} {{{BODY.format(decoder_id=decoder_id)}}}\n"


@pytest.mark.parametrize("policy", ["round-robin", "by-check-type"])
def test_explicit_decode_lowers_with_its_sizes_and_id(policy):
    module = pipeline.run(pipeline.parse(program(decoder_id=0)), pipeline.from_spec(f"lower-decode-to-transport{{policy={policy}}}"))
    ops = list(module.walk())
    assert not [o for o in ops if isinstance(o, bqec.DecodeOp)]
    keys = [o.key.data for o in ops if isinstance(o, t.GetSessionOp)]
    stages = [o for o in ops if isinstance(o, t.StagePayloadOp)]
    collects = [o for o in ops if isinstance(o, t.CollectOp)]
    assert [s.decoder_id.value.data for s in stages] == [1, 0]
    assert [s.length.owner.value.value.data for s in stages] == [1, 6]
    assert [c.capacity.owner.value.value.data for c in collects] == [1, 11]
    # round-robin: decode #0 -> a, #1 -> b; by-check-type: z -> b, decoder_id 0 -> a.
    assert keys == (["a", "b"] if policy == "round-robin" else ["b", "a"])


def test_by_check_type_rejects_other_ids_and_leaves_the_module_unchanged():
    module = pipeline.parse(program(decoder_id=3))
    before = pipeline.print_module(module)
    with pytest.raises(PassFailedException, match="explicit decode with decoder_id 3.*use policy=round-robin"):
        pipeline.run(module, pipeline.from_spec("lower-decode-to-transport{policy=by-check-type}"))
    assert pipeline.print_module(module) == before


def test_convert_bqec_to_llvm_rejects_an_explicit_decode_before_rewriting():
    module = pipeline.parse(program(placed=False))
    before = pipeline.print_module(module)
    with pytest.raises(PassFailedException, match="can only run on a coprocessor.*lower-decode-to-transport first"):
        pipeline.run(module, pipeline.from_spec("convert-bqec-to-llvm"))
    assert pipeline.print_module(module) == before


def test_without_a_placement_the_explicit_decode_stays_for_convert_bqec_to_llvm_to_reject():
    module = pipeline.parse(program(placed=False))
    with pytest.raises(PassFailedException, match="bqec.decode #1 is an explicit decode"):
        pipeline.run(module, pipeline.from_spec("lower-decode-to-transport,convert-bqec-to-llvm"))


def test_routed_explicit_decodes_leave_nothing_for_convert_bqec_to_llvm():
    module = pipeline.run(pipeline.parse(program()), pipeline.from_spec("lower-decode-to-transport,convert-bqec-to-llvm"))
    calls = [o for o in module.walk() if isinstance(o, llvm.CallOp)]
    assert not calls
