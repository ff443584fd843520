"""Backline's ``pymatching`` decoder: PyMatching 2 built from a decomposed detector error model.

>>> import stim
>>> from backline_core import plugins
>>> c = stim.Circuit.generated("repetition_code:memory", distance=5, rounds=5, after_clifford_depolarization=0.01)
>>> fn = plugins.get("decoder", "pymatching").build_from_dem(c.detector_error_model(decompose_errors=True))
>>> fn.decode_batch(c.compile_detector_sampler(seed=1).sample(3)).shape
(3, 1)
"""
