"""CoprocessorFunction.reply_bits: validation, to_dict/from_dict, the built-ins' values."""

from __future__ import annotations

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
