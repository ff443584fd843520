"""Builds the lookup-table decoder as a plain shared library against backline.h."""

from setuptools import setup

from backline_core.sdk.build import BuildPlainLibraries, plain_library

setup(
    ext_modules=[
        plain_library(
            "backline_decoder_lut.libbackline_lut",
            sources=["backline_decoder_lut/native/lut.c"],
            extra_compile_args=["-O3"],
        )
    ],
    cmdclass={"build_ext": BuildPlainLibraries},
)
