"""Entry point: the decoders ``bposd`` (BP + ordered statistics) and ``bp`` (BP alone).

Both build from a CSS code -- ``plugins.get("decoder", "bposd").build(hx=Hx, hz=Hz, ...)``, or
in a placement ``Coprocessor(coprocessor_fn=css_bp_decoder(Hx, Hz))`` -- and from a detector
error model or matrices (``build_from_dem``, ``build_from_matrices``; backline_decoder_bpod.dem).
"""

from __future__ import annotations

from typing import Any

from backline_core import Command, CoprocessorFunction, Decoder, hookimpl
from backline_core.sdk import REPLIES, object_schema


def _checked(name: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The settings given, checked against the decoder's schema (text from a command line read by type)."""
    from backline_core.sdk import check_params

    plain = {k: v.tolist() if hasattr(v, "tolist") else v for k, v in settings.items()}  # numpy values as JSON's
    checked = check_params(name, _schema(name == "bp"), plain)
    return {key: checked[key] if isinstance(value, str) else value for key, value in settings.items()}


def build_bposd(hx: Any, hz: Any, **settings: Any) -> CoprocessorFunction:
    """BP followed by OSD (default OSD-0) when BP does not converge."""
    from .decoder import css_bp_decoder

    return css_bp_decoder(hx, hz, **_checked("bposd", settings))


def build_bp(hx: Any, hz: Any, **settings: Any) -> CoprocessorFunction:
    """BP alone: the hard decision of the last iteration, converged or not."""
    from .decoder import css_bp_decoder

    if settings.pop("osd_method", "none") != "none" or "osd_order" in settings:
        raise ValueError("the 'bp' decoder has no post-processing; use 'bposd' for OSD")
    settings = {**_checked("bp", settings), "osd_method": "none"}
    return css_bp_decoder(hx, hz, name="bp", **settings)


def _schema(bp_only: bool) -> dict[str, Any]:
    from .params import schema_properties

    props = schema_properties()
    if bp_only:  # BP alone: no post-processing to choose
        props = {k: v for k, v in props.items() if k not in ("osd_method", "osd_order")}
    return object_schema(props)


def bposd_from_dem(dem: Any, **kwargs: Any) -> Any:
    from .dem import from_dem

    return from_dem(dem, **kwargs)


def bposd_from_matrices(m: Any, **kwargs: Any) -> Any:
    from .dem import from_matrices

    return from_matrices(m, **kwargs)


def bp_from_dem(dem: Any, **kwargs: Any) -> Any:
    from .dem import from_dem

    return from_dem(dem, name="bp", osd_method="none", **kwargs)


def bp_from_matrices(m: Any, **kwargs: Any) -> Any:
    from .dem import from_matrices

    return from_matrices(m, name="bp", osd_method="none", **kwargs)


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
        Decoder(name="bposd", summary="BP + ordered-statistics decoding (native C; Triton from Hx, Hz)",
                build=build_bposd, hardware=("cpu", "gpu"), bench_payloads=bench_payloads, schema=_schema(False),
                from_dem=bposd_from_dem, from_matrices=bposd_from_matrices, replies=REPLIES),
        Decoder(name="bp", summary="belief propagation (native C; Triton from Hx, Hz)", build=build_bp,
                hardware=("cpu", "gpu"), bench_payloads=bench_payloads, schema=_schema(True), from_dem=bp_from_dem,
                from_matrices=bp_from_matrices, replies=REPLIES),
    ]


def _bench_decoder() -> Any:
    from .bench import main

    return main


@hookimpl
def backline_commands() -> list[Command]:
    return [Command(name="bench-decoder", load=_bench_decoder,
                    summary="decode time per shot through sinter's API against ldpc (and PyMatching, lut)")]
