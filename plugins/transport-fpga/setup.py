"""Builds the FPGA controller's backend + driver and the engine model as plain shared libraries.

Both compile in backline-transport-rdma's verbs set-up (its native/verbs.c, found through the
installed package): the backend for the handshake's peer record, the model for the ERNIC's
queue pairs, so neither restates it.
"""

import os

import backline_transport_rdma
from setuptools import setup

from backline_core.sdk.build import BuildPlainLibraries, plain_library

RDMA_NATIVE = os.path.join(os.path.dirname(os.path.abspath(backline_transport_rdma.__file__)), "native")

setup(
    ext_modules=[
        plain_library(
            "backline_transport_fpga.libbackline_transport_fpga",
            sources=["backline_transport_fpga/native/backend.c", "backline_transport_fpga/native/driver.c",
                     "backline_transport_fpga/native/window.c", "backline_transport_fpga/native/rdma_verbs.c"],
            include_dirs=[RDMA_NATIVE],
            libraries=["ibverbs"],
            oob=True,
        ),
        plain_library(
            "backline_transport_fpga.libbackline_hwhs_model",
            sources=["backline_transport_fpga/native/model.c", "backline_transport_fpga/native/rdma_verbs.c"],
            include_dirs=[RDMA_NATIVE],
            libraries=["ibverbs"],
            oob=True,
        ),
    ],
    cmdclass={"build_ext": BuildPlainLibraries},
)
