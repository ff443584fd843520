"""Builds the ucx backend as a plain shared library against backline.h and libucp.

Without libucp's headers (Debian: libucx-dev) the package still installs, without its
backend: resolving a placement on `ucx` then says what to install (plugin.py)."""

import os
import sys

from setuptools import setup

from backline_core.sdk.build import BuildPlainLibraries, plain_library

UCP_HEADER = os.path.join("ucp", "api", "ucp.h")


def have_ucp(include_dirs: list[str]) -> bool:
    """Whether libucp's header is in one of ``include_dirs``."""
    return any(os.path.isfile(os.path.join(d, UCP_HEADER)) for d in include_dirs if d)


search = [*os.environ.get("CPATH", "").split(os.pathsep), "/usr/local/include", "/usr/include"]
ext_modules = []
if have_ucp(search):
    ext_modules.append(plain_library("backline_transport_ucx.libbackline_transport_ucx",
                                     sources=["backline_transport_ucx/native/ucx.c",
                                              "backline_transport_ucx/native/worker.c",
                                              "backline_transport_ucx/native/floor.c"],
                                     libraries=["ucp", "uct", "ucs"], oob=True))
else:
    print("backline-transport-ucx: libucp's headers are missing (apt-get install libucx-dev); installing without "
          "the backend", file=sys.stderr)

setup(ext_modules=ext_modules, cmdclass={"build_ext": BuildPlainLibraries})
