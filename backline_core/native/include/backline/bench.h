/*
 * bench.h -- native round drivers used by `backline bench`.
 *
 * bl_bench_rounds issues rounds on a started controller session from native code;
 * bl_bench_floor runs the same number of rounds over a bare shared-memory ping-pong
 * between the calling thread and a responder thread pinned to `responder_cpu`, with no
 * framework in the path. Both record one round-trip time per round, in nanoseconds.
 */
#ifndef BACKLINE_BENCH_H
#define BACKLINE_BENCH_H

/* The largest payload the floor ping-pong carries (bl_bench_floor refuses more: BL_ETOOBIG). */
#define BL_BENCH_MAX_PAYLOAD_BYTES 1048576u

#include "backline.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum bl_bench_cadence { BL_CADENCE_B2B = 0, BL_CADENCE_RANDOM_DELAYED = 1 } bl_bench_cadence;

typedef struct bl_bench_config {
    uint64_t rounds;
    uint64_t first_round;     /* index of the first round (payload counters continue across blocks) */
    uint32_t payload_bytes;
    uint32_t decoder_id;
    int32_t cadence;          /* bl_bench_cadence */
    uint32_t lfsr;            /* LFSR state; updated in place so blocks continue the sequence */
    uint64_t gap_base_ns;     /* random-delayed: gap = gap_base_ns + (lfsr & gap_span_mask) */
    uint64_t gap_span_mask;
    /* Payload source. NULL: every payload carries its round index (echo check). Else a
     * table of n_payloads payloads of payload_bytes, cycled, with expected replies of
     * expected_bytes each. */
    const uint8_t *payloads;
    const uint8_t *expected;
    uint32_t n_payloads;
    uint32_t expected_bytes;
} bl_bench_config;

typedef struct bl_bench_result {
    uint64_t done;        /* rounds answered */
    uint64_t lost;        /* rounds that failed (timeout, peer, error replies) */
    uint64_t mismatched;  /* replies whose bytes differ from what was expected */
    int32_t first_error;  /* status of the first failure, BL_OK if none */
} bl_bench_result;

BL_API uint32_t bl_lfsr_next(uint32_t state);
/* Typical (median) step of the round-trip clock, in ns: its resolution on this machine. */
BL_API double bl_bench_timer_resolution_ns(void);
BL_API int32_t bl_bench_rounds(bl_session *s, bl_bench_config *cfg, uint64_t *rtt_ns, bl_bench_result *res);
BL_API int32_t bl_bench_floor(bl_bench_config *cfg, int32_t responder_cpu, uint64_t *rtt_ns, bl_bench_result *res);

#ifdef __cplusplus
}
#endif
#endif
