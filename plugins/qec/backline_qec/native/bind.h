/*
 * backline_qec/native/bind.h -- binding inner coprocessor functions from their description, shared by
 * the streaming engine (stream.c) and the CUDA-Q session (cuqr_session.c). Internal to the library.
 *
 * A description is, each field a u32 little-endian length and its bytes:
 *   library | symbol | init_symbol (empty: none) | fini_symbol (empty: none) | context
 * and a list of them is a u32 count followed by the descriptions (engine.py / bind.py write it).
 */
#ifndef BACKLINE_QEC_BIND_H
#define BACKLINE_QEC_BIND_H

#include <stddef.h>
#include <stdint.h>

typedef int32_t (*qb_fn)(void *ctx, uint32_t decoder_id, const uint8_t *in, uint32_t in_len, uint8_t *out,
                         uint32_t out_cap, uint32_t *out_len);

typedef struct qb_bound {
    qb_fn fn;
    void *ctx;
    void *lib;               /* dlopened here (NULL when the pair was given from Python) */
    void (*fini)(void *ctx); /* called on ctx when unbound */
} qb_bound;

/* A little-endian u32 at *p, advancing it; -1 when fewer than 4 bytes are left. */
int qb_take_u32(const uint8_t **p, const uint8_t *end, uint32_t *v);
/* Bind the description at *p (advancing it) into *out; -1 with a one-line reason in err. */
int qb_bind(const uint8_t **p, const uint8_t *end, qb_bound *out, char *err, size_t err_len);
/* Bind a list (u32 count, then descriptions) into a fresh array of *n; NULL with err on failure
 * (nothing stays bound). At most max_n functions. */
qb_bound *qb_bind_list(const uint8_t **p, const uint8_t *end, uint32_t max_n, uint32_t *n, char *err,
                       size_t err_len);
/* Finalise and close what qb_bind opened (a pair given from Python is left to its owner). */
void qb_unbind(qb_bound *b);
void qb_unbind_list(qb_bound *list, uint32_t n);

/* The most inner functions an owner (below) may bind. */
#define QB_MAX_LIST 255u

/* Builds the owner of n bound functions, fns[i] with ctxs[i], and of a blob (a plan, a spec; NULL and
 * 0 when its context has none); the owner keeps `bound` to unbind when it is freed. NULL on error,
 * which the builder reports. */
typedef void *(*qb_build_fn)(const uint8_t *blob, size_t blob_len, const qb_fn *fns, void *const *ctxs,
                             uint32_t n, qb_bound *bound);

/* A native function whose init binds its inner functions and builds their owner around them (the
 * streaming engine, the window multiplexer, the CUDA-Q session). */
typedef struct qb_owner_kind {
    int has_blob;          /* its context starts with u32 blob bytes | blob (padded to 4 bytes) */
    uint32_t max_n;        /* at most this many inner functions (at most QB_MAX_LIST) */
    qb_build_fn build;
    const char *truncated; /* the error when the context is missing or truncated */
    const char *list;      /* what the inner functions are, before why they did not bind */
    void (*set_err)(const char *fmt, ...); /* the owner's library's last error */
} qb_owner_kind;

/* The kind's bl_fn_init: its context is [the blob] then a list of inner functions (qb_bind_list),
 * and its owner goes to *ctx. 0, or BL_EINVAL with nothing bound and the error set. */
int32_t qb_owner_init(const qb_owner_kind *kind, const void *params, size_t len, void **ctx);

/* The core's round API, taken from libbackline already loaded in this process (by its path, as
 * backline_core.get_library() gives it), for a native controller loop. */
typedef struct qb_core {
    void *handle;
    void *(*session_get)(int32_t role, const char *key);
    int32_t (*round)(void *s, const void *in, uint32_t in_len, uint32_t decoder_id, void *out, uint32_t out_cap,
                     uint32_t *out_len);
    const char *(*last_error)(void);
} qb_core;

/* 0, or -1 with err; qb_core_close releases the handle. */
int qb_core_open(qb_core *core, const char *libbackline, char *err, size_t err_len);
void qb_core_close(qb_core *core);

#endif
