"""CoprocessorFunction.reply_bits: validation, to_dict/from_dict, the built-ins' values."""

from __future__ import annotations

import re

import pytest

from backline_core._builtins import echo, steane
from backline_core._coprocessor_function import CoprocessorFunction
from backline_core._errors import PlacementError

NATIVE = dict(name="dec", library="/opt/qec/libdec.so", symbol="bl_decode")


def test_reply_bits_defaults_to_none():
    assert CoprocessorFunction(**NATIVE).reply_bits is None


@pytest.mark.parametrize("bits", [1, 7, 10_000])
def test_reply_bits_accepts_positive_ints(bits):
    assert CoprocessorFunction(**NATIVE, reply_bits=bits).reply_bits == bits


@pytest.mark.parametrize("bits", [0, -3, True, False, 7.0, "7"])
def test_reply_bits_rejects_others_saying_what_to_give(bits):
    with pytest.raises(PlacementError) as info:
        CoprocessorFunction(**NATIVE, reply_bits=bits)
    message = str(info.value)
    assert "'dec'" in message and f"reply_bits={bits!r}" in message and "positive int" in message


def test_to_dict_omits_reply_bits_when_unknown():
    assert "reply_bits" not in CoprocessorFunction(**NATIVE).to_dict()


@pytest.mark.parametrize(
    "fn",
    [
        CoprocessorFunction(**NATIVE, reply_bits=12, decoder_ids=(0, 1)),
        CoprocessorFunction(**NATIVE),
        CoprocessorFunction(name="py", python=print, reply_bits=3),
    ],
)
def test_dict_round_trip(fn):
    data = fn.to_dict()
    assert data.get("reply_bits") == fn.reply_bits
    assert CoprocessorFunction.from_dict(data) == fn


def test_from_dict_of_an_older_dict_without_reply_bits():
    old = {"name": "dec", "decoder_ids": [0], "library": "/opt/qec/libdec.so", "symbol": "bl_decode"}
    assert CoprocessorFunction.from_dict(old).reply_bits is None


def test_from_dict_validates_reply_bits():
    with pytest.raises(PlacementError, match="reply_bits=0"):
        CoprocessorFunction.from_dict({**NATIVE, "reply_bits": 0})


def test_builtins():
    assert steane().reply_bits == 7  # the 7-qubit correction mask
    assert echo().reply_bits is None  # as wide as whatever came in


@pytest.mark.defect("API arguments of the wrong type raised raw TypeError/OverflowError, or were taken (context=5)")
@pytest.mark.parametrize("call, says", [
    (lambda: CoprocessorFunction(name="x", python=lambda d, p: p, decoder_ids=5), "decoder_ids=5 must be a tuple"),
    (lambda: CoprocessorFunction(name="x", library="a.so", symbol="f", context=5), "context must be bytes, not int"),
    (lambda: __import__("backline_core").format_config(5), "init_args must be a mapping"),
    (lambda: __import__("backline_core").format_config({1: "a"}), "init_args keys must be str"),
    (lambda: __import__("backline_core").parse_config(5), "must be a str, not int"),
    (lambda: __import__("backline_core").BoundFunction(5), "takes a CoprocessorFunction, not int"),
    (lambda: _deploy(in_bytes="x"), "in_bytes='x' must be an int"),
    (lambda: _deploy(in_bytes=2**70), "in_bytes=(too large) must be an int"),
    (lambda: _deploy(out_bytes=-1), "out_bytes=-1 must be an int"),
])
def test_arguments_of_the_wrong_kind_are_backline_errors(call, says) -> None:
    from backline_core import BacklineError

    with pytest.raises(BacklineError, match=re.escape(says)):
        call()


def _deploy(**sizes):  # noqa: ANN003, ANN202
    from backline_core import Controller, Coprocessor, Placement, deploy

    return deploy(Placement(controller=Controller(), transport="memcpy",
                            coprocessors=[Coprocessor(name="x", coprocessor_fn="steane")]),
                  **{"in_bytes": 1, "out_bytes": 1, **sizes})
