"""Tiered decoding: a fast primary decoder, and an auxiliary one for the windows it flags
(docs/streaming.md, "Tiered decoding").

The shot is decoded in sliding windows (:class:`~backline_qec.windows.SlidingWindowDecoder`'s
plan, the same for both tiers). For each window, in order, the controller reads the window's
detection events with every earlier commit applied, and escalates by one of two criteria:

* ``not-converged`` (the default): the primary decodes every window, and its reply goes on with
  the detection events its estimate explains (``reply_syndrome``); a window whose estimate does not
  explain its events -- BP that did not converge -- goes on to the auxiliary decoder, whose reply
  replaces the primary's. A decoder whose estimate always explains the syndrome (matching, OSD, a
  table) never escalates.
* ``syndrome-weight>K``: a window of more than ``K`` detection events goes to the auxiliary
  decoder's coprocessor, any other to the primary's (one round either way).

The chosen decoder's reply is the window's: its committed observable flips, and the detector flips
it hands on to the next window. Each tier's coprocessor runs
:func:`~backline_qec.engine.window_function` over that tier's window decoders (decoder id: the
window's shape), so a round is one window, as with parallel windows.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import stim

from backline_core import InvalidArgumentError

from .report import LogicalErrorRate, quantiles
from .windows import SlidingWindowDecoder

#: the escalation criterion: the primary's estimate does not explain the window's detection events
NOT_CONVERGED = "not-converged"
_WEIGHT = re.compile(r"syndrome-weight>(-?\d+)")


def parse_escalate_when(text: str) -> int | None:
    """``syndrome-weight>K`` -> ``K``; ``not-converged`` -> None; anything else is one clear error."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"escalate_when={text!r} must be text: not-converged or syndrome-weight>K")
    text = text.strip()
    if text == NOT_CONVERGED:
        return None
    m = _WEIGHT.fullmatch(text.replace(" ", ""))
    if m is None:
        raise InvalidArgumentError(f"--escalate-when {text!r}: expected not-converged or syndrome-weight>K (K a whole "
                                   "number of detection events, -1: escalate every window)")
    return int(m.group(1))


class TieredWindowDecoder:
    """Sliding windows decoded in two tiers, in this process: ``threshold`` None escalates to
    ``auxiliary`` each window whose ``primary`` estimate does not explain its detection events;
    a whole number K, each window of more than K detection events (after the earlier windows'
    handed-on flips), which ``primary`` then does not decode."""

    def __init__(self, circuit: stim.Circuit, primary: str, auxiliary: str, *, threshold: int | None,
                 window: int | None = None, commit: int | None = None,
                 auxiliary_params: dict[str, Any] | None = None, **params: Any) -> None:
        if threshold is not None and (not isinstance(threshold, int) or isinstance(threshold, bool)):
            raise InvalidArgumentError(f"threshold={threshold!r} must be a whole number of detection events, or None "
                                       "(escalate what the primary did not converge on)")
        self.threshold = threshold
        self.primary = SlidingWindowDecoder(circuit, primary, window=window, commit=commit,
                                            reply_syndrome=threshold is None, **params)
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

    @property
    def converging(self) -> bool:
        """Escalation by convergence (the primary decodes every window first)."""
        return self.threshold is None

    def reply_width(self, k: int, tier: int) -> int:
        """Bits of window ``k``'s reply from tier 0 (primary) or 1 (auxiliary)."""
        model = self.models[k]
        extra = len(model.detectors) if tier == 0 and self.converging else 0
        return self.num_observables + len(model.handed_on) + extra

    def explained(self, events: np.ndarray, reply: np.ndarray, k: int) -> np.ndarray:
        """Per row: the primary's reply to window ``k`` explains ``events`` (its syndrome bits equal them)."""
        tail = self.num_observables + len(self.models[k].handed_on)
        return (reply[..., tail:] == events).all(axis=-1)

    def decode_batch(self, detection_events: Any) -> tuple[np.ndarray, np.ndarray]:
        """(shots, detectors) 0/1 -> ((shots, observables) predicted flips, (shots, windows) escalated)."""
        dets = np.asarray(detection_events)
        if dets.ndim != 2 or dets.shape[1] != self.num_detectors:
            raise InvalidArgumentError(f"detection events must have shape (shots, {self.num_detectors}), got "
                                       f"{dets.shape}")
        work = dets.astype(np.uint8, copy=True)
        num_obs = self.num_observables
        predicted = np.zeros((len(work), num_obs), dtype=np.uint8)
        escalated = np.zeros((len(work), len(self.models)), dtype=bool)
        primary, auxiliary = self.tiers()
        for k, model in enumerate(self.models):
            payload = work[:, model.detectors]
            width = num_obs + len(model.handed_on)
            reply = np.zeros((len(work), width), dtype=np.uint8)
            if self.converging:
                first = primary.decoders[primary.shape[k]].decode_batch(payload)
                up = ~self.explained(payload, first, k)
                reply[:] = first[:, :width]
            else:
                up = payload.sum(axis=1, dtype=np.int64) > self.threshold
                if (~up).any():
                    reply[~up] = primary.decoders[primary.shape[k]].decode_batch(payload[~up])
            if up.any():
                reply[up] = auxiliary.decoders[auxiliary.shape[k]].decode_batch(payload[up])
            escalated[:, k] = up
            predicted ^= reply[:, :num_obs]
            work[:, model.handed_on] ^= reply[:, num_obs:]
        return predicted, escalated


