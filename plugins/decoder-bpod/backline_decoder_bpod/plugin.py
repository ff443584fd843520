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


def bench_payloads(function: CoprocessorFunction, spec: Any) -> Any:
    """``backline bench --code``'s requests: the packed syndromes (of Hx for decoder_id 0, of Hz
    for 1) of independent bit flips at ``spec.error_rate``; the replies come from the decoder
    called locally."""
    import numpy as np

    from backline_core.sdk import BenchPayloads

    h = np.asarray(spec.params["hx" if spec.decoder_id == 0 else "hz"], dtype=np.uint8)
    rng = np.random.default_rng(spec.seed)
    errors = (rng.random((spec.count, h.shape[1])) < spec.error_rate).astype(np.uint8)
    syndromes = (errors @ h.T) % 2  # uint8 wraps mod 256, an even modulus: the parity is kept
    return BenchPayloads([np.packbits(row, bitorder="little").tobytes() for row in syndromes.astype(np.uint8)])


@hookimpl
def backline_decoders() -> list[Decoder]:
    return [
        Decoder(name="bposd", summary="BP + ordered-statistics decoding from Hx, Hz", build=build_bposd,
                hardware=("cpu", "gpu"), bench_payloads=bench_payloads),
        Decoder(name="bp", summary="belief propagation from Hx, Hz", build=build_bp, hardware=("cpu", "gpu"),
                bench_payloads=bench_payloads),
    ]
