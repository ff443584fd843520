"""Lookup-table decoding from a parity-check matrix or a detector error model, with the rules of
CUDA-Q QEC's ``single_error_lut`` / ``multi_error_lut`` (docs/decoder-lut.md), in native C.

>>> from backline_decoder_lut import LutDecoder
>>> dec = LutDecoder([[1, 1, 0], [0, 1, 1]], depth=1)
>>> errors, converged = dec.decode([1, 1])
>>> errors.tolist(), converged
([0, 1, 0], True)
"""

from .decoder import LutDecoder, build, from_dem, from_matrices, lut_function

__all__ = ["LutDecoder", "build", "from_dem", "from_matrices", "lut_function"]
