"""The Python side of the native decoder reads bpod.h: its declarations and constants."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from backline_decoder_bpod import BpOsdParams
from backline_decoder_bpod.native import ffi, last_error, lib
from backline_decoder_bpod.params import encode

REPETITION = np.array([[1, 1, 0], [0, 1, 1]], dtype=np.uint8)


def test_the_blob_header_is_the_one_bpod_h_defines():
    blob = encode([REPETITION], BpOsdParams())
    assert blob[:4] == b"BPOD"  # BPOD_MAGIC, written in decimal so that cffi reads it
    assert struct.unpack_from("<3I", blob, 4) == (lib.BPOD_VERSION, 1, 0)
    d = lib.bpod_create(blob, len(blob))
    assert d != ffi.NULL, last_error()
    try:
        assert (lib.bpod_checks(d), lib.bpod_bits(d)) == (2, 3)
        correction = ffi.new("uint8_t[1]")
        assert lib.bpod_decode(d, bytes([0b01]), correction) == lib.BPOD_BP_CONVERGED
        assert correction[0] == 0b001  # check 0 alone: bit 0
    finally:
        lib.bpod_free(d)


@pytest.mark.parametrize("field, value", [(0, 0x12345678), (1, 2)])  # the magic, the version
def test_a_blob_of_another_format_is_refused(field, value):
    blob = bytearray(encode([REPETITION], BpOsdParams()))
    struct.pack_into("<I", blob, 4 * field, value)
    assert lib.bpod_create(bytes(blob), len(blob)) == ffi.NULL
    assert last_error() == f"not a version-{lib.BPOD_VERSION} BPOD parameter blob"