def dispatch_tiered(tw: TieredWindowDecoder, dets: np.ndarray, sessions: tuple[Any, Any]) -> dict[str, Any]:
    """Decode every shot of ``dets`` window by window over the (primary, auxiliary) sessions.

    ``latency`` is each window's time to its answer (with ``not-converged``, an escalated window's
    is both rounds'); ``tier_latency`` each tier's round trip (0 where that tier had no round).
    Each round's wait has the session's deadline (its ``timeout_ms``); a failed round stops the stream."""
    shots, num_windows, num_obs = len(dets), len(tw.models), tw.num_observables
    work = np.ascontiguousarray(dets, dtype=np.uint8).copy()
    pred = np.zeros((shots, num_obs), dtype=np.uint8)
    latency = np.zeros((shots, num_windows), dtype=np.uint64)
    tier_latency = np.zeros((2, shots, num_windows), dtype=np.uint64)
    escalated = np.zeros((shots, num_windows), dtype=bool)
    widths = [[tw.reply_width(k, tier) for tier in (0, 1)] for k in range(num_windows)]
    tiers = tw.tiers()

    def ask(tier: int, k: int, s: int, payload: bytes) -> np.ndarray:
        t1 = time.perf_counter_ns()
        reply = sessions[tier].round(payload, decoder_id=tiers[tier].shape[k])
        tier_latency[tier, s, k] = time.perf_counter_ns() - t1
        return np.unpackbits(np.frombuffer(reply, dtype=np.uint8), count=widths[k][tier], bitorder="little")

    t0 = time.perf_counter()
    for s in range(shots):
        row = work[s]
        for k, model in enumerate(tw.models):
            events = row[model.detectors]
            payload = np.packbits(events, bitorder="little").tobytes()
            if tw.converging:
                bits = ask(0, k, s, payload)
                up = not bool(tw.explained(events, bits, k))
                if up:
                    bits = ask(1, k, s, payload)
            else:
                up = int(events.sum()) > tw.threshold
                bits = ask(int(up), k, s, payload)
            latency[s, k] = tier_latency[0, s, k] + tier_latency[1, s, k]
            escalated[s, k] = up
            pred[s] ^= bits[:num_obs]
            row[model.handed_on] ^= bits[num_obs:num_obs + len(model.handed_on)]
    return {"predictions": pred, "latency": latency, "tier_latency": tier_latency, "escalated": escalated,
            "elapsed": time.perf_counter() - t0}


@dataclass
class TieredStreamResult(LogicalErrorRate):
    """What a tiered stream measured; :meth:`to_json` gives the report."""

    shots: int
    rounds: int
    windows_per_shot: int
    predictions: np.ndarray  # (shots, observables) 0/1
    logical_errors: int | None
    window_latency_ns: np.ndarray  # (shots, windows): each window's time to its answer (both rounds if escalated)
    tier_latency_ns: np.ndarray  # (2, shots, windows): the primary's, the auxiliary's round trip (0: no round)
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
    def escalated_fraction(self) -> float:
        return float(self.escalated.mean()) if self.escalated.size else 0.0

    def to_json(self) -> dict[str, Any]:
        keys = ("p50", "p90", "p99", "p999", "max")
        tiers = {}
        for tier, name in enumerate(("primary", "auxiliary")):
            mask = self.tier_latency_ns[tier] > 0
            tiers[name] = {"decoder": self.decoders[name], "placement": self.placements[name],
                           "windows": int(mask.sum()), "latency_ns": quantiles(self.tier_latency_ns[tier][mask], *keys)}
        out = {
            "shots": self.shots, "rounds": self.rounds, "windows_per_shot": self.windows_per_shot,
            **self.ler_json(),
            "latency_ns": quantiles(self.window_latency_ns, *keys),
            "latency_escalated_ns": quantiles(self.window_latency_ns[self.escalated], *keys),
            "latency_not_escalated_ns": quantiles(self.window_latency_ns[~self.escalated], *keys),
            "escalated": self.escalated_fraction, "escalate_when": self.escalate_when, "tiers": tiers,
            "window": self.window, "commit": self.commit, "wall_s": self.wall_s, "dispatch_s": self.dispatch_s,
            # the shape of the other reports: the primary's placement and decoder
            "placement": self.placements["primary"], "decoder": self.decoders["primary"],
        }
        if self.reference_s is not None:
            out["reference_s"] = self.reference_s
        out.update(self.extra)
        return out
