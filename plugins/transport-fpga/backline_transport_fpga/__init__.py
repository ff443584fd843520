"""Backline's FPGA controller for the rdma transport: the HWHS/ERNIC driver and the engine model."""

import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def get_library() -> str:
    """Path of the controller backend + driver (exports ``backline_transport_backend_v1``)."""
    return os.path.join(_HERE, "libbackline_transport_fpga.so")


def get_model_library() -> str:
    """Path of the engine model (exports ``hwhs_model_run``)."""
    return os.path.join(_HERE, "libbackline_hwhs_model.so")


def native_dir() -> str:
    """The folder of the C sources and headers (hwhs.h: the register map)."""
    return os.path.join(_HERE, "native")
