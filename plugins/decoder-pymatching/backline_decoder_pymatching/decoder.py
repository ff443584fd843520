"""PyMatching 2 as a Backline decoder: batches through ``Matching.decode_batch``, rounds in Python.

From a DEM, ``Matching.from_detector_error_model`` of the DEM itself (its decomposition is
the matching graph), so predictions equal PyMatching's own on the same DEM. A DEM with an
undecomposed hyperedge (a component flipping more than two detectors) is refused: PyMatching
would drop it silently. From matrices, ``Matching.from_check_matrix`` with weights
``log((1 - p) / p)``; a column flipping more than two detectors is refused likewise.

A batch is one ``decode_batch`` call on the bit-packed rows, bit-packed predictions out: no
Python loop per shot.

The reply ``"observables+detectors"`` asks PyMatching for more than observables: each edge
also carries, as extra observables ``O + d``, the detectors ``d`` it flips, so matching
reports the detector flips of its correction exactly (parallel edges flip the same detectors,
so PyMatching's merging keeps this exact). ``commit``: from a DEM every component is
committed (a column mask does not name DEM components; a window decoder commits a region by
rewriting its DEM instead, as ``backline qec`` does); from matrices ``commit`` is the core's
column mask (:func:`~backline_core.sdk.reply_matrix`), each column being one edge.

PyMatching has no native entry for one round, so a coprocessor round is the Python path: the
function is rebuilt in the coprocessor's process from its context (the DEM's text, or the
matrices) and each round takes the GIL and one ``decode_batch`` of one packed shot.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pymatching
import stim

from backline_core import DecoderFunction, InvalidArgumentError
from backline_core.sdk import DemMatrices, reply_matrix


def check_graphlike(dem: stim.DetectorErrorModel) -> None:
    """Refuse a DEM with a component that flips more than two detectors."""
    for inst in dem.flattened():
        if inst.type != "error":
            continue
        count = 0
        for t in [*inst.targets_copy(), stim.DemTarget.separator()]:
            if t.is_separator():
                if count > 2:
                    raise InvalidArgumentError(
                        f"the detector error model has an error with {count} detectors in one component "
                        f"({str(inst)[:80]}): matching needs each component to flip at most two; make the DEM "
                        "with circuit.detector_error_model(decompose_errors=True)")
                count = 0
            elif t.is_relative_detector_id():
                count += 1


def reply_dem(dem: stim.DetectorErrorModel, reply: str) -> stim.DetectorErrorModel:
    """``dem`` whose observables are the reply's bits (the detectors as observables ``O + d``)."""
    if reply == "observables":
        return dem
    num_obs = dem.num_observables
    lines = []
    for inst in dem.flattened():
        if inst.type != "error":
            lines.append(str(inst))
            continue
        parts: list[list[str]] = [[]]
        for t in inst.targets_copy():
            if t.is_separator():
                parts.append([])
            elif t.is_relative_detector_id():
                parts[-1] += [f"D{t.val}", f"L{num_obs + t.val}"]
            elif t.is_logical_observable_id():
                parts[-1].append(f"L{t.val}")
        lines.append(f"error({inst.args_copy()[0]!r}) " + " ^ ".join(" ".join(p) for p in parts))
    lines.append(f"detector D{dem.num_detectors - 1}")
    lines.append(f"logical_observable L{num_obs + dem.num_detectors - 1}")
    return stim.DetectorErrorModel("\n".join(lines))


class _Decoder:
    """A Matching and the widths of its payloads and replies."""

    def __init__(self, matching: pymatching.Matching, detectors: int, reply_bits: int,
                 enable_correlations: bool) -> None:
        self.matching = matching
        self.payload_bytes, self.reply_bytes = (detectors + 7) // 8, (reply_bits + 7) // 8
        self._kwargs: dict[str, Any] = {"bit_packed_shots": True, "bit_packed_predictions": True}
        if enable_correlations:  # only then: a PyMatching without the keyword still decodes
            self._kwargs["enable_correlations"] = True

    def _decode(self, packed: np.ndarray) -> np.ndarray:
        try:
            out = self.matching.decode_batch(packed, **self._kwargs)
        except ValueError as exc:  # e.g. an event on a detector no error reaches: not a syndrome of this model
            raise InvalidArgumentError(f"pymatching: {str(exc).splitlines()[0]}") from None
        if out.shape[1] != self.reply_bytes:  # observables past the last one on an edge flip nothing
            fixed = np.zeros((len(out), self.reply_bytes), dtype=np.uint8)
            width = min(out.shape[1], self.reply_bytes)
            fixed[:, :width] = out[:, :width]
            out = fixed
        return out

    def batch(self, packed: np.ndarray) -> np.ndarray:
        """Packed (shots, payload bytes) -> packed (shots, reply bytes), one ``decode_batch`` call."""
        return self._decode(packed)

    def __call__(self, decoder_id: int, payload: bytes) -> bytes:
        if len(payload) != self.payload_bytes:
            raise ValueError(f"pymatching: a round of {len(payload)} bytes; this decoder takes {self.payload_bytes}")
        return self._decode(np.frombuffer(payload, dtype=np.uint8).reshape(1, -1)).tobytes()


