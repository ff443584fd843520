"""``bposd`` and ``bp`` built from a detector error model or matrices: the native decoder of H,
replying ``R e`` (the core's reply layout, applied in C by ``backline/sdk/dem_reply.h``).

The context of the coprocessor function is the BPOD blob of H (priors = the DEM's) followed by
the reply map; ``bpod_dem_init`` builds it wherever the function runs (a thread, a process, an
executor). Batches go through ``bpod_dem_batch``: one native call for every shot.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from backline_core import DecoderFunction, InvalidArgumentError
from backline_core.sdk import DemMatrices, dem_matrices, encode_reply_map, reply_matrix

from .native import LIBRARY, ffi, last_error, lib
from .params import BpOsdParams, check_osd_order, encode


class _Batch:
    """The native decoder in this process, for ``DecoderFunction.batch``."""

    def __init__(self, context: bytes, payload_bytes: int, reply_bytes: int) -> None:
        out = ffi.new("void **")
        if lib.bpod_dem_init(context, len(context), out) != 0:
            raise InvalidArgumentError(f"bposd: cannot build the decoder: {last_error()}")
        self._ctx = ffi.gc(out[0], lib.bpod_dem_fini)
        self.payload_bytes, self.reply_bytes = payload_bytes, reply_bytes

    def __call__(self, packed: np.ndarray) -> np.ndarray:
        out = np.zeros((len(packed), self.reply_bytes), dtype=np.uint8)
        if len(packed):
            rc = lib.bpod_dem_batch(self._ctx, ffi.from_buffer("uint8_t[]", packed), len(packed),
                                    ffi.from_buffer("uint8_t[]", out))
            if rc < 0:
                raise InvalidArgumentError(f"bposd: a shot could not be decoded: {last_error()}")
        return out


def from_matrices(m: DemMatrices, *, reply: str = "observables", commit: Any = None, name: str = "bposd",
                  bp_method: str = "min_sum", max_iter: int = 10, ms_scaling_factor: float = 0.625,
                  osd_method: str = "osd0", osd_order: int = 0, platform: str = "cpu", error_rate: Any = None,
                  channel_probs: Any = None) -> DecoderFunction:
    """The native decoder of ``m.h`` with the priors of ``m``; ``error_rate``/``channel_probs`` are for
    Hx/Hz builds only (a DEM carries its priors)."""
    if platform != "cpu":
        raise InvalidArgumentError(f"{name}: platform={platform!r} builds from Hx and Hz only; a DEM or matrices "
                                   "build the native decoder (platform='cpu')")
    if error_rate is not None or channel_probs is not None:
        raise InvalidArgumentError(f"{name}: error_rate and channel_probs are for Hx/Hz builds; a detector error "
                                   "model or matrices give each column its prior")
    try:  # the core's error type for bad input, as the rest of this path raises
        params = BpOsdParams(bp_method=bp_method, max_iter=max_iter, ms_scaling_factor=ms_scaling_factor,
                             osd_method=osd_method, osd_order=osd_order, error_rate=None,
                             channel_probs=tuple(float(p) for p in m.priors))
        check_osd_order(m.h, params, name)
    except InvalidArgumentError:
        raise
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from None
    r = reply_matrix(m, reply, commit)
    context = encode([m.h], params) + encode_reply_map(r)
    batch = _Batch(context, (m.num_detectors + 7) // 8, (r.shape[0] + 7) // 8)
    return DecoderFunction(name=name, library=LIBRARY, symbol="bpod_dem_fn", init_symbol="bpod_dem_init",
                           fini_symbol="bpod_dem_fini", context=context, num_detectors=m.num_detectors,
                           num_observables=m.num_observables, reply=reply, batch=batch)


def from_dem(dem: Any, **kwargs: Any) -> DecoderFunction:
    """The native decoder of the core's matrices of ``dem``."""
    return from_matrices(dem_matrices(dem), **kwargs)
