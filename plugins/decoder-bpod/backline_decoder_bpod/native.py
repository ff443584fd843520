"""cffi (ABI mode) access to libbackline_bpod.so, the native decoder."""

from __future__ import annotations

import os

from cffi import FFI

LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libbackline_bpod.so")

ffi = FFI()
ffi.cdef(
    """
    typedef struct bpod_decoder bpod_decoder;
    bpod_decoder *bpod_create(const uint8_t *blob, uint64_t len);
    void bpod_free(bpod_decoder *d);
    const char *bpod_last_error(void);
    uint32_t bpod_checks(const bpod_decoder *d);
    uint32_t bpod_bits(const bpod_decoder *d);
    int32_t bpod_decode(bpod_decoder *d, const uint8_t *syndrome, uint8_t *correction);
    int32_t bpod_decode_bits(bpod_decoder *d, const uint8_t *syndrome, uint8_t *correction);
    int32_t bpod_decode_batch(bpod_decoder *d, const uint8_t *syndromes, uint64_t shots, uint8_t *corrections);
    int32_t bpod_time_decodes(bpod_decoder *d, const uint8_t *syndromes, uint64_t shots, uint8_t *corrections,
                              uint64_t *ns);
    uint32_t bpod_last_iterations(const bpod_decoder *d);
    const double *bpod_last_llr(const bpod_decoder *d);
    """
)

try:
    lib = ffi.dlopen(LIBRARY)
except OSError as exc:  # pragma: no cover - only on a broken install
    raise ImportError(
        f"the native BP+OSD decoder is not built ({exc}); reinstall backline-decoder-bpod "
        "(pip install --no-build-isolation, with backline-core installed first)"
    ) from exc


def last_error() -> str:
    return ffi.string(lib.bpod_last_error()).decode(errors="replace")
