"""Sliding windows over a circuit's rounds, and the detector error model of each window.

A window covers rounds ``[start, end)``; the corrections of its commit region, the error
mechanisms whose first detector lies in rounds ``[start, commit_end)``, are final. The next
window starts at ``commit_end``. The last window commits everything; with no ``window`` the
whole shot is one window (Dennis et al. 2002, section VI; docs/streaming.md).

A window's DEM holds the detectors of its rounds, renumbered in round order, and the error
mechanisms whose first detector lies in the window, cut off at its end. Its observables are
what the controller needs back from the window, so that any decoder replying with
``"observables"`` serves a window unchanged:

- observable ``k < O``: the circuit's observable ``k``, carried by committed mechanisms only
  (an uncommitted mechanism's observables are decided by a later window);
- observable ``O + i``: the ``i``-th detector of rounds ``[commit_end, end)`` (the rounds the
  next window sees again), carried by each committed mechanism that flips it -- so the reply
  says which later detection events the committed correction flips.

With the whole shot as one window the window's DEM is the circuit's, and a decoder decodes
it exactly as it decodes the circuit's DEM offline.

Parallel windows (Skoric et al. 2023; :func:`plan_parallel_windows`) use the same model with a
commit region in the middle: a layer-A window commits its core ``[commit_start, commit_end)``,
decodes the mechanisms reaching into it from before ``start`` too (never committing them), and
also hands on the flips of the first ``hand_back`` rounds of its core (the layer-B window before
it decodes them); a layer-B window (``closed_end``) decodes only the mechanisms starting in its
commit region, both neighbours' commits already applied to its detection events.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import stim

from backline_core import InvalidArgumentError, plugins
from backline_core.sdk import check_matrices

from .rounds import detector_rounds


@dataclass(frozen=True)
class Window:
    """Rounds ``[start, end)`` are decoded; the mechanisms starting in ``[commit_from, commit_end)`` are committed.

    The defaults are a sliding window's; the other fields serve parallel windows (module docstring)."""

    start: int
    end: int
    commit_end: int
    #: the first committed round (None: ``start``)
    commit_start: int | None = None
    #: also decode (never commit) the mechanisms that start before ``start`` and reach into the window
    open_start: bool = False
    #: decode only the mechanisms starting in the commit region (the later ones are committed already)
    closed_end: bool = False
    #: hand on the flips of the detectors of rounds ``[commit_from, commit_from + hand_back)`` too
    hand_back: int = 0

    @property
    def last(self) -> bool:
        return self.commit_end == self.end

    @property
    def commit_from(self) -> int:
        return self.start if self.commit_start is None else self.commit_start


