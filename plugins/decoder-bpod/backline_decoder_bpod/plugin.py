"""Entry point: the decoders ``bposd`` (BP + ordered statistics) and ``bp`` (BP alone).

Both are built from a CSS code: ``plugins.get("decoder", "bposd").build(hx=Hx, hz=Hz, ...)``
or, in a placement, ``Coprocessor(coprocessor_fn=css_bp_decoder(Hx, Hz))``.
"""

from __future__ import annotations

from typing import Any

from backline_core import CoprocessorFunction, Decoder, hookimpl


def _numeric(settings: dict[str, Any]) -> dict[str, Any]:
    # Values from the command line (--decoder-param k=v) arrive as text.
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, str) and key in ("max_iter", "osd_order"):
            value = int(value)
        elif isinstance(value, str) and key in ("ms_scaling_factor", "error_rate"):
            value = float(value)
        out[key] = value
    return out


def build_bposd(hx: Any, hz: Any, **settings: Any) -> CoprocessorFunction:
    """BP followed by OSD (default OSD-0) when BP does not converge."""
    from .decoder import css_bp_decoder

    return css_bp_decoder(hx, hz, **_numeric(settings))


def build_bp(hx: Any, hz: Any, **settings: Any) -> CoprocessorFunction:
    """BP alone: the hard decision of the last iteration, converged or not."""
    from .decoder import css_bp_decoder

    settings = _numeric(settings)
    if settings.setdefault("osd_method", "none") != "none":
        raise ValueError("the 'bp' decoder has no post-processing; use 'bposd' for OSD")
    return css_bp_decoder(hx, hz, name="bp", **settings)


@hookimpl
def backline_decoders() -> list[Decoder]:
    return [
        Decoder(name="bposd", summary="BP + ordered-statistics decoding from Hx, Hz", build=build_bposd,
                hardware=("cpu", "gpu")),
        Decoder(name="bp", summary="belief propagation from Hx, Hz", build=build_bp, hardware=("cpu", "gpu")),
    ]
