/*
 * floor.h -- the bare verbs floor of `backline bench --transport rdma`: an RDMA WRITE
 * ping-pong between two processes with nothing of the framework in the path, on queue
 * pairs set up exactly as the rdma backend sets up its own (verbs.h). Byte layout and
 * handshake: the top of floor.c.
 *
 * Responder:  bl_rdma_floor_listen -> (say "listening") -> bl_rdma_floor_serve -> bl_rdma_floor_free
 *             (bl_rdma_floor_stop, from any thread, ends a serve early)
 * Initiator:  bl_rdma_floor_open -> bl_rdma_floor_rounds ... -> bl_rdma_floor_close
 *
 * floor.py reads the declarations between the cdef markers into cffi: keep them plain C
 * (no #include, no macros but integer #defines).
 */
#ifndef BACKLINE_RDMA_FLOOR_H
#define BACKLINE_RDMA_FLOOR_H

#include <backline/backline.h>
#include <backline/bench.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* cdef-begin */
#define BL_RDMA_FLOOR_MAGIC 0x424c464c      /* "BLFL": not the framework's "BLRD" */
#define BL_RDMA_FLOOR_VERSION 1
#define BL_RDMA_FLOOR_MAX_PAYLOAD_BYTES 1048576 /* BL_BENCH_MAX_PAYLOAD_BYTES */
#define BL_RDMA_FLOOR_ERROR_BYTES 512       /* room for any error text */

typedef struct bl_rdma_floor bl_rdma_floor;

/* The device, port and GID as rv_open_device chooses them (device "" = the first with an
 * active port, ib_port 0 = its first active port, gid_index -1 = the default RoCE v2 GID),
 * opened and closed again: the error says what is missing and lists what exists. */
BL_API int32_t bl_rdma_floor_check(const char *device, int32_t ib_port, int32_t gid_index, char *err, size_t n);

/* Responder: open the device and listen on host:port (port 0: any free port; see
 * bl_rdma_floor_port). cpu >= 0 pins the thread that later calls serve. */
BL_API int32_t bl_rdma_floor_listen(const char *host, int32_t port, const char *device, int32_t ib_port,
                                    int32_t gid_index, int32_t cpu, uint64_t timeout_ms, bl_rdma_floor **out,
                                    char *err, size_t n);
/* The TCP port a responder listens on. */
BL_API int32_t bl_rdma_floor_port(const bl_rdma_floor *h);
/* Serve ONE initiator: wait for it (at most wait_ms, 1 to BL_MAX_TIMEOUT_MS; 0: the connect
 * timeout, the larger of timeout_ms and BL_DEFAULT_CONNECT_TIMEOUT_MS), then echo its rounds
 * until it disconnects (BL_OK) or bl_rdma_floor_stop is called (BL_OK). Prints nothing; on
 * failure the text is bl_rdma_floor_error's. */
BL_API int32_t bl_rdma_floor_serve(bl_rdma_floor *h, uint64_t wait_ms);
/* Ask a running serve to return (async-signal-safe: it sets a flag). */
BL_API void bl_rdma_floor_stop(bl_rdma_floor *h);
BL_API void bl_rdma_floor_free(bl_rdma_floor *h);

/* Initiator: dial the responder at host:port (retrying refusals), handshake, connect the
 * queue pair. Rounds wait at most timeout_ms each for their reply. */
BL_API int32_t bl_rdma_floor_open(const char *host, int32_t port, const char *device, int32_t ib_port,
                                  int32_t gid_index, uint32_t payload_bytes, uint64_t timeout_ms,
                                  bl_rdma_floor **out, char *err, size_t n);
/* `rounds` round trips, one time in ns each into rtt_ns (0 for a lost one). The payload
 * of round i carries i as bl_bench_rounds' echo payloads do; every reply byte is checked
 * (res->mismatched). The first lost round ends the call and the handle: res->lost 1,
 * res->first_error its status, the reason in bl_rdma_floor_error. Returns first_error. */
BL_API int32_t bl_rdma_floor_rounds(bl_rdma_floor *h, uint64_t first_round, uint64_t rounds, uint64_t *rtt_ns,
                                    bl_bench_result *res);
/* Pace the rounds as bl_bench_config does: cadence 1 (BL_CADENCE_RANDOM_DELAYED) waits
 * gap_base_ns + (lfsr & gap_span_mask) before each round, the LFSR (bl_lfsr_next's) stepping
 * from `lfsr` (not 0); cadence 0 (the default) runs rounds back to back. */
BL_API int32_t bl_rdma_floor_cadence(bl_rdma_floor *h, int32_t cadence, uint32_t lfsr, uint64_t gap_base_ns,
                                     uint64_t gap_span_mask);
BL_API void bl_rdma_floor_close(bl_rdma_floor *h);

/* Nanoseconds per tick of the round clock (the CPU's constant-rate counter, as the core's
 * and perftest's; calibrated once against CLOCK_MONOTONIC): converts perftest's -C cycles. */
BL_API double bl_rdma_floor_ns_per_tick(void);
/* Either side: the last failure's text ("" if none). */
BL_API const char *bl_rdma_floor_error(const bl_rdma_floor *h);
/* Either side: the device name, port and GID index in use. */
BL_API void bl_rdma_floor_device(const bl_rdma_floor *h, char *name, size_t n, int32_t *ib_port, int32_t *gid_index);
/* Either side: "rxe0 port 1, GID 1 ::ffff:127.0.0.1 (RoCE v2), MTU 4096, inline 220 B". */
BL_API void bl_rdma_floor_describe(const bl_rdma_floor *h, char *out, size_t n);
/* cdef-end */

#ifdef __cplusplus
}
#endif
#endif
