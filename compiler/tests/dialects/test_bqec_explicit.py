"""bqec.decode's explicit form built from Python: the constructor, the form-independent
properties, and the verifier."""

from __future__ import annotations

import pytest
from backline_compiler import pipeline
from backline_compiler.dialects import bqec
from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, i32
from xdsl.utils.exceptions import VerifyException

PTR = llvm.LLVMPointerType()
STEANE_H = [[0, 0, 0, 1, 1, 1, 1], [0, 1, 1, 0, 0, 1, 1], [1, 0, 1, 0, 1, 0, 1]]
#: 9x13: 2 syndrome bytes, 2 correction bytes.
WIDE_H = [[(r * 13 + c) % 3 == 0 for c in range(13)] for r in range(9)]


def build(body) -> tuple[ModuleOp, list[bqec.DecodeOp]]:
    f = func.FuncOp("f", ([PTR, PTR], []))
    ops = list(body(*f.body.block.args))
    f.body.block.add_ops([*ops, func.ReturnOp()])
    return ModuleOp([f]), ops


def test_explicit_constructor_properties_and_round_trip():
    module, (a, b) = build(lambda syn, corr: [
        bqec.DecodeOp.explicit(syn, corr, decoder_id=0, syndrome_bytes=1, correction_bytes=2, coprocessor="dec"),
        bqec.DecodeOp.explicit(syn, corr, decoder_id=IntegerAttr(9, i32), syndrome_bytes=IntegerAttr(12, i32),
                               correction_bytes=16, coprocessor=StringAttr("other")),
    ])
    module.verify()
    assert (a.decoder_id, a.syndrome_bytes, a.correction_bytes) == (0, 1, 2)
    assert (b.decoder_id, b.syndrome_bytes, b.correction_bytes) == (9, 12, 16)
    assert a.is_explicit and b.is_explicit
    assert a.tanner is None and a.check_type is None
    assert a.coprocessor.data == "dec" and b.coprocessor.data == "other"
    text = pipeline.print_module(module)
    assert ("bqec.decode %0, %1 {decoder_id = 0 : i32, syndrome_bytes = 1 : i32, correction_bytes = 2 : i32, "
            'coprocessor = "dec"}') in text
    assert pipeline.print_module(pipeline.parse(text)) == text
    generic = pipeline.print_module(module, generic=True)
    assert pipeline.print_module(pipeline.parse(generic)) == text


def test_explicit_without_coprocessor():
    module, (op,) = build(lambda syn, corr: [
        bqec.DecodeOp.explicit(syn, corr, decoder_id=255, syndrome_bytes=3, correction_bytes=4)])
    module.verify()
    assert op.coprocessor is None
    assert "bqec.decode %0, %1 {decoder_id = 255 : i32, syndrome_bytes = 3 : i32, correction_bytes = 4 : i32}" in (
        pipeline.print_module(module))


@pytest.mark.parametrize(("h", "check_type", "want"), [
    (STEANE_H, "x", (0, 1, 1)),
    (STEANE_H, "z", (1, 1, 1)),
    (WIDE_H, "z", (1, 2, 2)),
])
def test_implicit_properties_come_from_check_type_and_tanner(h, check_type, want):
    tanner = bqec.TannerAttr.from_matrix(h)
    module, (op,) = build(lambda syn, corr: [bqec.DecodeOp(syn, corr, tanner, check_type)])
    module.verify()
    assert not op.is_explicit
    assert (op.decoder_id, op.syndrome_bytes, op.correction_bytes) == want
    assert op.decoder_id_attr is None and op.syndrome_bytes_attr is None and op.correction_bytes_attr is None


def verify_message(make) -> str:
    module, _ = build(make)
    with pytest.raises(VerifyException) as info:
        module.verify()
    return str(info.value)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"decoder_id": 256, "syndrome_bytes": 1, "correction_bytes": 1}, "decoder_id must be in [0, 256), got 256"),
    ({"decoder_id": -1, "syndrome_bytes": 1, "correction_bytes": 1}, "decoder_id must be in [0, 256), got -1"),
    ({"decoder_id": 0, "syndrome_bytes": 0, "correction_bytes": 1}, "syndrome_bytes must be positive, got 0"),
    ({"decoder_id": 0, "syndrome_bytes": 1, "correction_bytes": -2}, "correction_bytes must be positive, got -2"),
    ({"decoder_id": 0, "syndrome_bytes": 1, "correction_bytes": 1, "coprocessor": ""}, "coprocessor, when given, must be"),
])
def test_explicit_verifier(kwargs, message):
    got = verify_message(lambda syn, corr: [bqec.DecodeOp.explicit(syn, corr, **kwargs)])
    assert message in got


def test_mixed_forms_are_rejected():
    tanner = bqec.TannerAttr.from_matrix(STEANE_H)

    def make(syn, corr):
        op = bqec.DecodeOp(syn, corr, tanner, "x")
        op.properties["syndrome_bytes"] = IntegerAttr(1, i32)
        return [op]

    got = verify_message(make)
    assert "mixes the two forms: it has tanner, check_type (implicit form) and syndrome_bytes (explicit form)" in got
    assert "not both" in got


def test_properties_of_an_op_with_neither_form_raise():
    _, (op,) = build(lambda syn, corr: [bqec.DecodeOp.create(operands=[syn, corr])])
    for name in ("decoder_id", "syndrome_bytes", "correction_bytes"):
        with pytest.raises(ValueError, match=f"neither tanner \\+ check_type nor {name}"):
            getattr(op, name)
