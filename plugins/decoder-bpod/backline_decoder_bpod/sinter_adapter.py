"""Our BP+OSD as a ``sinter.Decoder``, for Monte Carlo sampling of stim circuits.

The detector error model becomes a check matrix ``H`` (detectors x error mechanisms), an
observables matrix ``L`` (observables x error mechanisms) and the mechanisms' priors.
Mechanisms are those of ``dem.flattened()``; the components of a decomposed mechanism
(``D0 D1 ^ D2 D3``) are XORed into one column, and mechanisms with the same detector set
are merged into one column with ``p = p1 (1 - p2) + p2 (1 - p1)`` (the rule, and the column
order -- first appearance -- of ``ldpc.ckt_noise.dem_matrices``, so both decoders see the
same ``H`` and priors). Each shot's detection events are decoded with the native decoder
(:meth:`BpOsdDecoder.decode_batch_packed`) and the prediction is ``L e mod 2``.

Use it from Python::

    sinter.collect(num_workers=4, tasks=tasks, decoders=["backline_bposd"],
                   custom_decoders={"backline_bposd": SinterBpOsdDecoder(osd_method="osd_cs", osd_order=4)})

or from the command line::

    sinter collect ... --decoders backline_bposd \\
        --custom_decoders_module_function backline_decoder_bpod.sinter_adapter:sinter_decoders
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

import numpy as np
import sinter
import stim

from .decoder import BpOsdDecoder
from .params import BpOsdParams

__all__ = ["CompiledBpOsdDecoder", "DemMatrices", "SinterBpOsdDecoder", "dem_to_matrices", "sinter_decoders"]

#: A merged prior that reaches 1 (never from a valid DEM, but rounding) is held just below it.
_P_MAX = 1.0 - 1e-12


@dataclass(frozen=True)
class DemMatrices:
    """``h`` (detectors x columns), ``l`` (observables x columns), both uint8 0/1, and ``priors``."""

    h: np.ndarray
    l: np.ndarray
    priors: np.ndarray
    #: mechanisms merged into a column that flip observables other than the column's
    observable_conflicts: int = 0


def _xor_targets(groups: list[list[int]]) -> frozenset[int]:
    out: set[int] = set()
    for group in groups:
        out.symmetric_difference_update(group)
    return frozenset(out)


def dem_to_matrices(dem: stim.DetectorErrorModel) -> DemMatrices:
    """The check matrix, observables matrix and priors of ``dem`` (see the module docstring).

    A mechanism of probability 0 never fires and is dropped. When mechanisms merged into
    one column flip different observables, the column keeps the observables of the most
    probable of them (ldpc keeps the last one's); ``observable_conflicts`` counts them.
    """
    columns: dict[frozenset[int], int] = {}
    priors: list[float] = []
    observables: list[frozenset[int]] = []
    best: list[float] = []
    conflicts = 0
    for inst in dem.flattened():
        if inst.type != "error":
            continue  # detector / logical_observable declarations carry no errors
        p = float(inst.args_copy()[0])
        dets: list[list[int]] = [[]]
        obs: list[list[int]] = [[]]
        for t in inst.targets_copy():
            if t.is_separator():
                dets.append([])
                obs.append([])
            elif t.is_relative_detector_id():
                dets[-1].append(t.val)
            elif t.is_logical_observable_id():
                obs[-1].append(t.val)
        if p <= 0.0:
            continue
        d, o = _xor_targets(dets), _xor_targets(obs)
        j = columns.get(d)
        if j is None:
            columns[d] = len(priors)
            priors.append(p)
            observables.append(o)
            best.append(p)
            continue
        q = priors[j]
        priors[j] = q * (1.0 - p) + p * (1.0 - q)
        if o != observables[j]:
            conflicts += 1
            if p > best[j]:
                observables[j], best[j] = o, p
    n = len(priors)
    h = np.zeros((dem.num_detectors, n), dtype=np.uint8)
    l = np.zeros((dem.num_observables, n), dtype=np.uint8)
    for d, j in columns.items():
        h[list(d), j] = 1
        l[list(observables[j]), j] = 1
    return DemMatrices(h=h, l=l, priors=np.minimum(np.asarray(priors, dtype=np.float64), _P_MAX),
                       observable_conflicts=conflicts)


class CompiledBpOsdDecoder(sinter.CompiledDecoder):
    """The native decoder built for one detector error model."""

    def __init__(self, matrices: DemMatrices, params: BpOsdParams) -> None:
        self.matrices = matrices
        self.num_detectors, self.num_errors = matrices.h.shape
        self.num_observables = matrices.l.shape[0]
        self.det_bytes = (self.num_detectors + 7) // 8
        self.obs_bytes = (self.num_observables + 7) // 8
        # Detectors that no mechanism flips never fire; a shot with one set is not ours to decode.
        self.decoder: BpOsdDecoder | None = None
        if self.num_detectors and self.num_errors:
            settings = {k: getattr(params, k) for k in ("bp_method", "max_iter", "ms_scaling_factor",
                                                         "osd_method", "osd_order")}
            self.decoder = BpOsdDecoder(matrices.h, channel_probs=tuple(matrices.priors), **settings)
        # L^T as float32: sums of 0/1 products stay exact below 2^24 terms.
        self._lt = np.ascontiguousarray(matrices.l.T, dtype=np.float32)
        self._pad_mask = np.uint8((1 << (self.num_detectors % 8)) - 1) if self.num_detectors % 8 else None

    def decode_errors_bit_packed(self, bit_packed_detection_event_data: np.ndarray) -> np.ndarray:
        """Bit-packed detection events -> bit-packed error-mechanism estimates (shots, ceil(columns/8))."""
        dets = np.asarray(bit_packed_detection_event_data, dtype=np.uint8)
        if dets.ndim != 2 or dets.shape[1] != self.det_bytes:
            raise ValueError(f"detection events must have shape (shots, {self.det_bytes}) for "
                             f"{self.num_detectors} detectors, got {dets.shape}")
        if self.decoder is None:
            return np.zeros((dets.shape[0], (self.num_errors + 7) // 8), dtype=np.uint8)
        if self._pad_mask is not None and (dets[:, -1] & ~self._pad_mask).any():
            dets = dets.copy()  # bits past the last detector are padding; never decode them
            dets[:, -1] &= self._pad_mask
        return self.decoder.decode_batch_packed(dets)

    def decode_shots_bit_packed(self, *, bit_packed_detection_event_data: np.ndarray) -> np.ndarray:
        errors = self.decode_errors_bit_packed(bit_packed_detection_event_data)
        shots = errors.shape[0]
        if self.num_observables == 0:
            return np.zeros((shots, 0), dtype=np.uint8)
        if self.num_errors == 0:
            return np.zeros((shots, self.obs_bytes), dtype=np.uint8)
        e = np.unpackbits(errors, axis=1, count=self.num_errors, bitorder="little")
        flips = (e.astype(np.float32) @ self._lt).astype(np.int64) & 1
        return np.packbits(flips.astype(np.uint8), axis=1, bitorder="little")


class SinterBpOsdDecoder(sinter.Decoder):
    """Backline's native BP+OSD for sinter; the settings are those of :class:`BpOsdParams`.

    The channel probabilities come from the detector error model, so there is no
    ``error_rate``. The instance is a plain picklable value (sinter ships it to workers).
    """

    def __init__(self, bp_method: str = "min_sum", max_iter: int = 10, ms_scaling_factor: float = 0.625,
                 osd_method: str = "osd0", osd_order: int = 0) -> None:
        # Checked now, so a bad setting fails where it is written, not in a sinter worker.
        params = BpOsdParams(bp_method=bp_method, max_iter=max_iter, ms_scaling_factor=ms_scaling_factor,
                             osd_method=osd_method, osd_order=osd_order)
        self.bp_method, self.max_iter = params.bp_method, params.max_iter
        self.ms_scaling_factor = float(params.ms_scaling_factor)
        self.osd_method, self.osd_order = params.osd_method, params.osd_order

    @property
    def params(self) -> BpOsdParams:
        return BpOsdParams(bp_method=self.bp_method, max_iter=self.max_iter, ms_scaling_factor=self.ms_scaling_factor,
                           osd_method=self.osd_method, osd_order=self.osd_order)

    def compile_decoder_for_dem(self, *, dem: stim.DetectorErrorModel) -> CompiledBpOsdDecoder:
        return CompiledBpOsdDecoder(dem_to_matrices(dem), self.params)

    def decode_via_files(self, *, num_shots: int, num_dets: int, num_obs: int, dem_path: pathlib.Path,
                         dets_b8_in_path: pathlib.Path, obs_predictions_b8_out_path: pathlib.Path,
                         tmp_dir: pathlib.Path) -> None:
        """Read b8 detection events, write b8 observable predictions (sinter's file protocol)."""
        compiled = self.compile_decoder_for_dem(dem=stim.DetectorErrorModel.from_file(dem_path))
        if num_dets != compiled.num_detectors or num_obs != compiled.num_observables:
            raise ValueError(f"num_dets={num_dets}, num_obs={num_obs} but the DEM at {dem_path} has "
                             f"{compiled.num_detectors} detectors and {compiled.num_observables} observables")
        if num_dets:
            dets = stim.read_shot_data_file(path=str(dets_b8_in_path), format="b8", num_detectors=num_dets,
                                            bit_packed=True)
        else:  # zero bytes a shot: nothing to read, however many shots
            dets = np.zeros((num_shots, 0), dtype=np.uint8)
        if dets.shape[0] != num_shots:
            raise ValueError(f"{dets_b8_in_path} holds {dets.shape[0]} shots, expected {num_shots}")
        predictions = compiled.decode_shots_bit_packed(bit_packed_detection_event_data=dets)
        if num_obs:
            stim.write_shot_data_file(data=predictions, path=str(obs_predictions_b8_out_path), format="b8",
                                      num_observables=num_obs)
        else:
            pathlib.Path(obs_predictions_b8_out_path).write_bytes(b"")

    def __repr__(self) -> str:
        return (f"SinterBpOsdDecoder(bp_method={self.bp_method!r}, max_iter={self.max_iter}, "
                f"ms_scaling_factor={self.ms_scaling_factor}, osd_method={self.osd_method!r}, "
                f"osd_order={self.osd_order})")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.params == other.params

    def __hash__(self) -> int:
        return hash(self.params)


def sinter_decoders() -> dict[str, sinter.Decoder]:
    """For ``sinter collect --custom_decoders_module_function backline_decoder_bpod.sinter_adapter:sinter_decoders``."""
    return {"backline_bposd": SinterBpOsdDecoder()}
