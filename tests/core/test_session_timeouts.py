"""The core parses timeout_ms and connect_timeout_ms once: bl_session_timeouts gives its values back
(the Python session's teardown deadline reads them there), and a backend gets them in bl_open_args."""

from __future__ import annotations

import pytest

from backline_core._abi import check, ffi, lib
from backline_core._errors import InvalidArgumentError


def timeouts(session) -> tuple[int, int]:
    out = ffi.new("uint64_t[2]")
    check(lib.bl_session_timeouts(session._handle(), out, out + 1))
    return out[0], out[1]


def test_the_timeouts_come_back_as_configured(pairs) -> None:
    s = pairs.session("controller", pairs.key(), "timeout_ms=1234;connect_timeout_ms=5678")
    assert timeouts(s) == (1234, 5678)
    assert s._timeout_s(s._handle()) == pytest.approx(5.678)


def test_absent_timeouts_are_the_headers_defaults(pairs) -> None:
    s = pairs.session("controller", pairs.key())
    assert timeouts(s) == (lib.BL_DEFAULT_TIMEOUT_MS, lib.BL_DEFAULT_CONNECT_TIMEOUT_MS)


def test_a_bad_timeout_is_refused_by_the_one_parser(pairs) -> None:
    with pytest.raises(InvalidArgumentError, match="timeout_ms=soon"):
        pairs.session("controller", pairs.key(), "timeout_ms=soon")


def test_no_session_is_an_error_not_a_crash() -> None:
    out = ffi.new("uint64_t[2]")
    assert lib.bl_session_timeouts(ffi.NULL, out, out + 1) != 0
