"""Imported by the fork server the embedded cluster's workers fork from (``cluster.prepare_local_workers``):
it imports what a worker needs and builds each decoder the sweep names once on a tiny DEM, so the
decoders' own imports (pymatching: about 0.8 s here) are done once, before any worker exists.

It must never fail: the fork server would not start. A decoder that cannot build here builds (or
fails, with the error the user sees) on the worker, as without this module."""

from __future__ import annotations

import os

from .cluster import WARM_ENV


def _warm() -> None:
    try:
        import distributed  # noqa: F401  the worker process's own imports
        import distributed.nanny  # noqa: F401
        import stim

        from . import batches
    except Exception:
        return
    names = [n for n in os.environ.get(WARM_ENV, "").split(",") if n]
    if not names:
        return
    try:
        dem = stim.Circuit.generated("repetition_code:memory", distance=3, rounds=2,
                                     after_clifford_depolarization=0.01).detector_error_model(decompose_errors=True)
    except Exception:
        return
    for name in names:
        try:
            batches._sinter_decoder(name).compile_decoder_for_dem(dem=dem)
        except Exception:
            pass


_warm()