def _from_context(context: bytes) -> _Decoder:
    spec = json.loads(context)
    if "dem" in spec:
        dem = stim.DetectorErrorModel(spec["dem"])
        matching = pymatching.Matching.from_detector_error_model(
            dem, **({"enable_correlations": True} if spec["enable_correlations"] else {}))
    else:
        h = np.zeros(spec["h_shape"], dtype=np.uint8)
        h[tuple(spec["h_nz"])] = 1
        faults = np.zeros(spec["f_shape"], dtype=np.uint8)
        faults[tuple(spec["f_nz"])] = 1
        p = np.asarray(spec["priors"], dtype=np.float64)
        matching = pymatching.Matching.from_check_matrix(h, weights=np.log((1 - p) / p), faults_matrix=faults)
    return _Decoder(matching, spec["detectors"], spec["reply_bits"], spec["enable_correlations"])


def round_init(context: bytes) -> Any:
    """``python_init`` of the round path: the decoder rebuilt from its context."""
    return _from_context(context)


def _function(context: bytes, detectors: int, observables: int, reply: str) -> DecoderFunction:
    decoder = _from_context(context)
    return DecoderFunction(name="pymatching", python_init=round_init, context=context, num_detectors=detectors,
                           num_observables=observables, reply=reply, batch=decoder.batch)


def from_dem(dem: stim.DetectorErrorModel, *, reply: str = "observables",
             enable_correlations: bool = False) -> DecoderFunction:
    """The decoder of ``dem`` (decomposed); see the module docstring."""
    check_graphlike(dem)
    target = reply_dem(dem, reply)
    bits = dem.num_observables + (dem.num_detectors if reply != "observables" else 0)
    context = json.dumps({"dem": str(target), "enable_correlations": enable_correlations,
                          "detectors": dem.num_detectors, "reply_bits": bits}).encode()
    try:
        return _function(context, dem.num_detectors, dem.num_observables, reply)
    except ValueError as exc:  # PyMatching's own refusal, e.g. correlations without a decomposition
        raise InvalidArgumentError(f"pymatching cannot build this DEM: {str(exc).splitlines()[0]}") from None


def from_matrices(m: DemMatrices, *, reply: str = "observables", enable_correlations: bool = False,
                  commit: Any = None) -> DecoderFunction:
    """The decoder of check matrix ``m.h`` (each column flips at most two detectors)."""
    if enable_correlations:
        raise InvalidArgumentError("pymatching: enable_correlations needs a DEM's decomposed hyperedges; "
                                   "build from the DEM")
    weights = m.h.sum(axis=0)
    if (weights > 2).any():
        j = int(np.flatnonzero(weights > 2)[0])
        raise InvalidArgumentError(f"pymatching: column {j} of H flips {int(weights[j])} detectors; matching needs "
                                   "at most two per column (give a DEM built with decompose_errors=True)")
    if not all(math.isfinite(p) and 0 < p < 1 for p in m.priors):  # a DemMatrices made by hand
        raise InvalidArgumentError("pymatching: priors must all be in (0, 1)")
    r = reply_matrix(m, reply, commit)
    context = json.dumps({"h_shape": list(m.h.shape), "h_nz": [v.tolist() for v in np.nonzero(m.h)],
                          "f_shape": list(r.shape), "f_nz": [v.tolist() for v in np.nonzero(r)],
                          "priors": [float(p) for p in m.priors], "enable_correlations": False,
                          "detectors": m.num_detectors, "reply_bits": int(r.shape[0])}).encode()
    return _function(context, m.num_detectors, m.num_observables, reply)
