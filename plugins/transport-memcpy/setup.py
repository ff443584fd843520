"""Builds the memcpy backend as a plain shared library against backline.h."""

from setuptools import setup

from backline_core.sdk.build import BuildPlainLibraries, plain_library

setup(
    ext_modules=[
        plain_library(
            "backline_transport_memcpy.libbackline_transport_memcpy",
            sources=["backline_transport_memcpy/native/memcpy.c"],
        )
    ],
    cmdclass={"build_ext": BuildPlainLibraries},
)