def plan_windows(num_rounds: int, window: int | None = None, commit: int | None = None) -> tuple[Window, ...]:
    """The windows over ``num_rounds`` rounds: ``window`` rounds each, advancing by ``commit``."""
    if num_rounds < 1:
        raise InvalidArgumentError("there are no rounds to decode")
    if window is None and commit is None:
        return (Window(0, num_rounds, num_rounds),)
    if window is None or commit is None:
        raise InvalidArgumentError("give --window and --commit together (in rounds), or neither for one window "
                                   "over the whole shot")
    for name, value in (("window", window), ("commit", commit)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InvalidArgumentError(f"{name}={value!r} must be a whole number of rounds, at least 1")
    if commit > window:
        raise InvalidArgumentError(f"commit={commit} is more than window={window}: a window commits at most the "
                                   "rounds it decodes")
    if commit == window and window < num_rounds:
        raise InvalidArgumentError(f"commit={commit} equals window={window}: a window needs buffer rounds after its "
                                   "commit region (commit < window), or one window over the whole shot")
    windows: list[Window] = []
    start = 0
    while start + window < num_rounds:
        windows.append(Window(start, start + window, start + commit))
        start += commit
    windows.append(Window(start, num_rounds, num_rounds))
    return tuple(windows)


def plan_parallel_windows(num_rounds: int, window: int | None, commit: int | None,
                          reach: Sequence[int] | np.ndarray | None = None) -> tuple[Window, ...]:
    """Layer-A and layer-B windows over ``num_rounds`` rounds, in the order of their rounds.

    A layer-A window commits a core of ``commit`` rounds and decodes ``buffer = (window - commit) / 2``
    rounds on each side (clipped at the shot's ends); cores are ``commit + 2 * buffer`` rounds apart.
    The layer-B window between two cores commits the gap, reaching into the next core as far as
    its mechanisms do. ``reach[r]``: the last round a mechanism whose first detector is in round
    ``r`` touches (default ``r + 1``). :func:`window_dependencies` says which windows go first."""
    if num_rounds < 1:
        raise InvalidArgumentError("there are no rounds to decode")
    if window is None or commit is None:
        raise InvalidArgumentError("parallel windows need --window and --commit (in rounds): a layer-A window of "
                                   "W rounds commits its middle C")
    for name, value in (("window", window), ("commit", commit)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InvalidArgumentError(f"{name}={value!r} must be a whole number of rounds, at least 1")
    if commit >= window or (window - commit) % 2:
        raise InvalidArgumentError(f"window={window}, commit={commit}: a layer-A window has a buffer of "
                                   "(window - commit) / 2 rounds on each side of its core, so window - commit must "
                                   "be even and at least 2")
    reach_of = np.arange(num_rounds) + 1 if reach is None else np.asarray(reach)
    buffer = (window - commit) // 2
    if window >= num_rounds:  # one window decodes and commits the whole shot
        return (Window(0, num_rounds, num_rounds, 0, open_start=True),)

    def end_of(a: int, b: int, at_least: int) -> int:
        return min(num_rounds, max(at_least, int(reach_of[a:b].max()) + 1))

    cores = [(s, min(s + commit, num_rounds)) for s in range(0, num_rounds, commit + 2 * buffer)]
    out: list[Window] = []
    back = 0
    for k, (c0, c1) in enumerate(cores):
        gap_end = cores[k + 1][0] if k + 1 < len(cores) else num_rounds
        b_end = end_of(c1, gap_end, gap_end) if c1 < gap_end else c1
        if k + 1 < len(cores) and b_end > cores[k + 1][1]:
            raise InvalidArgumentError(f"commit={commit}: the mechanisms of round {gap_end - 1} reach round "
                                       f"{b_end - 1}, past the next core; commit at least {b_end - gap_end} rounds")
        out.append(Window(max(0, c0 - buffer), end_of(c0, c1, c1 + buffer), c1, c0, open_start=True,
                          hand_back=back))
        if c1 < gap_end:
            out.append(Window(c1, b_end, gap_end, c1, closed_end=True))
        back = b_end - gap_end
    return tuple(out)


def window_dependencies(windows: Sequence[Window]) -> list[tuple[int, ...]]:
    """For each window, the windows whose commits it needs first: a layer-B window's neighbours."""
    return [tuple(j for j, v in enumerate(windows) if v.open_start and w.closed_end
                  and (v.commit_end == w.commit_from or v.commit_from == w.commit_end)) for w in windows]


def mechanism_reach(rounds: np.ndarray, mechanisms: Sequence[Any]) -> np.ndarray:
    """``reach[r]``: the last round touched by a mechanism whose first detector is in round ``r`` (at least ``r``)."""
    rounds = np.asarray(rounds)
    reach = np.arange(int(rounds.max()) + 1)
    for p, parts in mechanisms:
        dets = [d for ds, _ in parts for d in ds]
        if p > 0 and dets:
            r = rounds[dets]
            first = int(r.min())
            reach[first] = max(reach[first], int(r.max()))
    return reach


@dataclass(frozen=True, eq=False)
class WindowModel:
    """A window's DEM and how its detectors and reply map onto the circuit's."""

    window: Window
    dem: stim.DetectorErrorModel
    #: the circuit's detector of each of the window's detectors (its payload, in order)
    detectors: np.ndarray
    #: the circuit's detector of each reply bit after the observables
    handed_on: np.ndarray
    num_observables: int
    #: indices (into the DEM's flattened error mechanisms) of those decoded here, and of those committed
    decoded: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    committed: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def _mechanisms(dem: stim.DetectorErrorModel) -> list[tuple[float, list[tuple[list[int], list[int]]]]]:
    out = []
    for inst in dem.flattened():
        if inst.type != "error":
            continue
        p = float(inst.args_copy()[0])
        parts: list[tuple[list[int], list[int]]] = [([], [])]
        for t in inst.targets_copy():
            if t.is_separator():
                parts.append(([], []))
            elif t.is_relative_detector_id():
                parts[-1][0].append(t.val)
            elif t.is_logical_observable_id():
                parts[-1][1].append(t.val)
        out.append((p, parts))
    return out


def window_model(dem: stim.DetectorErrorModel, rounds: np.ndarray, window: Window,
                 mechanisms: Sequence[Any] | None = None, *, reply_syndrome: bool = False) -> WindowModel:
    """The DEM of ``window`` (see the module docstring); ``rounds`` gives each detector's round.

    ``reply_syndrome``: the reply goes on with one bit per window detector, the detection events
    the decoder's whole estimate (committed or not) explains: equal to the window's events exactly
    when the estimate is consistent with them (BP: when it converged)."""
    rounds = np.asarray(rounds)
    if rounds.shape != (dem.num_detectors,):
        raise InvalidArgumentError(f"rounds has {rounds.size} entries but the DEM has {dem.num_detectors} detectors")
    inside = np.flatnonzero((rounds >= window.start) & (rounds < window.end))
    detectors = inside[np.argsort(rounds[inside], kind="stable")]
    local = {int(d): i for i, d in enumerate(detectors)}
    lo = window.commit_from
    handed = [int(d) for d in detectors
              if rounds[d] >= window.commit_end or lo <= rounds[d] < lo + window.hand_back]
    pseudo = {d: i for i, d in enumerate(handed)}
    num_obs = dem.num_observables
    lines = []
    decoded, committed_ids = [], []
    for index, (p, parts) in enumerate(mechanisms if mechanisms is not None else _mechanisms(dem)):
        if p <= 0:
            continue
        dets = [d for ds, _ in parts for d in ds]
        first = min((int(rounds[d]) for d in dets), default=None)
        if first is None:
            belongs, committed = window.last, True  # undetectable: the last window owns it
        else:
            if window.closed_end:
                belongs = lo <= first < window.commit_end
            else:
                belongs = window.start <= first < window.end or (
                    window.open_start and first < window.start and max(int(rounds[d]) for d in dets) >= window.start)
            committed = lo <= first and (first < window.commit_end or window.last)
        if not belongs:
            continue
        decoded.append(index)
        if committed:
            committed_ids.append(index)
        text = []
        for ds, os_ in parts:
            kept = [local[d] for d in ds if d in local]
            obs = sorted(os_) if committed else []
            if committed:
                obs += sorted(num_obs + pseudo[d] for d in ds if d in pseudo)
            if reply_syndrome:
                obs += [num_obs + len(handed) + k for k in kept]
            if kept or obs:
                text.append(" ".join([*(f"D{k}" for k in kept), *(f"L{o}" for o in obs)]))
        if text:
            lines.append(f"error({p!r}) " + " ^ ".join(text))
    # declare the last detector and observable, so the counts are the window's even where no error reaches them
    if len(detectors):
        lines.append(f"detector D{len(detectors) - 1}")
    lines.append(f"logical_observable L{num_obs + len(handed) + (len(detectors) if reply_syndrome else 0) - 1}")
    return WindowModel(window=window, dem=stim.DetectorErrorModel("\n".join(lines)), detectors=detectors,
                       handed_on=np.asarray(handed, dtype=np.int64), num_observables=num_obs,
                       decoded=np.asarray(decoded, dtype=np.int64), committed=np.asarray(committed_ids, dtype=np.int64))


class SlidingWindowDecoder:
    """A circuit's shots decoded window by window with the installed decoder ``name``.

    One decoder is built per distinct window DEM (the first, the bulk and the last window of
    a memory experiment); :meth:`decode_batch` runs each window over every shot at once.
    """

    #: each window's reply ends with the detection events its estimate explains (:func:`window_model`)
    reply_syndrome = False

    def __init__(self, circuit: stim.Circuit, name: str, *, window: int | None = None, commit: int | None = None,
                 reply_syndrome: bool = False, **params: Any) -> None:
        self.reply_syndrome = bool(reply_syndrome)
        rounds = detector_rounds(circuit)
        self._plan(int(rounds.max()) + 1, window, commit)  # refuse a bad plan before building anything
        if circuit.num_observables == 0:
            raise InvalidArgumentError("the circuit has no observables (no OBSERVABLE_INCLUDE): there is no logical "
                                       "outcome to predict")
        record = plugins.get("decoder", name)
        # decomposed for a decoder that matches on the decomposition only: stim cannot decompose every
        # circuit (a colour code's), and the decomposition changes the columns a matrix decoder sees
        try:
            dem = circuit.detector_error_model(decompose_errors=record.decomposed_dem)
        except ValueError as exc:
            raise InvalidArgumentError(f"decoder {name!r} decodes a DEM decomposed into graphlike errors, and "
                                       f"stim cannot decompose this circuit's: {str(exc).splitlines()[0]}") from None
        self._setup(dem, rounds, (window, commit), record, params)

    @classmethod
    def from_matrices(cls, h: Any, o: Any, priors: Any, rounds: Any, name: str, *, window: int | None = None,
                      commit: int | None = None, **params: Any) -> SlidingWindowDecoder:
        """The windows of check matrix ``h`` (detectors x columns), observables ``o`` and ``priors``;
        ``rounds[d]`` is detector ``d``'s round (0, 1, ...; every round holds a detector)."""
        m = check_matrices(h, o, priors)
        rounds = np.asarray(rounds)
        if rounds.shape != (m.num_detectors,) or not np.issubdtype(rounds.dtype, np.integer):
            raise InvalidArgumentError(f"rounds must be {m.num_detectors} whole numbers (one per row of H), got "
                                       f"shape {rounds.shape} of {rounds.dtype}")
        present = np.unique(rounds)
        if present[0] != 0 or len(present) != int(present[-1]) + 1:
            raise InvalidArgumentError(f"rounds must run 0, 1, ... with a detector in each; they hold "
                                       f"{present[:8].tolist()}")
        cls._plan(int(present[-1]) + 1, window, commit)
        # one DEM error per column, the detectors carrying their round as last coordinate as a circuit's do
        lines = [f"detector(0, 0, {int(r)}) D{d}" for d, r in enumerate(rounds)]
        for j in range(m.num_columns):
            targets = [*(f"D{d}" for d in np.flatnonzero(m.h[:, j])), *(f"L{k}" for k in np.flatnonzero(m.o[:, j]))]
            if targets:
                lines.append(f"error({float(m.priors[j])!r}) " + " ".join(targets))
        lines.append(f"logical_observable L{m.num_observables - 1}")
        self = cls.__new__(cls)
        self._setup(stim.DetectorErrorModel("\n".join(lines)), rounds.astype(np.int64), (window, commit),
                    plugins.get("decoder", name), params)
        return self

    @staticmethod
    def _plan(num_rounds: int, window: int | None, commit: int | None,
              reach: np.ndarray | None = None) -> tuple[Window, ...]:
        return plan_windows(num_rounds, window, commit)

    def _setup(self, dem: stim.DetectorErrorModel, rounds: np.ndarray, spec: tuple[int | None, int | None],
               record: Any, params: dict[str, Any]) -> None:
        self.rounds, self.dem = rounds, dem
        self.num_rounds = int(rounds.max()) + 1
        self.num_detectors, self.num_observables = self.dem.num_detectors, self.dem.num_observables
        #: the decoder's parameters, checked, with its defaults
        self.params = record.check_params(params)
        mechanisms = _mechanisms(self.dem)
        self.windows = self._plan(self.num_rounds, *spec, mechanism_reach(rounds, mechanisms))
        self.models = [window_model(self.dem, self.rounds, w, mechanisms, reply_syndrome=self.reply_syndrome)
                       for w in self.windows]
        #: window index -> index of its decoder in :attr:`decoders` (one per distinct window DEM)
        self.shape: list[int] = []
        self.decoders: list[Any] = []
        seen: dict[str, int] = {}
        for model in self.models:
            # the same mechanisms in another order are the same window: stim lists a circuit's rounds
            # in different orders in places, and one decoder per shape keeps a worker's context small
            key = "\n".join(sorted(str(model.dem).splitlines()))
            if key not in seen:
                seen[key] = len(self.decoders)
                self.decoders.append(record.build_from_dem(model.dem, **params))
            self.shape.append(seen[key])

    def decode_batch(self, detection_events: Any) -> np.ndarray:
        """(shots, detectors) 0/1 -> (shots, observables) predicted flips."""
        dets = np.asarray(detection_events)
        if dets.ndim != 2 or dets.shape[1] != self.num_detectors:
            raise InvalidArgumentError(f"detection events must have shape (shots, {self.num_detectors}), got "
                                       f"{dets.shape}")
        work = dets.astype(np.uint8, copy=True)
        predicted = np.zeros((len(work), self.num_observables), dtype=np.uint8)
        for model, shape in zip(self.models, self.shape):
            reply = self.decoders[shape].decode_batch(work[:, model.detectors])
            predicted ^= reply[:, :self.num_observables]
            work[:, model.handed_on] ^= reply[:, self.num_observables:self.num_observables + len(model.handed_on)]
        return predicted


class ParallelWindowDecoder(SlidingWindowDecoder):
    """A circuit's shots decoded in parallel windows (:func:`plan_parallel_windows`) in this process.

    ``window``/``commit``: a layer-A window's rounds and the core it commits. :attr:`after` gives
    each window's prerequisites; :meth:`decode_batch` decodes every layer-A window, then every
    layer-B one, so its predictions are what any schedule honouring :attr:`after` gives."""

    @staticmethod
    def _plan(num_rounds: int, window: int | None, commit: int | None,
              reach: np.ndarray | None = None) -> tuple[Window, ...]:
        return plan_parallel_windows(num_rounds, window, commit, reach)

    def _setup(self, dem: stim.DetectorErrorModel, rounds: np.ndarray, spec: tuple[int | None, int | None],
               record: Any, params: dict[str, Any]) -> None:
        super()._setup(dem, rounds, spec, record, params)
        #: for each window, the windows that must commit before it is decoded
        self.after = window_dependencies(self.windows)

    def decode_batch(self, detection_events: Any) -> np.ndarray:
        """(shots, detectors) 0/1 -> (shots, observables) predicted flips."""
        dets = np.asarray(detection_events)
        if dets.ndim != 2 or dets.shape[1] != self.num_detectors:
            raise InvalidArgumentError(f"detection events must have shape (shots, {self.num_detectors}), got "
                                       f"{dets.shape}")
        raw = dets.astype(np.uint8)
        work = raw.copy()  # the events with every commit so far applied: what a layer-B window reads
        predicted = np.zeros((len(work), self.num_observables), dtype=np.uint8)
        order = sorted(range(len(self.models)), key=lambda k: bool(self.after[k]))  # layer A, then layer B
        for k in order:
            model = self.models[k]
            source = work if self.after[k] else raw  # a layer-A window sees no other window's commit
            reply = self.decoders[self.shape[k]].decode_batch(source[:, model.detectors])
            predicted ^= reply[:, :self.num_observables]
            work[:, model.handed_on] ^= reply[:, self.num_observables:self.num_observables + len(model.handed_on)]
        return predicted
