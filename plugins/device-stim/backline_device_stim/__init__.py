"""Backline quantum-device runtime ``stim``: a stabilizer simulation (``stim.TableauSimulator``)
behind the device ABI of ``backline/device.h``, built in process from cffi callbacks.

The device lives in :mod:`backline_device_stim.device` (imported on first use, so listing
plugins does not import stim); open it with ``QuantumDevice.open("stim", n)``.
"""
