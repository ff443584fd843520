"""Builds the streaming engine and the controller's loop as a plain shared library against backline.h."""

from setuptools import setup

from backline_core.sdk.build import BuildPlainLibraries, plain_library

setup(
    ext_modules=[plain_library("backline_qec.libbackline_qec", sources=["backline_qec/native/stream.c"],
                               libraries=["dl"], extra_compile_args=["-O2"])],
    cmdclass={"build_ext": BuildPlainLibraries},
)
