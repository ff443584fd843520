"""BP+OSD decoders generated from a CSS code's Hx and Hz, for Backline coprocessors.

>>> from backline_decoder_bpod import css_bp_decoder, codes
>>> code = codes.named_code("hgp13")
>>> fn = css_bp_decoder(code.hx, code.hz, osd_method="osd_cs", osd_order=4)
>>> fn.name, fn.decoder_ids
('bposd', (0, 1))
"""

from . import codes
from .decoder import BpOsdDecoder, css_bp_decoder
from .params import BpOsdParams

__all__ = ["BpOsdDecoder", "BpOsdParams", "codes", "css_bp_decoder"]


def __getattr__(name: str):  # optional dependencies load only when their names are used
    if name == "triton_decoder":
        from .triton_bp import triton_decoder

        return triton_decoder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
