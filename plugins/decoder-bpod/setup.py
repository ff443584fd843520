"""Builds the BP+OSD decoder as a plain shared library against backline.h."""

import platform

from setuptools import setup

from backline_core.sdk.build import BuildPlainLibraries, plain_library

setup(
    ext_modules=[
        plain_library(
            "backline_decoder_bpod.libbackline_bpod",
            sources=["backline_decoder_bpod/native/bpod.c"],
            # OSD's GF(2) elimination counts bits; every x86-64 CPU since 2008 has popcnt
            # no fused multiply-add: float64 results must reproduce ldpc's bit for bit
            extra_compile_args=["-O3", "-ffp-contract=off"]
            + (["-mpopcnt"] if platform.machine() in ("x86_64", "AMD64") else []),
        )
    ],
    cmdclass={"build_ext": BuildPlainLibraries},
)
