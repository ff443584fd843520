/*
 * backline_qec/native/stream.h -- streamed sliding-window decoding (docs/streaming.md).
 *
 * The controller feeds each round of a shot to the coprocessor once. A round's message is
 *
 *   u16 round (little-endian) | the round's detection events, bit-packed LSB first
 *
 * sent with decoder id 0 (one engine, one context: an executor builds a context per decoder id).
 * The coprocessor's engine keeps the shot's detection events; when a window's last round
 * arrives it decodes the window with the decoder of the window's shape (the plan says which: one
 * decoder per distinct window, e.g. first, bulk, last; any bl_coprocessor_fn replying R e, the
 * window's observables and then its handed-on detectors), accumulates the committed observable flips and applies the handed-on
 * detector flips to the later rounds. Every reply is the shot's committed observable flips so
 * far, bit-packed; after the last round, the shot's prediction.
 *
 * The plan (both sides read it; little-endian u32 words, 4-byte aligned):
 *
 *   magic QS_MAGIC | version QS_VERSION | rounds R | detectors D | observables O | windows K | shapes S
 *   round_ptr[R + 1] | round_det[D]                      the detectors of each round, payload order
 *   window[K][4] = start, end, commit_end, shape
 *   win_ptr[K + 1] | win_det[win_ptr[K]]                 each window's payload detectors, in order
 *   hand_ptr[K + 1] | hand_det[hand_ptr[K]]              each window's handed-on detectors
 */
#ifndef BACKLINE_QEC_STREAM_H
#define BACKLINE_QEC_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include <backline/backline.h>

#define QS_MAGIC 1397836866u /* "BLQS" as a little-endian u32 */
#define QS_VERSION 1u
#define QS_ROUND_HEADER_BYTES 2u
#define QS_MAX_ROUNDS 65535u

/* engine errors (a coprocessor function's nonzero return: the round fails with BL_EFN) */
#define QS_EPAYLOAD 1 /* a message that is not a round of this plan */
#define QS_EORDER 2   /* a round out of order, or the wrong decoder id for it */
#define QS_EDECODER 3 /* the window's decoder failed or replied with the wrong width */
#define QS_ECAP 4     /* the reply does not fit */

typedef struct qs_engine qs_engine;
typedef int32_t (*qs_fn)(void *ctx, uint32_t decoder_id, const uint8_t *in, uint32_t in_len, uint8_t *out,
                         uint32_t out_cap, uint32_t *out_len);

/* The engine for `plan`, decoding window shape s with fns[s](ctxs[s], 0, ...); NULL on error. */
BL_API qs_engine *qs_engine_create(const uint8_t *plan, size_t plan_len, const qs_fn *fns, void *const *ctxs,
                            uint32_t shapes);
BL_API void qs_engine_free(qs_engine *e);
/* The engine as a native function with its own init (bl_fn_init / bl_fn_fini): the context is
 *   u32 plan bytes | plan (padded to 4 bytes) | u32 shapes | per shape:
 *   u32 length + bytes of each of library, symbol, init_symbol, fini_symbol (empty: none), context
 * and each window decoder is dlopened and built where the engine is (a process, an executor). */
BL_API int32_t qs_engine_init(const void *params, size_t len, void **ctx);
BL_API void qs_engine_fini(void *ctx);
/* The engine as a bl_coprocessor_fn (ctx = the engine). */
BL_API int32_t qs_engine_fn(void *ctx, uint32_t decoder_id, const uint8_t *in, uint32_t in_len, uint8_t *out,
                     uint32_t out_cap, uint32_t *out_len);
/* The controller's loop over `shots` (detection events unpacked, shots x D bytes), each round paced
 * cycle_ns after the one before (0: as soon as the last reply is in). key != NULL: rounds over the
 * controller session registered under key in libbackline (path `libbackline`); key == NULL: the
 * engine called in this thread (the in-process reference, no transport). Out: the prediction
 * (shots x ceil(O/8)), each round's round trip (shots x R, ns), each round's lag behind its
 * availability when sent (shots x R, ns) and each shot's reaction time (ns). 0, or -1 with err. */
BL_API int32_t qs_drive(const char *libbackline, const char *key, qs_engine *local, const uint8_t *plan, size_t plan_len,
                 const uint8_t *dets, uint64_t shots, uint64_t cycle_ns, uint8_t *predictions, uint64_t *rtt_ns,
                 uint64_t *lag_ns, uint64_t *reaction_ns, char *err, size_t err_len);
/* A window decoder per window shape behind one function (parallel windows, docs/streaming.md): round
 * with decoder id s goes to fns[s](ctxs[s], 0, ...) unchanged -- the payload is the window's detection
 * events and the reply its committed observable flips, then its handed-on detector flips. */
typedef struct qs_mux qs_mux;
BL_API qs_mux *qs_mux_create(const qs_fn *fns, void *const *ctxs, uint32_t shapes);
BL_API void qs_mux_free(qs_mux *m);
/* As a native function with its own init: the context is a bind.h list of the window decoders. */
BL_API int32_t qs_mux_init(const void *params, size_t len, void **ctx);
BL_API void qs_mux_fini(void *ctx);
BL_API int32_t qs_mux_fn(void *ctx, uint32_t decoder_id, const uint8_t *in, uint32_t in_len, uint8_t *out,
                         uint32_t out_cap, uint32_t *out_len);
BL_API const char *qs_last_error(void);

#endif
