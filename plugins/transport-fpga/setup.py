"""Builds the FPGA controller's backend + driver and the engine model as plain shared libraries.

Both build against backline-transport-rdma's verbs set-up, its declared API (verbs.h,
BL_VERBS_API_VERSION, checked in native/rdma_verbs.h): the sources and header folder that
``backline_transport_rdma.verbs_sources()`` and ``verbs_include()`` name are compiled in --
the backend for the handshake's peer record, the model for the ERNIC's queue pairs -- so
neither restates it.
"""

import backline_transport_rdma
from setuptools import setup

from backline_core.sdk.build import BuildPlainLibraries, plain_library

VERBS = {"include_dirs": [backline_transport_rdma.verbs_include()],
         "external_sources": backline_transport_rdma.verbs_sources()}

setup(
    ext_modules=[
        plain_library(
            "backline_transport_fpga.libbackline_transport_fpga",
            sources=["backline_transport_fpga/native/backend.c", "backline_transport_fpga/native/driver.c",
                     "backline_transport_fpga/native/window.c"],
            libraries=["ibverbs"],
            oob=True,
            **VERBS,
        ),
        plain_library(
            "backline_transport_fpga.libbackline_hwhs_model",
            sources=["backline_transport_fpga/native/model.c"],
            libraries=["ibverbs"],
            oob=True,
            **VERBS,
        ),
    ],
    cmdclass={"build_ext": BuildPlainLibraries},
)
