"""Builds the streaming engine, the CUDA-Q session and the controllers' loops as a plain shared library against backline.h."""

from setuptools import setup

from backline_core.sdk.build import BuildPlainLibraries, plain_library

NATIVE = "backline_qec/native/"

setup(
    ext_modules=[plain_library("backline_qec.libbackline_qec",
                               sources=[NATIVE + name for name in ("bind.c", "stream.c", "cuqr_session.c")],
                               libraries=["dl"], extra_compile_args=["-O2"])],
    cmdclass={"build_ext": BuildPlainLibraries},
)
