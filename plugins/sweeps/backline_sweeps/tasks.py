"""Tasks as sinter has them: a circuit file, a decoder name and JSON metadata, with sinter's strong_id."""

from __future__ import annotations

import glob
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from backline_core import BacklineError, InvalidArgumentError
from backline_core.sdk import read_input_text

#: the largest circuit file read
MAX_CIRCUIT_BYTES = 64 << 20
#: how sinter names Backline's decoders
BACKLINE_PREFIX = "backline:"


@dataclass(frozen=True)
class TaskSpec:
    """One (circuit, decoder, metadata) task: what a worker needs to sample and decode it.

    ``strong_id`` is sinter's for the same circuit, decoder and metadata (so rows merge)."""

    strong_id: str
    path: str
    circuit_text: str
    decoder: str
    json_metadata: Any
    num_detectors: int
    num_observables: int

    def label(self) -> str:
        return f"{self.path} with {self.decoder}"


def expand_circuits(patterns: Sequence[str]) -> list[str]:
    """The circuit files the globs name, in sorted order per glob, each once (as given: sinter's
    ``{'path': path}`` metadata holds the path as typed)."""
    paths: list[str] = []
    for pattern in patterns:
        found = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not found:
            raise InvalidArgumentError(f"--circuits {pattern!r}: matches no file")
        paths.extend(p for p in found if p not in paths)
    return paths


def sinter_dem(circuit: Any) -> Any:
    """The DEM sinter derives for a task without one (its collection worker's rule, in order)."""
    try:
        return circuit.detector_error_model(decompose_errors=True, approximate_disjoint_errors=True)
    except ValueError:
        try:
            return circuit.detector_error_model(approximate_disjoint_errors=True)
        except ValueError:
            return circuit.detector_error_model(approximate_disjoint_errors=True, flatten_loops=True)


def metadata_for(path: str, metadata_from_filename: bool) -> Any:
    """sinter collect's metadata: ``{'path': path}`` by default, or with ``--metadata_func auto``
    the ``key=value`` pairs of the file's name (``sinter.comma_separated_key_values``)."""
    import sinter

    if not metadata_from_filename:
        return {"path": path}
    try:
        return sinter.comma_separated_key_values(path)
    except ValueError as exc:
        raise InvalidArgumentError(f"{path}: --metadata-from-filename wants names like d=3,p=0.001.stim: "
                                   f"{str(exc).splitlines()[0]}") from None


def read_tasks(patterns: Sequence[str], decoders: Sequence[str], *, metadata_from_filename: bool = False) -> list[TaskSpec]:
    """Every circuit the globs name, with every decoder: sinter's tasks, strong ids computed as sinter does."""
    import sinter
    import stim

    tasks = []
    for path in expand_circuits(patterns):
        text = read_input_text(path, what="circuit file", limit=MAX_CIRCUIT_BYTES)
        try:
            circuit = stim.Circuit(text)
        except ValueError as exc:
            raise BacklineError(f"circuit file {path}: not a stim circuit: {str(exc).splitlines()[0]}") from None
        if circuit.num_detectors == 0 or circuit.num_observables == 0:
            raise BacklineError(f"circuit file {path}: has {circuit.num_detectors} detectors and "
                                f"{circuit.num_observables} observables; a task needs both")
        metadata = metadata_for(path, metadata_from_filename)
        try:
            dem = sinter_dem(circuit)
        except ValueError as exc:
            raise BacklineError(f"circuit file {path}: stim cannot make its detector error model: "
                                f"{str(exc).splitlines()[0]}") from None
        for name in decoders:
            task = sinter.Task(circuit=circuit, decoder=name, detector_error_model=dem, json_metadata=metadata)
            tasks.append(TaskSpec(strong_id=task.strong_id(), path=path, circuit_text=str(circuit), decoder=name,
                                  json_metadata=metadata, num_detectors=circuit.num_detectors,
                                  num_observables=circuit.num_observables))
    return tasks


def check_decoders(names: Sequence[str], *, placement: bool) -> None:
    """Refuse, in one line, a decoder the workers would not find (checked here, where the user is).
    Only the named plugins load: the others' imports would delay the sweep's start."""
    import sinter

    from backline_core import PluginError, UnknownPluginError
    from backline_core.sdk import sinter_decoders

    for name in names:
        if name.startswith(BACKLINE_PREFIX):
            try:
                sinter_decoders([name])
            except UnknownPluginError:
                raise InvalidArgumentError(f"--decoders: unknown decoder {name!r}; installed: "
                                           f"{', '.join(sorted(sinter_decoders())) or 'none'}") from None
            except PluginError as exc:
                raise InvalidArgumentError(f"--decoders {name!r}: {str(exc).splitlines()[0]}") from None
        elif placement:
            raise InvalidArgumentError(f"--decoders {name!r}: --placement streams to Backline decoders only "
                                       f"({', '.join(sorted(sinter_decoders()))})")
        elif name not in sinter.BUILT_IN_DECODERS:
            raise InvalidArgumentError(f"--decoders: unknown decoder {name!r}; give backline:NAME "
                                       f"({', '.join(sorted(sinter_decoders()))}) or one of sinter's "
                                       f"({', '.join(sorted(sinter.BUILT_IN_DECODERS))})")
