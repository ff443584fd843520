"""backline_core._config (configuration strings) and backline_core._errors (status mapping)."""

from __future__ import annotations

import pytest

from backline_core import _errors as errors
from backline_core._config import CORE_KEYS, format_config, parse_config
from backline_core._abi import ffi, lib

# ---- config -----------------------------------------------------------------------------------


def test_format_is_sorted_and_canonical():
    assert format_config({"slots": 64, "greeting": "hi"}) == "greeting=hi;slots=64"
    assert format_config({}) == ""
    assert format_config({"b": True, "a": False, "c": 1.5, "d": -1}) == "a=0;b=1;c=1.5;d=-1"


@pytest.mark.parametrize("args", [
    {},
    {"slots": 8},
    {"slots": 64, "slot_bytes": 256, "timeout_ms": 5, "idle_spin_us": -1, "greeting": "hello", "cpu": 3},
    {"flag": True, "ratio": 0.25, "name": "a-b_c.d", "path": "/dev/shm/x"},
])
def test_round_trip(args):
    text = format_config(args)
    parsed = parse_config(text)
    expected = {k: ("1" if v is True else "0" if v is False else str(v)) for k, v in args.items()}
    assert parsed == expected
    assert format_config(parsed) == text


@pytest.mark.parametrize("args", [
    {"a;b": 1}, {"a=b": 1}, {"": 1}, {"a\nb": 1}, {"a\0": 1},
    {"k": "x;y"}, {"k": "x=y"}, {"k": ""}, {"k": "line\nbreak"}, {"k": "nul\0"},
])
def test_format_rejects_bad_keys_and_values(args):
    with pytest.raises(ValueError, match="not allowed"):
        format_config(args)


@pytest.mark.parametrize("text", [
    "x", "=1", "slots=", "a=b=c", "a=1;;b=2", "a=1;", ";a=1", ";", "a",
])
def test_parse_rejects_malformed(text):
    with pytest.raises(ValueError, match="malformed"):
        parse_config(text)


@pytest.mark.parametrize("text", ["slots=8;slots=16", "a=1;b=2;a=1"])
def test_parse_rejects_duplicate_keys(text):
    with pytest.raises(ValueError, match="given twice"):
        parse_config(text)


def test_parse_empty():
    assert parse_config("") == {}


def test_core_keys():
    assert list(CORE_KEYS) == ["slots", "slot_bytes", "timeout_ms", "connect_timeout_ms", "idle_spin_us"]
    with pytest.raises(TypeError):
        CORE_KEYS["new"] = "x"  # read-only mapping


# ---- errors -------------------------------------------------------------------------------------

NATIVE_CODES = {name: getattr(lib, name) for name in dir(lib)
                if name.startswith("BL_E") and name[4:].isalpha() and getattr(lib, name) < 0}


def test_status_table_covers_every_native_code():
    assert len(NATIVE_CODES) == 15
    assert {code: name for name, code in NATIVE_CODES.items()} == {code: name for code, (name, _) in errors.STATUS.items()}
    for code, (name, _) in errors.STATUS.items():
        assert ffi.string(lib.bl_status_name(code)).decode() == name


EXPECTED_CLASS = {
    -1: errors.InvalidArgumentError, -2: errors.LifecycleError, -3: errors.DeadlineError,
    -4: errors.PayloadTooLargeError, -5: errors.UnknownDecoderError, -6: errors.PeerError,
    -7: errors.KeyTakenError, -8: errors.TransportError, -9: errors.RingFullError,
    -10: errors.NothingPostedError, -11: errors.FunctionError, -12: errors.TransportError,
    -13: errors.AbiError, -14: errors.NotFoundError, -15: errors.AuthenticationError,
}


@pytest.mark.parametrize("code", sorted(errors.STATUS, reverse=True))
def test_from_status_maps_each_code(code):
    name, cls = errors.STATUS[code]
    assert cls is EXPECTED_CLASS[code]
    exc = errors.from_status(code, "something failed")
    assert type(exc) is cls
    assert isinstance(exc, errors.TransportError) and isinstance(exc, errors.BacklineError)
    assert exc.code == code and exc.status == name
    assert str(exc) == f"something failed [{name}]"
    assert "something failed" in str(exc)
    empty = errors.from_status(code, "")
    assert str(empty) == name


def test_from_status_unknown_code():
    exc = errors.from_status(-99, "odd")
    assert type(exc) is errors.TransportError
    assert exc.code == -99 and exc.status == "status -99"
    assert str(exc) == "odd [status -99]"


def test_python_base_classes():
    assert issubclass(errors.InvalidArgumentError, ValueError)
    assert issubclass(errors.PayloadTooLargeError, ValueError)
    assert issubclass(errors.DeadlineError, TimeoutError)
    assert issubclass(errors.UnknownDecoderError, LookupError)
    assert issubclass(errors.NotFoundError, LookupError)
    assert issubclass(errors.PlacementError, ValueError) and issubclass(errors.PlacementError, errors.BacklineError)
    assert errors.TransportError("x").code == -8 and errors.TransportError("x").status == "BL_EBACKEND"


def test_check_raises_the_mapped_class():
    from backline_core._abi import check

    assert check(0) == 0 and check(5) == 5
    assert lib.bl_session_get(0, b"config-errors-missing") == ffi.NULL
    with pytest.raises(errors.NotFoundError, match="config-errors-missing") as info:
        check(lib.BL_ENOTFOUND)
    assert str(info.value).endswith("[BL_ENOTFOUND]")
