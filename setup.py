"""Builds the native runtime (a plain shared library) and its cffi binding.

Metadata lives in pyproject.toml; setup.py exists because cffi modules and plain
shared libraries need a build step that pyproject cannot declare.
"""

import importlib.util
import os

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def load(path: str):
    """Import a build-time module by path: backline_core's dependencies are not installed yet."""
    name = os.path.basename(path)
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, "backline_core", path + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = load("sdk/build")
runtime = build.plain_library(
    "backline_core.lib.libbackline",
    sources=[f"backline_core/native/src/{name}.c" for name in (
        "runtime", "functions", "bench", "device", "stream_frame",
        # the executor client (backline/executor.h), by concern: see executor_internal.h
        "executor_frames", "executor_net", "executor_auth", "executor_conn", "executor_signature",
        "executor_objects", "executor_calls",
        # the trust kit (backline/sdk/oob.h) the executor client authenticates with; hidden visibility
        "oob")],
    include_dirs=["backline_core/native/include"],
    libraries=["dl", "pthread"],
)

null_device = build.plain_library(
    "backline_core.lib.libbackline_device_null",
    sources=["backline_core/native/src/device_null.c"],
    include_dirs=["backline_core/native/include"],
)


class BuildNative(build.BuildPlainLibraries):
    def build_extension(self, ext: Extension) -> None:
        if ext.name == "backline_core._native":
            # Link the binding against the runtime built just before it.
            ext.library_dirs = [os.path.dirname(self.get_ext_fullpath(runtime.name))]
        super().build_extension(ext)


def native_binding() -> Extension:
    return load("_cffi_build").ffibuilder.distutils_extension(tmpdir="build")


setup(ext_modules=[runtime, null_device, native_binding()], cmdclass={"build_ext": BuildNative})
