"""The Python face of the native decoder, and the CSS coprocessor function.

>>> import numpy as np
>>> from backline_decoder_bpod import BpOsdDecoder, codes
>>> steane = codes.named_code("steane")
>>> dec = BpOsdDecoder(steane.hz, error_rate=0.05)
>>> dec.decode(np.array([1, 0, 0], dtype=np.uint8))   # check 0 only: qubit 0
array([1, 0, 0, 0, 0, 0, 0], dtype=uint8)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from backline_core import CoprocessorFunction

from .native import LIBRARY, ffi, last_error, lib
from .params import BpOsdParams, check_css, check_matrix, check_osd_order, encode

_decode_bits = lib.bpod_decode_bits  # bound once: decode is called per shot


class BpOsdDecoder:
    """BP(+OSD) for one parity-check matrix ``h``, compiled once, decoding without allocation.

    ``decode`` takes and returns unpacked 0/1 arrays; ``decode_packed`` and
    ``decode_batch_packed`` use the project's bit-packed little-endian rows
    (``numpy.packbits(..., bitorder="little")``).
    """

    def __init__(self, h: Any, **settings: Any) -> None:
        self.h = check_matrix(h, "H")
        self.params = BpOsdParams(**settings)
        blob = encode([self.h], self.params)
        self._d = ffi.gc(lib.bpod_create(blob, len(blob)), lib.bpod_free)
        if self._d == ffi.NULL:
            raise ValueError(f"cannot build the decoder: {last_error()}")
        self.m, self.n = self.h.shape
        self.syndrome_bytes, self.correction_bytes = (self.m + 7) // 8, (self.n + 7) // 8
        self._in = ffi.new("uint8_t[]", max(self.syndrome_bytes, 1))
        self._out = ffi.new("uint8_t[]", self.correction_bytes)
        self.last_status = 0

    def decode_packed(self, syndrome: bytes | bytearray | memoryview | np.ndarray) -> bytes:
        """Bit-packed syndrome (ceil(m/8) bytes) -> bit-packed correction (ceil(n/8) bytes)."""
        data = bytes(syndrome)
        if len(data) != self.syndrome_bytes:
            raise ValueError(f"syndrome has {len(data)} bytes; this H has {self.m} checks, so {self.syndrome_bytes} bytes")
        ffi.memmove(self._in, data, len(data))
        rc = lib.bpod_decode(self._d, self._in, self._out)
        if rc < 0:
            raise ValueError(f"bad syndrome: {last_error()}")
        self.last_status = rc
        return bytes(ffi.buffer(self._out, self.correction_bytes))

    def decode(self, syndrome: Any) -> np.ndarray:
        """Unpacked 0/1 syndrome of length m -> 0/1 correction of length n."""
        s = np.ascontiguousarray(syndrome, dtype=np.uint8)
        if s.ndim != 1 or s.size != self.m:
            raise ValueError(f"syndrome must be a vector of {self.m} entries (one per check), got shape {s.shape}")
        out = np.empty(self.n, dtype=np.uint8)
        rc = _decode_bits(self._d, ffi.from_buffer(s), ffi.from_buffer(out))
        if rc < 0:
            raise ValueError(f"bad syndrome: {last_error()}")
        self.last_status = rc
        return out

    def decode_batch_packed(self, syndromes: np.ndarray) -> np.ndarray:
        """(shots, ceil(m/8)) uint8 bit-packed syndromes -> (shots, ceil(n/8)) corrections, in C."""
        s = np.ascontiguousarray(syndromes, dtype=np.uint8)
        if s.ndim != 2 or s.shape[1] != self.syndrome_bytes:
            raise ValueError(f"syndromes must have shape (shots, {self.syndrome_bytes}), got {s.shape}")
        out = np.zeros((s.shape[0], self.correction_bytes), dtype=np.uint8)
        rc = lib.bpod_decode_batch(self._d, ffi.from_buffer(s), s.shape[0], ffi.from_buffer(out))
        if rc < 0:
            raise ValueError(f"bad syndrome in batch: {last_error()}")
        return out

    def decode_batch(self, syndromes: Any) -> np.ndarray:
        """(shots, m) 0/1 syndromes -> (shots, n) 0/1 corrections."""
        s = np.asarray(syndromes)
        if s.ndim != 2 or s.shape[1] != self.m:
            raise ValueError(f"syndromes must have shape (shots, {self.m}), got {s.shape}")
        if s.size and not np.isin(s, (0, 1)).all():
            raise ValueError("syndromes must hold only 0 and 1")
        packed = self.decode_batch_packed(np.packbits(s, axis=1, bitorder="little"))
        return np.unpackbits(packed, axis=1, count=self.n, bitorder="little")

    @property
    def iterations(self) -> int:
        """BP iterations of the last decode."""
        return lib.bpod_last_iterations(self._d)

    @property
    def log_prob_ratios(self) -> np.ndarray:
        """Posterior log-likelihood ratios of the last decode (as ldpc's log_prob_ratios)."""
        return np.frombuffer(ffi.buffer(lib.bpod_last_llr(self._d), 8 * self.n), dtype=np.float64).copy()

    @property
    def converged(self) -> bool:
        """Whether BP alone satisfied the last syndrome."""
        return self.last_status == 0


def css_bp_decoder(hx: Any, hz: Any, *, bp_method: str = "min_sum", max_iter: int = 10,
                   ms_scaling_factor: float = 0.625, osd_method: str = "osd0", osd_order: int = 0,
                   error_rate: float = 0.05, channel_probs: Any = None, platform: str = "cpu",
                   name: str = "bposd") -> CoprocessorFunction:
    """A coprocessor function decoding Hx syndromes on decoder_id 0 and Hz syndromes on 1.

    Syndromes arrive bit-packed little-endian; the reply is the bit-packed correction mask
    of the code's n qubits. ``platform="cpu"`` is the native C decoder; ``"triton"`` builds
    the same algorithm from Triton kernels (see :func:`backline_decoder_bpod.triton_decoder`).
    """
    hx, hz = check_css(hx, hz)
    params = BpOsdParams(bp_method=bp_method, max_iter=max_iter, ms_scaling_factor=ms_scaling_factor,
                         osd_method=osd_method, osd_order=osd_order, error_rate=error_rate,
                         channel_probs=None if channel_probs is None else tuple(np.asarray(channel_probs).ravel()))
    for h, which in ((hx, "Hx"), (hz, "Hz")):
        check_osd_order(h, params, f"{name} ({which})")
    if platform == "triton":
        from .triton_bp import css_triton_bp_decoder

        return css_triton_bp_decoder(hx, hz, params, name=name)
    if platform != "cpu":
        raise ValueError(f"platform={platform!r}: choose 'cpu' (native C) or 'triton'")
    return CoprocessorFunction(
        name=name, library=LIBRARY, symbol="bpod_css_fn", init_symbol="bpod_css_init",
        fini_symbol="bpod_css_fini", context=encode([hx, hz], params), decoder_ids=(0, 1),
        reply_bits=hx.shape[1],
    )
