"""Builds the cuqr backend as a plain shared library against backline.h and backline/sdk/cuqr.h."""

from setuptools import setup

from backline_core.sdk.build import BuildPlainLibraries, plain_library

setup(
    ext_modules=[
        plain_library(
            "backline_transport_cuqr.libbackline_transport_cuqr",
            sources=["backline_transport_cuqr/native/cuqr.c"],
        )
    ],
    cmdclass={"build_ext": BuildPlainLibraries},
)
