/* Native round drivers for `backline bench`: the framework path and the bare floor. */
#define _GNU_SOURCE
#include "backline/bench.h"
#include "internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

BL_API uint32_t bl_lfsr_next(uint32_t l) { return bl_pingpong_lfsr_next(l); }

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

BL_API double bl_bench_timer_resolution_ns(void) {
    /* The median step between changing readings: some virtual TSCs advance in coarse
     * steps with rare odd ones, so the minimum would overstate the resolution. */
    enum { N = 4001 };
    static uint64_t steps[N];
    bl__calibrate_ticks();
    for (int i = 0; i < N; ++i) {
        uint64_t a = bl__ticks(), b;
        while ((b = bl__ticks()) == a) {
        }
        steps[i] = b - a;
    }
    qsort(steps, N, sizeof steps[0], cmp_u64);
    return (double)steps[N / 2] * bl__ns_per_tick;
}

static inline void wait_gap(bl_bench_config *cfg) {
    if (cfg->cadence == BL_CADENCE_RANDOM_DELAYED) bl_pingpong_wait_gap(&cfg->lfsr, cfg->gap_base_ns, cfg->gap_span_mask);
}

/* The payload of round i: its index (little-endian) repeated, or a table entry. */
static inline const uint8_t *payload_for(const bl_bench_config *cfg, uint64_t i, uint8_t *scratch) {
    if (cfg->payloads) return cfg->payloads + (size_t)(i % cfg->n_payloads) * cfg->payload_bytes;
    bl_pingpong_fill(scratch, cfg->payload_bytes, i);
    return scratch;
}

static inline int reply_ok(const bl_bench_config *cfg, uint64_t i, const uint8_t *sent, const uint8_t *got, uint32_t len) {
    if (cfg->payloads) {
        return len == cfg->expected_bytes &&
               memcmp(got, cfg->expected + (size_t)(i % cfg->n_payloads) * cfg->expected_bytes, len) == 0;
    }
    return len == cfg->payload_bytes && memcmp(got, sent, len) == 0;
}

BL_API int32_t bl_bench_rounds(bl_session *s, bl_bench_config *cfg, uint64_t *rtt_ns, bl_bench_result *res) {
    uint8_t *scratch = malloc(cfg->payload_bytes + 1);
    if (!scratch) return BL_ENOMEM;
    memset(res, 0, sizeof *res);
    for (uint64_t k = 0; k < cfg->rounds; ++k) {
        uint64_t i = cfg->first_round + k;
        const uint8_t *p = payload_for(cfg, i, scratch);
        wait_gap(cfg);
        const uint8_t *reply = NULL;
        uint32_t len = 0;
        int32_t rc = bl_stage_payload(s, p, cfg->payload_bytes, cfg->decoder_id);
        if (rc == BL_OK) rc = bl_post(s);
        if (rc == BL_OK) rc = bl_reply_slot(s, &reply, &len);
        if (rc != BL_OK) {
            res->lost++;
            if (!res->first_error) res->first_error = rc;
            rtt_ns[k] = 0;
            if (rc == BL_EINVAL || rc == BL_ESTATE) break; /* nothing later can succeed */
            continue;
        }
        rtt_ns[k] = bl_last_rtt_ns(s);
        if (!reply_ok(cfg, i, p, reply, len)) res->mismatched++;
        res->done++;
    }
    free(scratch);
    return res->first_error;
}

/* ---- the floor: a bare seq-last ping-pong, with nothing of the framework in the path ----
 * It moves the same bytes through the same memory pattern as a session's rings (FLOOR_SLOTS
 * slots used in turn, each a 64-byte-aligned seq word followed by the payload), so the
 * ratio isolates what the framework's code adds: headers, dispatch, state checks, hooks. */

#define FLOOR_SLOTS 64u

struct floor_pair {
    uint8_t *req, *rep; /* FLOOR_SLOTS slots of `stride` bytes each */
    uint32_t stride, bytes;
    volatile int stop __attribute__((aligned(64)));
};

static inline uint64_t *floor_seq(uint8_t *ring, const struct floor_pair *f, uint64_t seq) {
    return (uint64_t *)(ring + (size_t)((seq - 1) & (FLOOR_SLOTS - 1)) * f->stride);
}

static void *floor_responder(void *arg) {
    struct floor_pair *f = arg;
    uint64_t next = 1;
    while (!f->stop) {
        uint64_t *q = floor_seq(f->req, f, next);
        if (bl__load_acquire(q) != next) {
            bl_cpu_relax();
            continue;
        }
        uint64_t *r = floor_seq(f->rep, f, next);
        memcpy(r + 1, q + 1, f->bytes);
        bl__store_release(r, next);
        ++next;
    }
    return NULL;
}

BL_API int32_t bl_bench_floor(bl_bench_config *cfg, int32_t responder_cpu, uint64_t *rtt_ns, bl_bench_result *res) {
    memset(res, 0, sizeof *res);
    bl__calibrate_ticks();
    if (cfg->payload_bytes > BL_BENCH_MAX_PAYLOAD_BYTES) return BL_ETOOBIG;
    struct floor_pair *f = aligned_alloc(64, sizeof *f);
    if (!f) return BL_ENOMEM;
    memset(f, 0, sizeof *f);
    f->bytes = cfg->payload_bytes;
    f->stride = (8 + cfg->payload_bytes + 63) & ~63u;
    f->req = aligned_alloc(64, (size_t)FLOOR_SLOTS * f->stride);
    f->rep = aligned_alloc(64, (size_t)FLOOR_SLOTS * f->stride);
    if (!f->req || !f->rep) {
        free(f->req);
        free(f->rep);
        free(f);
        return BL_ENOMEM;
    }
    memset(f->req, 0, (size_t)FLOOR_SLOTS * f->stride);
    memset(f->rep, 0, (size_t)FLOOR_SLOTS * f->stride);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (responder_cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(responder_cpu, &set);
        pthread_attr_setaffinity_np(&attr, sizeof set, &set);
    }
    pthread_t t;
    int prc = pthread_create(&t, &attr, floor_responder, f);
    pthread_attr_destroy(&attr);
    if (prc) {
        free(f->req);
        free(f->rep);
        free(f);
        return BL_EBACKEND;
    }
    uint8_t *scratch = malloc(cfg->payload_bytes + 1);
    for (uint64_t k = 0; k < cfg->rounds; ++k) {
        uint64_t i = cfg->first_round + k, seq = k + 1;
        const uint8_t *p = payload_for(cfg, i, scratch);
        wait_gap(cfg);
        uint64_t *q = floor_seq(f->req, f, seq), *r = floor_seq(f->rep, f, seq);
        memcpy(q + 1, p, cfg->payload_bytes);
        uint64_t t0 = bl__ticks(); /* after staging, like the framework's post timestamp */
        bl__store_release(q, seq);
        uint64_t deadline = 0;
        for (uint32_t spins = 0; bl__load_acquire(r) != seq;) {
            bl_cpu_relax();
            if ((++spins & 0xffff) == 0) {
                uint64_t now = bl__now();
                if (!deadline) deadline = now + 1000000000ull;
                else if (now > deadline) break;
            }
        }
        if (bl__load_acquire(r) != seq) {
            res->lost++;
            res->first_error = BL_ETIMEOUT;
            break;
        }
        rtt_ns[k] = bl__ns_since(t0);
        if (memcmp(r + 1, p, cfg->payload_bytes) != 0) res->mismatched++;
        res->done++;
    }
    f->stop = 1;
    pthread_join(t, NULL);
    free(scratch);
    free(f->req);
    free(f->rep);
    free(f);
    return res->first_error;
}
