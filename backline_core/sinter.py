"""Backline's decoders as sinter decoders, by name: ``backline:NAME``.

Every installed decoder that builds from a detector error model is one ``sinter.Decoder``.
:func:`sinter_decoders` gives each with its default parameters, :func:`decoder` one with the
parameters given (the names its schema declares; ``backline plugins --json`` shows them)::

    sinter collect --circuits *.stim --decoders backline:pymatching backline:bposd \\
        --custom_decoders_module_function backline_core.sinter:sinter_decoders ...

    sinter.collect(tasks=tasks, num_workers=4, decoders=["bposd-cs4"],
                   custom_decoders={"bposd-cs4": decoder("bposd", osd_method="osd_cs", osd_order=4)})

``compile_decoder_for_dem`` builds the decoder once per task; ``decode_shots_bit_packed``
hands the whole batch to the decoder's own batch path (native for a native decoder: no
per-shot Python loop). sinter is imported only here (``pip install backline-core[sinter]``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import sinter
import stim

from . import _plugins as plugins
from ._decoder_function import DecoderFunction
from ._errors import PluginError

__all__ = ["PREFIX", "BacklineCompiledDecoder", "BacklineDecoder", "decoder", "sinter_decoders"]

#: sinter names Backline's decoders ``backline:NAME``
PREFIX = "backline:"


class BacklineCompiledDecoder(sinter.CompiledDecoder):
    """One decoder built for one DEM: sinter's batches go to its batch path."""

    def __init__(self, function: DecoderFunction) -> None:
        self.function = function

    def decode_shots_bit_packed(self, *, bit_packed_detection_event_data: np.ndarray) -> np.ndarray:
        return self.function.decode_batch_packed(bit_packed_detection_event_data)


class BacklineDecoder(sinter.Decoder):
    """The installed decoder ``name`` with ``params`` (checked against its schema when made).

    A plain value: sinter pickles it to its workers, which find the decoder by name there."""

    def __init__(self, name: str, **params: Any) -> None:
        record = plugins.get("decoder", name)  # UnknownPluginError lists the installed decoders
        if record.from_dem is None:
            raise PluginError(f"decoder {name!r} does not build from a detector error model, so sinter "
                                      f"cannot use it; those that do: {', '.join(_dem_decoders()) or 'none'}")
        self.name = name
        self.params = record.check_params(params)

    def compile_decoder_for_dem(self, *, dem: stim.DetectorErrorModel) -> BacklineCompiledDecoder:
        record = plugins.get("decoder", self.name)
        return BacklineCompiledDecoder(record.build_from_dem(dem, **self.params))

    def decode_via_files(self, **kwargs: Any) -> None:
        # sinter calls this only for a decoder without compile_decoder_for_dem; every one has it
        raise NotImplementedError(f"backline:{self.name} decodes in process (compile_decoder_for_dem)")

    def __repr__(self) -> str:
        args = "".join(f", {k}={v!r}" for k, v in sorted(self.params.items()))
        return f"backline_core.sinter.decoder({self.name!r}{args})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BacklineDecoder) and (self.name, self.params) == (other.name, other.params)

    def __hash__(self) -> int:
        return hash((self.name, repr(sorted(self.params.items()))))


def _dem_decoders() -> list[str]:
    return [n for n in plugins.names("decoder") if plugins.get("decoder", n).from_dem is not None]


def decoder(name: str, **params: Any) -> BacklineDecoder:
    """The installed decoder ``name`` (with or without ``backline:``) as a ``sinter.Decoder``."""
    return BacklineDecoder(name.removeprefix(PREFIX), **params)


def sinter_decoders(names: Iterable[str] | None = None) -> dict[str, sinter.Decoder]:
    """``{"backline:NAME": decoder}`` for every installed decoder that builds from a DEM, with its
    default parameters (``--custom_decoders_module_function backline_core.sinter:sinter_decoders``);
    with ``names`` (``backline:NAME``), those only: the others' plugins are not loaded, and an
    unknown name raises :class:`~backline_core.UnknownPluginError` listing the installed ones."""
    wanted = _dem_decoders() if names is None else [n.removeprefix(PREFIX) for n in names]
    return {PREFIX + name: BacklineDecoder(name) for name in wanted}
