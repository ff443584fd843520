"""Tiered decoding: a fast primary decoder, and an auxiliary one for the windows it flags
(docs/streaming.md, "Tiered decoding").

The shot is decoded in sliding windows (:class:`~backline_qec.windows.SlidingWindowDecoder`'s
plan, the same for both tiers). For each window, in order, the controller reads the window's
detection events with every earlier commit applied; with ``syndrome-weight>K``, a window of more
than ``K`` detection events goes to the auxiliary decoder's coprocessor, any other to the
primary's. The chosen decoder's reply is the window's: its committed observable flips, and the
detector flips it hands on to the next window. Each tier's coprocessor runs
:func:`~backline_qec.engine.window_function` over that tier's window decoders (decoder id: the
window's shape), so a round is one window, as with parallel windows.

``not-converged`` would escalate the windows where the primary reports it did not converge: no
installed decoder reports that in its reply (the reply layouts are ``observables`` and
``observables+detectors``, ``backline_core``'s ``REPLIES``), so it is refused.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import stim

from backline_core import InvalidArgumentError

from .windows import SlidingWindowDecoder

#: the escalation criterion that needs a primary reporting convergence (refused: see the module)
NOT_CONVERGED = "not-converged"
_WEIGHT = re.compile(r"syndrome-weight>(-?\d+)")


def parse_escalate_when(text: str, primary: str) -> int:
    """``syndrome-weight>K`` -> ``K``; anything else is one clear error."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"escalate_when={text!r} must be text: syndrome-weight>K")
    text = text.strip()
    if text == NOT_CONVERGED:
        raise InvalidArgumentError(
            f"--escalate-when not-converged: the primary {primary!r} does not report convergence, and no installed "
            "decoder does (their replies carry observables and detector flips only); escalate by "
            "--escalate-when syndrome-weight>K")
    m = _WEIGHT.fullmatch(text.replace(" ", ""))
    if m is None:
        raise InvalidArgumentError(f"--escalate-when {text!r}: expected syndrome-weight>K (K a whole number of "
                                   "detection events, -1: escalate every window) or not-converged")
    return int(m.group(1))


class TieredWindowDecoder:
    """Sliding windows decoded by ``primary``, each window of more than ``threshold`` detection
    events (after the earlier windows' handed-on flips) by ``auxiliary`` instead, in this process."""

    def __init__(self, circuit: stim.Circuit, primary: str, auxiliary: str, *, threshold: int,
                 window: int | None = None, commit: int | None = None,
                 auxiliary_params: dict[str, Any] | None = None, **params: Any) -> None:
        if not isinstance(threshold, int) or isinstance(threshold, bool):
            raise InvalidArgumentError(f"threshold={threshold!r} must be a whole number of detection events")
        self.threshold = threshold
        self.primary = SlidingWindowDecoder(circuit, primary, window=window, commit=commit, **params)
        self.auxiliary = SlidingWindowDecoder(circuit, auxiliary, window=window, commit=commit,
                                              **dict(auxiliary_params or {}))
        for a, b in zip(self.primary.models, self.auxiliary.models, strict=True):
            if a.window != b.window or not np.array_equal(a.detectors, b.detectors) \
                    or not np.array_equal(a.handed_on, b.handed_on):
                raise InvalidArgumentError(f"decoders {primary!r} and {auxiliary!r} see different windows of this "
                                           "circuit; tiered decoding needs the same windows for both")
        self.models = self.primary.models
        self.num_detectors, self.num_observables = self.primary.num_detectors, self.primary.num_observables

    def tiers(self) -> tuple[SlidingWindowDecoder, SlidingWindowDecoder]:
        return self.primary, self.auxiliary

    def decode_batch(self, detection_events: Any) -> tuple[np.ndarray, np.ndarray]:
        """(shots, detectors) 0/1 -> ((shots, observables) predicted flips, (shots, windows) escalated)."""
        dets = np.asarray(detection_events)
        if dets.ndim != 2 or dets.shape[1] != self.num_detectors:
            raise InvalidArgumentError(f"detection events must have shape (shots, {self.num_detectors}), got "
                                       f"{dets.shape}")
        work = dets.astype(np.uint8, copy=True)
        predicted = np.zeros((len(work), self.num_observables), dtype=np.uint8)
        escalated = np.zeros((len(work), len(self.models)), dtype=bool)
        for k, model in enumerate(self.models):
            payload = work[:, model.detectors]
            up = payload.sum(axis=1, dtype=np.int64) > self.threshold
            escalated[:, k] = up
            reply = np.zeros((len(work), self.num_observables + len(model.handed_on)), dtype=np.uint8)
            for tier, rows in zip(self.tiers(), (~up, up)):
                if rows.any():
                    reply[rows] = tier.decoders[tier.shape[k]].decode_batch(payload[rows])
            predicted ^= reply[:, :self.num_observables]
            work[:, model.handed_on] ^= reply[:, self.num_observables:]
        return predicted, escalated


