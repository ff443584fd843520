/*
 * bpod.h -- BP+OSD decoding of one parity-check matrix H (m checks, n bits).
 *
 * A decoder is built once from a parameter blob (see params.py for the layout) and then
 * decodes bit-packed little-endian syndromes (ceil(m/8) bytes) into bit-packed
 * corrections (ceil(n/8) bytes) without allocating. bpod_css_* wrap two decoders (Hx for
 * decoder_id 0, Hz for decoder_id 1) as a Backline coprocessor function.
 */
#ifndef BPOD_H
#define BPOD_H

#include <stdint.h>

#include <backline/backline.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Decimal, so that cffi reads them (native.py declares this header to cffi). */
#define BPOD_MAGIC 1146048578u /* 0x444F5042: the bytes "BPOD" as a little-endian u32 */
#define BPOD_VERSION 1u

typedef struct bpod_decoder bpod_decoder;

/* Status of one decode, also the return value of bpod_decode. */
enum {
    BPOD_BP_CONVERGED = 0,   /* BP's hard decision satisfies the syndrome */
    BPOD_OSD = 1,            /* BP did not converge; the OSD solution is returned */
    BPOD_BP_FAILED = 2,      /* BP did not converge and OSD is off: BP's hard decision is returned */
    BPOD_EINVAL = -1,        /* bad syndrome (bits set beyond m) */
};

/* Build from `len` bytes at `blob` holding exactly one decoder section. NULL on error;
 * bpod_last_error() says why. */
BL_API bpod_decoder *bpod_create(const uint8_t *blob, uint64_t len);
BL_API void bpod_free(bpod_decoder *d);
BL_API const char *bpod_last_error(void);
BL_API uint32_t bpod_checks(const bpod_decoder *d);
BL_API uint32_t bpod_bits(const bpod_decoder *d);

BL_API int32_t bpod_decode(bpod_decoder *d, const uint8_t *syndrome, uint8_t *correction);
/* The same on unpacked vectors: m bytes of 0/1 in, n bytes of 0/1 out. */
BL_API int32_t bpod_decode_bits(bpod_decoder *d, const uint8_t *syndrome, uint8_t *correction);
/* `shots` syndromes back to back (rows of ceil(m/8) bytes) -> corrections (rows of ceil(n/8)). */
BL_API int32_t bpod_decode_batch(bpod_decoder *d, const uint8_t *syndromes, uint64_t shots, uint8_t *corrections);
/* bpod_decode_batch timing each decode from native code (CLOCK_MONOTONIC, ns per decode). */
BL_API int32_t bpod_time_decodes(bpod_decoder *d, const uint8_t *syndromes, uint64_t shots, uint8_t *corrections,
                                 uint64_t *ns);
/* After a decode: iterations BP ran, and the posterior log-likelihood ratios (n doubles). */
BL_API uint32_t bpod_last_iterations(const bpod_decoder *d);
BL_API const double *bpod_last_llr(const bpod_decoder *d);

/* The coprocessor function: params hold two sections (Hx, then Hz). */
BL_API int32_t bpod_css_init(const uint8_t *params, uint64_t len, void **ctx);
BL_API void bpod_css_fini(void *ctx);
BL_API int32_t bpod_css_fn(void *ctx, uint32_t decoder_id, const uint8_t *in, uint32_t in_len, uint8_t *out,
                           uint32_t out_cap, uint32_t *out_len);

/* A decoder of detection events (built from a DEM or matrices, docs/decoders.md): params hold one
 * section (H) and then the reply map of backline/sdk/dem_reply.h; a round's payload is the packed
 * detection events, its reply R e for the decoded estimate e. */
BL_API int32_t bpod_dem_init(const uint8_t *params, uint64_t len, void **ctx);
BL_API void bpod_dem_fini(void *ctx);
BL_API int32_t bpod_dem_fn(void *ctx, uint32_t decoder_id, const uint8_t *in, uint32_t in_len, uint8_t *out,
                           uint32_t out_cap, uint32_t *out_len);
/* `shots` payloads back to back (rows of ceil(m/8) bytes) -> replies (rows of ceil(bits/8)); the
 * number of decodes that fell back to OSD or did not converge, or a negative status. */
BL_API int64_t bpod_dem_batch(void *ctx, const uint8_t *in, uint64_t shots, uint8_t *out);

#ifdef __cplusplus
}
#endif
#endif
