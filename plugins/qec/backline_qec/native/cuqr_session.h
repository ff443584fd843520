/*
 * backline_qec/native/cuqr_session.h -- CUDA-Q QEC's decoding session ("CUQR", backline/sdk/cuqr.h)
 * as a coprocessor function, and the decoding server's native UDP loop (docs/cudaq-interop.md).
 *
 * The session's round is one whole request slot; its reply the whole response slot (slot_size
 * bytes). It holds one or more decoders, each with an inner coprocessor function replying the
 * packed observable flips of the packed detection events (DecoderConfig.build()), called with
 * decoder id 0. The semantics are their DecodingSession's (docs/cudaq-interop.md, "Sessions").
 *
 * The spec (little-endian u32 words; session.py writes it):
 *   CQ_MAGIC | CQ_VERSION | slot_size | decoders N
 *   per decoder: id_lo | id_hi (an i64) | measurements M | detectors | observables | has_d
 *                [has_d: d_ptr[detectors + 1] | d_idx[d_ptr[detectors]]]   D's rows: measurement indices
 */
#ifndef BACKLINE_QEC_CUQR_SESSION_H
#define BACKLINE_QEC_CUQR_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include <backline/backline.h>
#include <backline/sdk/cuqr.h>

#include "stream.h"

#define CQ_MAGIC 1381057346u /* "BCQR" as a little-endian u32 */
#define CQ_VERSION 1u

/* why a message gets no reply (cq_session_fn's nonzero return, cq_classify's result) */
#define CQ_DROP_TRUNCATED 1 /* shorter than the header */
#define CQ_DROP_OVERSIZED 2 /* longer than the slot */
#define CQ_DROP_MAGIC 3     /* not 'CUQR' */
#define CQ_DROP_FUNCTION 4  /* an unknown function_id */
#define CQ_ECAP 5           /* the reply buffer is smaller than the slot */
/* why a request with a readable header is answered BAD_REQUEST */
#define CQ_BAD_TRUNCATED 1
#define CQ_BAD_OVERSIZED 2
#define CQ_BAD_INVALID 3

/* a decoder's state */
#define CQ_COLLECTING 0
#define CQ_RESULT_READY 1
#define CQ_FAILED 2

typedef struct cq_request {
    uint32_t function_id, arg_len, request_id;
    uint64_t ptp_timestamp;
    uint32_t payload_len; /* payload bytes present: min(arg_len, message - header) */
    int32_t has_id;       /* the payload holds a decoder_id */
    int64_t decoder_id;
    int32_t bad;          /* CQ_BAD_* or 0 */
} cq_request;

typedef struct cq_counts {
    uint64_t dropped[5];   /* by CQ_DROP_* (0 unused) */
    uint64_t malformed[4]; /* by CQ_BAD_* (0 unused) */
    uint64_t socket_errors, round_errors;
} cq_counts;

typedef struct cq_decoder_info {
    int64_t id;
    int32_t state;
    uint32_t accepted;
    uint64_t enqueues, gets, resets, decodes, errors;
    char last_error[160];
} cq_decoder_info;

typedef struct cq_session cq_session;

/* Parse a message of `len` bytes (a slot of slot_size): 0 when it gets a reply, else CQ_DROP_*. */
BL_API int32_t cq_classify(const uint8_t *msg, size_t len, uint32_t slot_size, cq_request *req);
/* The session for `spec`, decoder i decoding with fns[i](ctxs[i], 0, ...); NULL on error. */
BL_API cq_session *cq_session_create(const uint8_t *spec, size_t spec_len, const qs_fn *fns, void *const *ctxs,
                                     uint32_t n);
BL_API void cq_session_free(cq_session *s);
/* bl_fn_init / bl_fn_fini: the context is u32 spec bytes | spec (padded to 4 bytes) | u32 N | per
 * decoder its inner function's library, symbol, init_symbol, fini_symbol, context (bind.h). */
BL_API int32_t cq_session_init(const void *params, size_t len, void **ctx);
BL_API void cq_session_fini(void *ctx);
/* The session as a bl_coprocessor_fn (ctx = the session): one request slot in, one response slot out. */
BL_API int32_t cq_session_fn(void *ctx, uint32_t decoder_id, const uint8_t *in, uint32_t in_len, uint8_t *out,
                             uint32_t out_cap, uint32_t *out_len);
BL_API int32_t cq_session_info(const cq_session *s, uint32_t index, cq_decoder_info *info);
BL_API void cq_session_counts(const cq_session *s, cq_counts *out);

/* The server's loop: UDP sockets fds[i] (non-blocking, bound), ring i's decoder ids[i] served by the
 * controller session registered under keys[i] in libbackline. Requests are routed by their decoder_id
 * (the ring they came in on when it names none of them); replies go to the request's source. */
typedef struct cq_server cq_server;
BL_API cq_server *cq_server_create(const char *libbackline, const char *const *keys, const int32_t *fds,
                                   const int64_t *ids, uint32_t rings, uint32_t slot_size);
/* Serve until timeout_ms passes (at most 1000); 0, or -1 with cq_last_error. */
BL_API int32_t cq_server_poll(cq_server *s, uint32_t timeout_ms);
BL_API void cq_server_counts(const cq_server *s, cq_counts *out);
BL_API uint64_t cq_server_dispatched(const cq_server *s, uint32_t ring);
/* The first socket or round error's text ("" when none). */
BL_API const char *cq_server_first_error(const cq_server *s);
BL_API void cq_server_free(cq_server *s);
/* The bench's floor: echo each datagram on UDP socket fd (non-blocking, bound) as a slot_size reply
 * to its source, with the server loop's system calls, until timeout_ms passes (at most 1000); 0 or -1. */
BL_API int32_t cq_echo_poll(int32_t fd, uint32_t slot_size, uint32_t timeout_ms);
BL_API const char *cq_last_error(void);

#endif
