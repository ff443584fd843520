"""ldpc's decoders over the core's matrices: H decoded, the reply ``R e mod 2``.

ldpc decodes one syndrome per call and has no batch entry, so a batch loops over the shots in
Python: the syndromes unpacked once, only the nonzero ones decoded when every prior is below 1/2
(ldpc's answer to an empty syndrome is then no error), ``R e`` for all of them in one product at the end. A coprocessor round is
the Python path, rebuilt in the coprocessor's process from the matrices in its context. That is
what a reference costs; the native ``bposd`` is the fast one.

``commit`` (a boolean mask of the core's columns) limits the ``"observables+detectors"`` reply to
the committed columns (:func:`~backline_core.sdk.reply_matrix`); ``osd_order`` above
``columns - rank(H)`` (over GF(2), computed once) is refused: ldpc writes past its buffers there.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from backline_core import DecoderFunction, InvalidArgumentError
from backline_core.sdk import DemMatrices, dem_matrices, reply_matrix


def _rank(h: np.ndarray) -> int:
    import ldpc.mod2

    return int(ldpc.mod2.rank(h))


class _Decoder:
    """An ldpc decoder of one H, and the reply matrix R."""

    def __init__(self, name: str, h: np.ndarray, r: np.ndarray, priors: np.ndarray, params: dict[str, Any]) -> None:
        import ldpc

        cls = ldpc.BpOsdDecoder if name == "ldpc-bposd" else ldpc.BpLsdDecoder
        self.decoder = cls(h, error_channel=list(priors), **params)
        self.h, self.r = h, r
        self.payload_bytes, self.reply_bytes = (h.shape[0] + 7) // 8, (r.shape[0] + 7) // 8
        self._rt = np.ascontiguousarray(r.T, dtype=np.float32)  # 0/1 products summed exactly below 2^24
        # with every prior below 1/2, BP's first hard decision on an empty syndrome is no error and it stops
        # there; a prior above 1/2 could make it answer otherwise, so then every syndrome goes to ldpc
        self._skip_empty = bool((np.asarray(priors) < 0.5).all())

    def _reply(self, e: np.ndarray) -> np.ndarray:
        flips = (e.astype(np.float32) @ self._rt).astype(np.int64) & 1
        return np.packbits(flips.astype(np.uint8), axis=-1, bitorder="little")

    def batch(self, packed: np.ndarray) -> np.ndarray:
        syndromes = np.unpackbits(packed, axis=1, count=self.h.shape[0], bitorder="little")
        e = np.zeros((len(syndromes), self.h.shape[1]), dtype=np.uint8)
        decode = self.decoder.decode
        rows = np.flatnonzero(syndromes.any(axis=1)) if self._skip_empty else range(len(syndromes))
        for i in rows:  # ldpc has no batch call
            e[i] = decode(syndromes[i])
        return self._reply(e).reshape(len(syndromes), self.reply_bytes)

    def __call__(self, decoder_id: int, payload: bytes) -> bytes:
        if len(payload) != self.payload_bytes:
            raise ValueError(f"ldpc: a round of {len(payload)} bytes; this decoder takes {self.payload_bytes}")
        s = np.unpackbits(np.frombuffer(payload, dtype=np.uint8), count=self.h.shape[0], bitorder="little")
        if self._skip_empty and not s.any():
            return self._reply(np.zeros(self.h.shape[1], np.uint8)).tobytes()
        return self._reply(self.decoder.decode(s)).tobytes()


def _from_context(context: bytes) -> _Decoder:
    spec = json.loads(context)
    h = np.zeros(spec["h_shape"], dtype=np.uint8)
    h[tuple(spec["h_nz"])] = 1
    r = np.zeros(spec["r_shape"], dtype=np.uint8)
    r[tuple(spec["r_nz"])] = 1
    return _Decoder(spec["name"], h, r, np.asarray(spec["priors"]), spec["params"])


def round_init(context: bytes) -> Any:
    """``python_init`` of the round path: the decoder rebuilt from its context."""
    return _from_context(context)


def from_matrices(name: str, m: DemMatrices, *, reply: str = "observables", commit: Any = None,
                  **params: Any) -> DecoderFunction:
    """ldpc's decoder ``name`` for ``m`` with ldpc's ``params``."""
    order = params.get("osd_order", 0)
    if name == "ldpc-bposd" and order:
        free = m.num_columns - _rank(m.h)
        if order > free:  # ldpc writes past its buffers there
            raise InvalidArgumentError(f"decoder {name!r}: osd_order={order} is more than columns - "
                                       f"rank(H) = {m.num_columns} - {m.num_columns - free} = {free}; give at most "
                                       f"{free}")
    r = reply_matrix(m, reply, commit)
    context = json.dumps({"name": name, "h_shape": list(m.h.shape), "h_nz": [v.tolist() for v in np.nonzero(m.h)],
                          "r_shape": list(r.shape), "r_nz": [v.tolist() for v in np.nonzero(r)],
                          "priors": [float(p) for p in m.priors], "params": params}).encode()
    try:
        decoder = _from_context(context)
    except (ValueError, TypeError) as exc:  # ldpc's own refusal of a parameter
        raise InvalidArgumentError(f"decoder {name!r}: ldpc refused it: {str(exc).splitlines()[0]}") from None
    return DecoderFunction(name=name, python_init=round_init, context=context, num_detectors=m.num_detectors,
                           num_observables=m.num_observables, reply=reply, batch=decoder.batch)


def from_dem(name: str, dem: Any, *, reply: str = "observables", **params: Any) -> DecoderFunction:
    """ldpc's decoder ``name`` for the core's matrices of ``dem``."""
    return from_matrices(name, dem_matrices(dem), reply=reply, **params)
