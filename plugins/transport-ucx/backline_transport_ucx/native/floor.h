/*
 * floor.h -- the bare UCX floor of `backline bench --transport ucx`: an active-message
 * ping-pong between two processes with nothing of the framework in the path, through a UCX
 * worker set up exactly as the ucx backend sets up its own (worker.h). Byte layout and
 * handshake: the top of floor.c. The Python side is backline_core._bench_floor's kit.
 *
 * Responder:  bl_ucx_floor_listen -> (say "listening") -> bl_ucx_floor_serve -> bl_ucx_floor_free
 *             (bl_ucx_floor_stop, from any thread, ends a serve early)
 * Initiator:  bl_ucx_floor_open -> bl_ucx_floor_rounds ... -> bl_ucx_floor_close
 *
 * floor.py reads the declarations between the cdef markers into cffi: keep them plain C
 * (no #include, no macros but integer #defines).
 */
#ifndef BACKLINE_UCX_FLOOR_H
#define BACKLINE_UCX_FLOOR_H

#include <backline/backline.h>
#include <backline/bench.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* cdef-begin */
#define BL_UCX_FLOOR_MAGIC 0x424c5546      /* "BLUF": not the framework's "BLUX" */
#define BL_UCX_FLOOR_VERSION 1
#define BL_UCX_FLOOR_MAX_PAYLOAD_BYTES 1048576 /* BL_BENCH_MAX_PAYLOAD_BYTES */
#define BL_UCX_FLOOR_ERROR_BYTES 512       /* room for any error text */

typedef struct bl_ucx_floor bl_ucx_floor;

/* Responder: a UCX worker on `tls` ("shm", "tcp" or "auto", as the transport's key) and a
 * socket listening on host:port (port 0: any free port; see bl_ucx_floor_port). cpu >= 0
 * pins the thread that later calls serve. */
BL_API int32_t bl_ucx_floor_listen(const char *host, int32_t port, const char *tls, int32_t cpu, uint64_t timeout_ms,
                                   bl_ucx_floor **out, char *err, size_t n);
/* The TCP port a responder listens on. */
BL_API int32_t bl_ucx_floor_port(const bl_ucx_floor *h);
/* Serve ONE initiator: wait for it (at most wait_ms, 1 to BL_MAX_TIMEOUT_MS; 0: the connect
 * timeout, the larger of timeout_ms and BL_DEFAULT_CONNECT_TIMEOUT_MS), then echo its rounds
 * until it disconnects (BL_OK) or bl_ucx_floor_stop is called (BL_OK). Prints nothing; on
 * failure the text is bl_ucx_floor_error's. */
BL_API int32_t bl_ucx_floor_serve(bl_ucx_floor *h, uint64_t wait_ms);
/* Ask a running serve to return (async-signal-safe: it sets a flag). */
BL_API void bl_ucx_floor_stop(bl_ucx_floor *h);
BL_API void bl_ucx_floor_free(bl_ucx_floor *h);

/* Initiator: a worker on `tls`, dial the responder at host:port (retrying refusals), exchange
 * worker addresses, make the endpoint. Rounds wait at most timeout_ms each for their reply. */
BL_API int32_t bl_ucx_floor_open(const char *host, int32_t port, const char *tls, uint32_t payload_bytes,
                                 uint64_t timeout_ms, bl_ucx_floor **out, char *err, size_t n);
/* `rounds` round trips, one time in ns each into rtt_ns (0 for a lost one). The payload of
 * round i carries i as bl_bench_rounds' echo payloads do; every reply byte is checked
 * (res->mismatched). The first lost round ends the call and the handle: res->lost 1,
 * res->first_error its status, the reason in bl_ucx_floor_error. Returns first_error. */
BL_API int32_t bl_ucx_floor_rounds(bl_ucx_floor *h, uint64_t first_round, uint64_t rounds, uint64_t *rtt_ns,
                                   bl_bench_result *res);
/* Pace the rounds as bl_bench_config does: cadence 1 (BL_CADENCE_RANDOM_DELAYED) waits
 * gap_base_ns + (lfsr & gap_span_mask) before each round, the LFSR stepping from `lfsr`
 * (not 0); cadence 0 (the default) runs rounds back to back. */
BL_API int32_t bl_ucx_floor_cadence(bl_ucx_floor *h, int32_t cadence, uint32_t lfsr, uint64_t gap_base_ns,
                                    uint64_t gap_span_mask);
BL_API void bl_ucx_floor_close(bl_ucx_floor *h);

/* Nanoseconds per tick of the round clock (backline/sdk/pingpong.h's, calibrated once). */
BL_API double bl_ucx_floor_ns_per_tick(void);
/* Either side: the last failure's text ("" if none). */
BL_API const char *bl_ucx_floor_error(const bl_ucx_floor *h);
/* The UCX_TLS list a tls value stands for ("" for auto), NULL for no such value. */
BL_API const char *bl_ucx_floor_tls(const char *tls);
/* Either side: "tls=shm, UCX transports posix/memory". */
BL_API void bl_ucx_floor_describe(const bl_ucx_floor *h, char *out, size_t n);
/* cdef-end */

#ifdef __cplusplus
}
#endif
#endif
