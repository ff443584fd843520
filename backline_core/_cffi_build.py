"""cffi (API mode) binding of libbackline, generated from the shipped headers.

Loaded by path from setup.py, so it imports only the standard library and cffi.
"""

import os
import re

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join(HERE, "native", "include")
HEADERS = ["backline/backline.h", "backline/bench.h", "backline/device.h", "backline/executor.h", "backline/trust.h"]


def cdef_from_header(text: str) -> str:
    """The header's declarations as cffi's cdef accepts them (no preprocessor, no C++ guards)."""
    out, skipping = [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#ifdef __cplusplus"):
            skipping = True
            continue
        if skipping:
            skipping = not stripped.startswith("#endif")
            continue
        define = re.match(r"#define\s+(\w+)\s+(\d+)u?\s*(/\*.*)?$", stripped)
        if define:
            out.append(f"#define {define.group(1)} {define.group(2)}")
            continue
        if stripped.startswith("#"):
            continue
        out.append(line.replace("BL_API ", ""))
    return "\n".join(out)


ffibuilder = FFI()
for header in HEADERS:
    with open(os.path.join(INCLUDE, header)) as fh:
        ffibuilder.cdef(cdef_from_header(fh.read()))
ffibuilder.cdef(
    """
    extern "Python" int32_t bl_py_coprocessor_fn(void *, uint32_t, const uint8_t *, uint32_t,
                                                 uint8_t *, uint32_t, uint32_t *);
    void *dlopen(const char *filename, int flags);
    void *dlsym(void *handle, const char *symbol);
    char *dlerror(void);
    #define RTLD_NOW 2
    """
)
ffibuilder.set_source(
    "backline_core._native",
    "#include <dlfcn.h>\n" + "".join(f'#include "{h}"\n' for h in HEADERS),
    include_dirs=[INCLUDE],
    libraries=["backline", "dl"],
    extra_link_args=["-Wl,-rpath,$ORIGIN/lib"],
    extra_compile_args=["-O2"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)


def open_library(library: str, header: str, distribution: str) -> tuple[FFI, object]:
    """``(ffi, lib)`` of a plugin's plain shared library at ``library``, declared from its own C header
    (cffi's ABI mode), or ImportError saying to reinstall ``distribution`` when it is not built."""
    ffi = FFI()
    with open(header) as fh:
        ffi.cdef(cdef_from_header(fh.read()))
    try:
        return ffi, ffi.dlopen(library)
    except OSError as exc:  # only on a broken install
        raise ImportError(f"{os.path.basename(library)} is not built ({exc}); reinstall {distribution} "
                          "(pip install --no-build-isolation, with backline-core installed first)") from exc
