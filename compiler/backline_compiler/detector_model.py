"""The detector error model of a straight-line physical program, for decoders that build from one.

A program encoded with ``encode-steane{extraction=flag}`` (and its noise, e.g. ``inject-noise``)
decodes each logical measurement with an explicit ``bqec.decode`` carrying
``backline.detectors`` and ``backline.observable``: measurement indices of the shot. This
module replays the program's ``bquantum`` ops -- gates, resets, measurements and noise
channels in program order, the shot restarting at ``bquantum.reset_all`` -- in stim's frame
simulator, one column per fault component, and gives each such decode the detector error
model of its detectors and its one observable (``decoder_id`` order).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects import llvm
from xdsl.dialects.builtin import IntegerAttr, ModuleOp
from xdsl.ir import SSAValue

from backline_core import InvalidArgumentError

from .dialects import bqec
from .dialects import bquantum as q
from .passes.encode_steane import DETECTORS_ATTR, OBSERVABLES_ATTR

#: bquantum gate -> stim instruction
STIM_GATES = {"I": "I", "X": "X", "Y": "Y", "Z": "Z", "H": "H", "S": "S", "SDG": "S_DAG", "SX": "SQRT_X",
              "CNOT": "CX", "CZ": "CZ", "SWAP": "SWAP"}
#: bquantum noise channel -> stim instruction
STIM_NOISE = {"x_flip": "X_ERROR", "z_flip": "Z_ERROR", "y_flip": "Y_ERROR", "depolarize1": "DEPOLARIZE1",
              "depolarize2": "DEPOLARIZE2"}


def _wire(op: Any, value: SSAValue) -> int:
    owner = value.owner
    if not (isinstance(owner, llvm.ConstantOp) and isinstance(owner.value, IntegerAttr)):
        raise InvalidArgumentError(f"detector model: '{op.name}' has a wire that is not a constant; only a "
                                   "straight-line program with constant wires has one")
    return owner.value.value.data


#: the non-identity Paulis, in the order a frame simulator takes them
_PAULIS = "XYZ"


def _components(channel: str, wires: list[int]) -> list[dict[int, str]]:
    if channel == "depolarize1":
        return [{wires[0]: P} for P in _PAULIS]
    if channel == "depolarize2":
        a, b = wires
        return [{k: v for k, v in ((a, P), (b, Q)) if v != "I"} for P in "I" + _PAULIS for Q in "I" + _PAULIS
                if P + Q != "II"]
    return [{wires[0]: channel[0].upper()}]  # x_flip, y_flip, z_flip


@dataclass
class _ShotModel:
    """One shot's noiseless instructions, its noise locations' components, its measurements."""

    chunks: list[Any] = field(default_factory=list)  # stim.Circuit | (component indices) in program order
    components: list[tuple[dict[int, str], float]] = field(default_factory=list)
    measured: int = 0
    decodes: list[tuple[int, list[list[int]], list[list[int]]]] = field(default_factory=list)

    def append(self, name: str, targets: list[int]) -> None:
        import stim

        if not self.chunks or not isinstance(self.chunks[-1], stim.Circuit):
            self.chunks.append(stim.Circuit())
        self.chunks[-1].append(name, targets)


def _shots(module: ModuleOp) -> tuple[list[_ShotModel], int]:
    shots, qubits = [_ShotModel()], 1
    for op in module.walk():
        if isinstance(op, q.ResetAllOp):
            shots.append(_ShotModel())
            continue
        shot = shots[-1]
        if isinstance(op, q.GateOp):
            if op.params:
                raise InvalidArgumentError(f"detector model: gate {op.gate.data} has parameters; a detector error "
                                           "model needs a Clifford circuit")
            wires = [_wire(op, w) for w in op.wires]
            shot.append(STIM_GATES[op.gate.data], wires)
        elif isinstance(op, q.ResetOp):
            wires = [_wire(op, op.wire)]
            shot.append("R", wires)
        elif isinstance(op, q.MeasureOp):
            wires = [_wire(op, op.wire)]
            shot.append("M", wires)
            shot.measured += 1
        elif isinstance(op, q.NoiseOp):
            wires = [_wire(op, w) for w in op.wires]
            parts = _components(op.channel.data, wires)
            first = len(shot.components)
            shot.components += [(c, op.p.value.data / len(parts)) for c in parts]
            shot.chunks.append(range(first, len(shot.components)))
        elif isinstance(op, q.ApplyMaskOp):
            raise InvalidArgumentError("detector model: the program applies corrections in real time "
                                       "(bquantum.apply_mask); only a program decoded over its detectors has one")
        elif isinstance(op, bqec.DecodeOp) and DETECTORS_ATTR in op.attributes:
            dets = [list(d.get_values()) for d in op.attributes[DETECTORS_ATTR].data]
            shot.decodes.append((op.decoder_id_attr.value.data, dets,
                                 [list(o.get_values()) for o in op.attributes[OBSERVABLES_ATTR].data]))
            continue
        else:
            continue
        qubits = max(qubits, *(w + 1 for w in wires))
    return shots, qubits


def _flips(shot: _ShotModel, qubits: int, randomize: bool) -> np.ndarray:
    """Measurement flips (measurements x components): each component injected alone, in its own
    column, into a frame simulation of the noiseless shot (no stabilizer randomization: a column
    is that fault's exact effect, also on outcomes that are random without noise)."""
    import stim

    width = len(shot.components) or 64  # without components: 64 noiseless columns
    sim = stim.FlipSimulator(batch_size=width, num_qubits=qubits, disable_stabilizer_randomization=not randomize)
    for chunk in shot.chunks:
        if isinstance(chunk, stim.Circuit):
            sim.do(chunk)
            continue
        if not shot.components:
            continue
        for pauli in _PAULIS:
            mask = np.zeros((qubits, width), dtype=bool)
            for j in chunk:
                for wire, p in shot.components[j][0].items():
                    if p == pauli:
                        mask[wire, j] = True
            if mask.any():
                sim.broadcast_pauli_errors(pauli=pauli, mask=mask)
    return sim.get_measurement_flips(bit_packed=False)


def _parities(flips: np.ndarray, rows: list[list[int]]) -> np.ndarray:
    out = np.zeros((len(rows), flips.shape[1]), dtype=bool)
    for i, row in enumerate(rows):
        for m in row:
            out[i] ^= flips[m]
    return out


def detector_error_models(module: ModuleOp) -> list[Any]:
    """Each flag-extraction decode's ``stim.DetectorErrorModel`` (in ``decoder_id`` order): per
    distinct (detectors, observables) effect of one fault component, its probability (components
    with one effect combined as independent events). Observable ``Lk`` is the shot's ``k``-th
    logical outcome; an outcome that is random without noise (a GHZ state's) has a flip only
    up to the state's stabilizers (:func:`gauges`), which is why the model is built by frame
    simulation and only the detectors must be deterministic (checked)."""
    import stim

    found: dict[int, Any] = {}
    shots, qubits = _shots(module)
    for shot in shots:
        if not shot.decodes:
            continue
        flips = _flips(shot, qubits, randomize=False)
        noiseless = _flips(_ShotModel(shot.chunks, [], shot.measured, shot.decodes), qubits, randomize=True)
        for decoder_id, dets, observables in shot.decodes:
            if decoder_id in found:
                raise InvalidArgumentError(f"detector model: two decodes have decoder_id {decoder_id}; a module "
                                           "has one flag-decoded shot")
            if _parities(noiseless, dets).any():
                raise InvalidArgumentError(f"detector model: decode {decoder_id} has a detector that is not "
                                           "deterministic without noise; its detectors are wrong")
            signature = np.concatenate([_parities(flips, dets), _parities(flips, observables)])
            merged: dict[bytes, float] = {}
            for j, (_, p) in enumerate(shot.components):
                column = signature[:, j]
                if not column.any() or p == 0:
                    continue
                key = np.packbits(column).tobytes()
                q0 = merged.get(key, 0.0)
                merged[key] = q0 * (1 - p) + p * (1 - q0)
            model = stim.DetectorErrorModel()
            for key, p in merged.items():
                column = np.unpackbits(np.frombuffer(key, np.uint8))[: signature.shape[0]].astype(bool)
                targets = [stim.target_relative_detector_id(i) for i in np.flatnonzero(column[: len(dets)])]
                targets += [stim.target_logical_observable_id(i) for i in np.flatnonzero(column[len(dets):])]
                model.append("error", p, targets)
            # detectors and observables no single fault reaches still count
            model.append("detector", [], [stim.target_relative_detector_id(len(dets) - 1)])
            model.append("logical_observable", [], [stim.target_logical_observable_id(len(observables) - 1)])
            found[decoder_id] = model
    if sorted(found) != list(range(len(found))):
        raise InvalidArgumentError(f"detector model: the decodes' decoder_ids {sorted(found)} are not 0..n-1")
    return [found[k] for k in range(len(found))]


def gauges(module: ModuleOp) -> list[np.ndarray]:
    """Per decode (``decoder_id`` order): rows spanning the observable flips that are no error --
    how the logical outcomes vary without noise (for a GHZ state: all three at once)."""
    out = []
    shots, qubits = _shots(module)
    for shot in shots:
        if shot.decodes:
            noiseless = _flips(_ShotModel(shot.chunks, [], shot.measured, shot.decodes), qubits, randomize=True)
            for _, _, observables in shot.decodes:
                out.append(_parities(noiseless, observables).T.copy())
    return out
