"""ldpc's ``BpOsdDecoder`` and ``BpLsdDecoder`` as Backline decoders ``ldpc-bposd`` and ``ldpc-bplsd``.

They decode the columns of the core's one DEM conversion, as every matrix decoder does, so
they are the reference the native ``bposd`` is compared with (docs/decoders.md).
"""
