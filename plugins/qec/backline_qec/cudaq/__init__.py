"""Interoperability with NVIDIA CUDA-Q QEC's real-time decoding (docs/cudaq-interop.md).

``config``: its ``multi_decoder_config`` YAML, read into Backline decoders and written from a circuit;
``wire``: its RPC format (CUQR/CUQS headers, function ids, payloads); ``session``: its decoding
session's semantics; ``server``: ``backline decoding-server``, its decoders on Backline placements;
``replay``: its playback text format.
"""
