"""Builds the rdma backend and the bare verbs floor as plain shared libraries against backline.h and libibverbs."""

from setuptools import setup

from backline_core.sdk.build import BuildPlainLibraries, plain_library

setup(
    ext_modules=[
        plain_library(
            "backline_transport_rdma.libbackline_transport_rdma",
            sources=["backline_transport_rdma/native/rdma.c", "backline_transport_rdma/native/verbs.c",
                     "backline_transport_rdma/native/floor.c"],
            libraries=["ibverbs"],
            oob=True,
        )
    ],
    cmdclass={"build_ext": BuildPlainLibraries},
)
