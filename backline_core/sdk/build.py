"""Build helpers for native code that uses the Backline C ABI (setuptools only).

A transport plugin ships its backend as a plain shared library inside its package.
In its ``setup.py``::

    from setuptools import setup
    from backline_core.sdk.build import BuildPlainLibraries, plain_library

    setup(
        ext_modules=[plain_library("my_pkg.libmy_backend", sources=["my_pkg/native/backend.c"])],
        cmdclass={"build_ext": BuildPlainLibraries},
    )

The library gets a plain name (``my_pkg/libmy_backend.so``, no Python ABI tag),
is compiled against ``backline.h`` and can be dlopened by any program. This module
imports nothing but the standard library and setuptools, so the core's own build can
load it by path.
"""

from __future__ import annotations

import os

from setuptools import Extension
from setuptools.command.build_ext import build_ext

_CORE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # backline_core/
_INCLUDE = os.path.join(_CORE, "native", "include")
_PLAIN: set[str] = set()  # names of the extensions built as plain libraries
_CFLAGS = ["-O2", "-std=gnu11", "-fvisibility=hidden", "-Wall", "-Wextra", "-Wno-unused-parameter"]


_SRC = os.path.join(_CORE, "native", "src")
#: what ``oob=True`` compiles in: backline/sdk/oob.h's TCP and handshake helpers (their message
#: header is backline/sdk/stream_frame.h's), and backline/sdk/remote.h's control plane of a
#: coprocessor in another process, which uses them
_OOB_SOURCES = [os.path.join(_SRC, name) for name in ("oob.c", "stream_frame.c", "remote.c")]


def plain_library(name: str, sources: list[str], *, include_dirs: list[str] | None = None,
                  libraries: list[str] | None = None, extra_compile_args: list[str] | None = None,
                  oob: bool = False, external_sources: list[str] | None = None) -> Extension:
    """A setuptools Extension built as a plain C shared library named ``name``.

    ``backline.h`` is on the include path; the last dotted part of ``name`` becomes the
    file name (``pkg.libfoo`` -> ``pkg/libfoo.so``). ``oob``: compile in the core's
    out-of-band TCP and handshake helpers (``backline/sdk/oob.h``) and the control plane of a
    coprocessor in another process built on them (``backline/sdk/remote.h``), private to this
    library. ``external_sources``: absolute paths of C sources another installed package
    provides for this build (e.g. ``backline_transport_rdma.verbs_sources()``), compiled in the
    same way.
    """
    ext = Extension(
        name,
        sources=sources,
        include_dirs=[*(include_dirs or []), _INCLUDE],
        libraries=[*(libraries or []), "pthread"],
        extra_compile_args=[*_CFLAGS, *(extra_compile_args or [])],
    )
    # added when it is built: setuptools refuses absolute paths in a setup script
    ext.backline_extra = [*(_OOB_SOURCES if oob else []), *(external_sources or [])]
    _PLAIN.add(name)
    return ext


class BuildPlainLibraries(build_ext):
    """build_ext that names plain libraries without the Python ABI suffix."""

    def get_ext_filename(self, fullname: str) -> str:
        # distutils asks with the full dotted name and with its last part alone.
        if fullname in _PLAIN or any(name.rsplit(".", 1)[-1] == fullname for name in _PLAIN):
            return os.path.join(*fullname.split(".")) + ".so"
        return super().get_ext_filename(fullname)

    def build_extension(self, ext: Extension) -> None:
        # in-place (editable) builds write into package folders that may not exist yet
        os.makedirs(os.path.dirname(self.get_ext_fullpath(ext.name)), exist_ok=True)
        extra = getattr(ext, "backline_extra", [])
        if not extra:
            super().build_extension(ext)
            return
        sources, ext.sources = ext.sources, [*ext.sources, *extra]
        try:
            super().build_extension(ext)
        finally:
            ext.sources = sources  # the sources setuptools lists (sdists, manifests) stay the plugin's own

    def get_export_symbols(self, ext: Extension) -> list[str]:
        if ext.name in _PLAIN:
            return []  # a plain library exports its own BL_API symbols, not PyInit_*
        return super().get_export_symbols(ext)