def dispatch_tiered(tw: TieredWindowDecoder, dets: np.ndarray, sessions: tuple[Any, Any]) -> dict[str, Any]:
    """Decode every shot of ``dets`` window by window over the (primary, auxiliary) sessions.

    Each round's wait has the session's deadline (its ``timeout_ms``); a failed round stops the stream."""
    shots, num_windows, num_obs = len(dets), len(tw.models), tw.num_observables
    work = np.ascontiguousarray(dets, dtype=np.uint8).copy()
    pred = np.zeros((shots, num_obs), dtype=np.uint8)
    latency = np.zeros((shots, num_windows), dtype=np.uint64)
    escalated = np.zeros((shots, num_windows), dtype=bool)
    widths = [num_obs + len(m.handed_on) for m in tw.models]
    tiers = tw.tiers()
    t0 = time.perf_counter()
    for s in range(shots):
        row = work[s]
        for k, model in enumerate(tw.models):
            events = row[model.detectors]
            up = int(events.sum()) > tw.threshold
            tier = tiers[up]
            payload = np.packbits(events, bitorder="little").tobytes()
            t1 = time.perf_counter_ns()
            reply = sessions[up].round(payload, decoder_id=tier.shape[k])
            latency[s, k] = time.perf_counter_ns() - t1
            escalated[s, k] = up
            bits = np.unpackbits(np.frombuffer(reply, dtype=np.uint8), count=widths[k], bitorder="little")
            pred[s] ^= bits[:num_obs]
            row[model.handed_on] ^= bits[num_obs:]
    return {"predictions": pred, "latency": latency, "escalated": escalated, "elapsed": time.perf_counter() - t0}


@dataclass
class TieredStreamResult:
    """What a tiered stream measured; :meth:`to_json` gives the report."""

    shots: int
    rounds: int
    windows_per_shot: int
    predictions: np.ndarray  # (shots, observables) 0/1
    logical_errors: int | None
    window_latency_ns: np.ndarray  # (shots, windows): each window's round trip on its tier's coprocessor
    escalated: np.ndarray  # (shots, windows): the window went to the auxiliary decoder
    escalate_when: str
    placements: dict[str, dict[str, Any]]  # tier -> its placement's description
    decoders: dict[str, dict[str, Any]]  # tier -> name, params
    dispatch_s: float
    window: int | None = None
    commit: int | None = None
    wall_s: float = 0.0
    reference_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ler(self) -> float | None:
        return None if self.logical_errors is None else self.logical_errors / self.shots

    @property
    def escalated_fraction(self) -> float:
        return float(self.escalated.mean()) if self.escalated.size else 0.0

    def to_json(self) -> dict[str, Any]:
        from .stream import _wilson, quantiles

        keys = ("p50", "p90", "p99", "p999", "max")
        tiers = {}
        for name, mask in (("primary", ~self.escalated), ("auxiliary", self.escalated)):
            tiers[name] = {"decoder": self.decoders[name], "placement": self.placements[name],
                           "windows": int(mask.sum()), "latency_ns": quantiles(self.window_latency_ns[mask], *keys)}
        out = {
            "shots": self.shots, "rounds": self.rounds, "windows_per_shot": self.windows_per_shot,
            "logical_errors": self.logical_errors, "ler": self.ler, "ler_ci95": _wilson(self.logical_errors, self.shots),
            "latency_ns": quantiles(self.window_latency_ns, *keys),
            "escalated": self.escalated_fraction, "escalate_when": self.escalate_when, "tiers": tiers,
            "window": self.window, "commit": self.commit, "wall_s": self.wall_s, "dispatch_s": self.dispatch_s,
            # the shape of the other reports: the primary's placement and decoder
            "placement": self.placements["primary"], "decoder": self.decoders["primary"],
        }
        if self.reference_s is not None:
            out["reference_s"] = self.reference_s
        out.update(self.extra)
        return out
