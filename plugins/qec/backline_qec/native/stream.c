/* Streamed sliding-window decoding: the coprocessor's engine and the controller's loop (stream.h). */
#define _GNU_SOURCE
#include "stream.h"

#include "bind.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <backline/backline.h>

static __thread char g_err[512];

static void set_err(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
}

const char *qs_last_error(void) { return g_err; }

/* -- the plan ---------------------------------------------------------------------------------- */

typedef struct {
    uint32_t rounds, dets, obs, windows, shapes;
    const uint32_t *round_ptr, *round_det, *window, *win_ptr, *win_det, *hand_ptr, *hand_det;
    uint32_t max_round_bytes, max_win_bytes, max_reply_bytes;
} plan_t;

static int plan_parse(const uint8_t *blob, size_t len, plan_t *p) {
    if (!blob || ((uintptr_t)blob & 3u) || len < 28) return set_err("the plan is missing, short or unaligned"), -1;
    const uint32_t *w = (const uint32_t *)blob, *end = w + len / 4;
    if (w[0] != QS_MAGIC || w[1] != QS_VERSION) return set_err("not a stream plan of version %u", QS_VERSION), -1;
    p->rounds = w[2], p->dets = w[3], p->obs = w[4], p->windows = w[5], p->shapes = w[6];
    if (!p->rounds || p->rounds > QS_MAX_ROUNDS || !p->dets || !p->obs || !p->windows || !p->shapes ||
        p->shapes > 255u || p->dets > (1u << 24) || p->obs > (1u << 16) || p->windows > p->rounds)
        return set_err("the plan's sizes are out of range"), -1;
    const uint32_t *q = w + 7;
#define TAKE(ptr, n)                                                                                       \
    do {                                                                                                   \
        if ((size_t)(end - q) < (size_t)(n)) return set_err("the plan is truncated"), -1;                  \
        (ptr) = q, q += (n);                                                                               \
    } while (0)
    TAKE(p->round_ptr, p->rounds + 1u);
    if (p->round_ptr[0] || p->round_ptr[p->rounds] != p->dets) return set_err("round_ptr is malformed"), -1;
    TAKE(p->round_det, p->dets);
    TAKE(p->window, 4u * p->windows);
    TAKE(p->win_ptr, p->windows + 1u);
    if (p->win_ptr[0] || p->win_ptr[p->windows] > (1u << 28)) return set_err("win_ptr is malformed"), -1;
    TAKE(p->win_det, p->win_ptr[p->windows]);
    TAKE(p->hand_ptr, p->windows + 1u);
    if (p->hand_ptr[0] || p->hand_ptr[p->windows] > (1u << 28)) return set_err("hand_ptr is malformed"), -1;
    TAKE(p->hand_det, p->hand_ptr[p->windows]);
#undef TAKE
    p->max_round_bytes = p->max_win_bytes = p->max_reply_bytes = 0;
    for (uint32_t r = 0; r < p->rounds; r++) {
        if (p->round_ptr[r] > p->round_ptr[r + 1]) return set_err("round_ptr is malformed"), -1;
        uint32_t b = (p->round_ptr[r + 1] - p->round_ptr[r] + 7u) / 8u;
        if (b > p->max_round_bytes) p->max_round_bytes = b;
    }
    for (uint32_t i = 0; i < p->dets; i++)
        if (p->round_det[i] >= p->dets) return set_err("a round names detector %u of %u", p->round_det[i], p->dets), -1;
    uint32_t next = 0;
    for (uint32_t k = 0; k < p->windows; k++) {
        const uint32_t *wk = p->window + 4u * k;
        if (wk[0] != next || wk[0] >= wk[1] || wk[2] <= wk[0] || wk[2] > wk[1] || wk[1] > p->rounds ||
            wk[3] >= p->shapes || p->win_ptr[k] > p->win_ptr[k + 1] || p->hand_ptr[k] > p->hand_ptr[k + 1])
            return set_err("window %u is malformed", k), -1;
        next = wk[2];
        uint32_t wb = (p->win_ptr[k + 1] - p->win_ptr[k] + 7u) / 8u;
        uint32_t rb = (p->obs + p->hand_ptr[k + 1] - p->hand_ptr[k] + 7u) / 8u;
        if (wb > p->max_win_bytes) p->max_win_bytes = wb;
        if (rb > p->max_reply_bytes) p->max_reply_bytes = rb;
    }
    if (next != p->rounds || p->window[4u * (p->windows - 1u) + 1u] != p->rounds)
        return set_err("the windows do not commit every round"), -1;
    for (uint32_t i = 0; i < p->win_ptr[p->windows]; i++)
        if (p->win_det[i] >= p->dets) return set_err("a window names detector %u of %u", p->win_det[i], p->dets), -1;
    for (uint32_t i = 0; i < p->hand_ptr[p->windows]; i++)
        if (p->hand_det[i] >= p->dets) return set_err("a window hands on detector %u of %u", p->hand_det[i], p->dets), -1;
    return 0;
}

/* -- the coprocessor's engine ------------------------------------------------------------------ */

struct qs_engine {
    plan_t p;
    /* what qs_engine_init bound, one per shape (NULL when built from Python) */
    qb_bound *bound;
    uint32_t *blob; /* the plan, copied (aligned, owned) */
    qs_fn *fns;
    void **ctxs;
    uint8_t *work;  /* this shot's detection events, one byte each */
    uint8_t *pred;  /* committed observable flips, one byte each */
    uint8_t *payload, *reply;
    uint32_t next_round, next_window;
};

/* qs_engine_create, the engine then owning `bound` (what qs_engine_init bound; NULL: none) */
static void *engine_new(const uint8_t *plan, size_t plan_len, const qs_fn *fns, void *const *ctxs, uint32_t shapes,
                        qb_bound *bound) {
    qs_engine *e = calloc(1, sizeof *e);
    if (!e) return set_err("out of memory"), NULL;
    e->blob = malloc(plan_len + 4);
    if (!e->blob) goto oom;
    memcpy(e->blob, plan, plan_len);
    if (plan_parse((const uint8_t *)e->blob, plan_len, &e->p)) goto fail;
    if (shapes != e->p.shapes) {
        set_err("the plan has %u window shapes but %u decoders were given", e->p.shapes, shapes);
        goto fail;
    }
    e->fns = calloc(shapes, sizeof *e->fns);
    e->ctxs = calloc(shapes, sizeof *e->ctxs);
    e->work = calloc(e->p.dets, 1);
    e->pred = calloc(e->p.obs, 1);
    e->payload = calloc(e->p.max_win_bytes + 1u, 1);
    e->reply = calloc(e->p.max_reply_bytes + 1u, 1);
    if (!e->fns || !e->ctxs || !e->work || !e->pred || !e->payload || !e->reply) goto oom;
    for (uint32_t s = 0; s < shapes; s++) {
        if (!fns || !fns[s]) {
            set_err("no decoder for window shape %u", s);
            goto fail;
        }
        e->fns[s] = fns[s], e->ctxs[s] = ctxs ? ctxs[s] : NULL;
    }
    e->bound = bound;
    return e;
oom:
    set_err("out of memory");
fail:
    qs_engine_free(e);
    return NULL;
}

qs_engine *qs_engine_create(const uint8_t *plan, size_t plan_len, const qs_fn *fns, void *const *ctxs,
                            uint32_t shapes) {
    return engine_new(plan, plan_len, fns, ctxs, shapes, NULL);
}

void qs_engine_free(qs_engine *e) {
    if (!e) return;
    qb_unbind_list(e->bound, e->p.shapes);
    free(e->blob), free(e->fns), free(e->ctxs), free(e->work), free(e->pred), free(e->payload), free(e->reply);
    free(e);
}

static const qb_owner_kind engine_kind = {.has_blob = 1, .max_n = 255u, .build = engine_new, .set_err = set_err,
                                           .truncated = "the engine's context is truncated", .list = "window decoders"};

int32_t qs_engine_init(const void *params, size_t len, void **ctx) {
    return qb_owner_init(&engine_kind, params, len, ctx);
}

void qs_engine_fini(void *ctx) { qs_engine_free(ctx); }

static void reset_shot(qs_engine *e) {
    memset(e->work, 0, e->p.dets);
    memset(e->pred, 0, e->p.obs);
    e->next_round = e->next_window = 0;
}

static int32_t decode_window(qs_engine *e, uint32_t k) {
    const plan_t *p = &e->p;
    uint32_t n = p->win_ptr[k + 1] - p->win_ptr[k], h = p->hand_ptr[k + 1] - p->hand_ptr[k];
    const uint32_t *dets = p->win_det + p->win_ptr[k], *hand = p->hand_det + p->hand_ptr[k];
    uint32_t bytes = (n + 7u) / 8u, want = (p->obs + h + 7u) / 8u, got = 0;
    memset(e->payload, 0, bytes);
    for (uint32_t i = 0; i < n; i++) e->payload[i >> 3] |= (uint8_t)(e->work[dets[i]] << (i & 7u));
    uint32_t shape = p->window[4u * k + 3u];
    int32_t rc = e->fns[shape](e->ctxs[shape], 0, e->payload, bytes, e->reply, p->max_reply_bytes + 1u, &got);
    if (rc != 0 || got != want) return QS_EDECODER;
    for (uint32_t o = 0; o < p->obs; o++) e->pred[o] ^= (e->reply[o >> 3] >> (o & 7u)) & 1u;
    for (uint32_t i = 0; i < h; i++) {
        uint32_t b = p->obs + i;
        e->work[hand[i]] ^= (e->reply[b >> 3] >> (b & 7u)) & 1u;
    }
    return 0;
}

int32_t qs_engine_fn(void *ctx, uint32_t decoder_id, const uint8_t *in, uint32_t in_len, uint8_t *out,
                     uint32_t out_cap, uint32_t *out_len) {
    qs_engine *e = ctx;
    const plan_t *p = &e->p;
    if (in_len < QS_ROUND_HEADER_BYTES) return QS_EPAYLOAD;
    uint32_t r = (uint32_t)in[0] | (uint32_t)in[1] << 8;
    if (r >= p->rounds) return QS_EPAYLOAD;
    uint32_t n = p->round_ptr[r + 1] - p->round_ptr[r];
    if (in_len != QS_ROUND_HEADER_BYTES + (n + 7u) / 8u) return QS_EPAYLOAD;
    if (r == 0) reset_shot(e); /* a new shot; one cut short before is dropped */
    const uint32_t *wk = p->window + 4u * e->next_window;
    uint32_t expect = wk[1] == r + 1u ? wk[3] : p->shapes; /* the window decoder this round runs, or none */
    if (r != e->next_round || decoder_id != 0) {
        reset_shot(e);
        return QS_EORDER;
    }
    const uint8_t *bits = in + QS_ROUND_HEADER_BYTES;
    const uint32_t *dets = p->round_det + p->round_ptr[r];
    for (uint32_t i = 0; i < n; i++) e->work[dets[i]] = (bits[i >> 3] >> (i & 7u)) & 1u;
    e->next_round = r + 1u;
    if (expect != p->shapes) {
        int32_t rc = decode_window(e, e->next_window);
        if (rc) {
            reset_shot(e);
            return rc;
        }
        e->next_window++;
    }
    uint32_t reply = (p->obs + 7u) / 8u;
    if (out_cap < reply) return QS_ECAP;
    memset(out, 0, reply);
    for (uint32_t o = 0; o < p->obs; o++) out[o >> 3] |= (uint8_t)(e->pred[o] << (o & 7u));
    *out_len = reply;
    if (e->next_round == p->rounds) reset_shot(e);
    return 0;
}

/* -- the controller's loop --------------------------------------------------------------------- */

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int32_t qs_drive(const char *libbackline, const char *key, qs_engine *local, const uint8_t *plan, size_t plan_len,
                 const uint8_t *dets, uint64_t shots, uint64_t cycle_ns, uint8_t *predictions, uint64_t *rtt_ns,
                 uint64_t *lag_ns, uint64_t *reaction_ns, char *err, size_t err_len) {
    int32_t status = -1;
    plan_t p;
    uint32_t *copy = malloc(plan_len + 4);
    uint8_t *msg = NULL, *reply = NULL;
    qb_core core = {0};
    void *s = NULL;
    if (!copy) {
        snprintf(err, err_len, "out of memory");
        goto done;
    }
    memcpy(copy, plan, plan_len);
    if (plan_parse((const uint8_t *)copy, plan_len, &p)) {
        snprintf(err, err_len, "%s", g_err);
        goto done;
    }
    if (key) {
        if (qb_core_open(&core, libbackline, err, err_len)) goto done;
        if (!(s = core.session_get(BL_CONTROLLER, key))) {
            snprintf(err, err_len, "no controller session '%s': %s", key, core.last_error());
            goto done;
        }
    } else if (!local) {
        snprintf(err, err_len, "give a session key or an engine");
        goto done;
    }
    uint32_t reply_cap = (p.obs + 7u) / 8u + 8u, got = 0, pred_bytes = (p.obs + 7u) / 8u;
    msg = calloc(QS_ROUND_HEADER_BYTES + p.max_round_bytes, 1);
    reply = calloc(reply_cap, 1);
    if (!msg || !reply) {
        snprintf(err, err_len, "out of memory");
        goto done;
    }
    uint64_t t0 = now_ns(), ready = t0;
    for (uint64_t shot = 0; shot < shots; shot++) {
        const uint8_t *ev = dets + shot * p.dets;
        uint32_t k = 0;
        uint64_t avail = 0;
        for (uint32_t r = 0; r < p.rounds; r++) {
            uint32_t n = p.round_ptr[r + 1] - p.round_ptr[r], bytes = (n + 7u) / 8u;
            const uint32_t *rd = p.round_det + p.round_ptr[r];
            msg[0] = (uint8_t)r, msg[1] = (uint8_t)(r >> 8);
            memset(msg + QS_ROUND_HEADER_BYTES, 0, bytes);
            for (uint32_t i = 0; i < n; i++) msg[QS_ROUND_HEADER_BYTES + (i >> 3)] |= (uint8_t)(ev[rd[i]] << (i & 7u));
            const uint32_t *wk = p.window + 4u * k;
            int completes = wk[1] == r + 1u;
            if (cycle_ns) {  /* round r of this shot becomes available one cycle after the one before */
                avail = t0 + (shot * p.rounds + r + 1u) * cycle_ns;
                while (now_ns() < avail) __asm__ volatile("" ::: "memory");
            } else {
                avail = ready;
            }
            uint64_t sent = now_ns();
            int32_t rc = key ? core.round(s, msg, QS_ROUND_HEADER_BYTES + bytes, 0, reply, reply_cap, &got)
                             : qs_engine_fn(local, 0, msg, QS_ROUND_HEADER_BYTES + bytes, reply, reply_cap, &got);
            uint64_t back = now_ns();
            if (rc != 0) {
                snprintf(err, err_len, "shot %llu round %u: %s (status %d)", (unsigned long long)shot, r,
                         key ? core.last_error() : g_err, rc);
                goto done;
            }
            if (got != pred_bytes) {
                snprintf(err, err_len, "shot %llu round %u: a reply of %u bytes, expected %u", (unsigned long long)shot,
                         r, got, pred_bytes);
                goto done;
            }
            rtt_ns[shot * p.rounds + r] = back - sent;
            lag_ns[shot * p.rounds + r] = sent - avail;
            ready = back;
            if (completes) k++;
            if (r + 1u == p.rounds) {
                reaction_ns[shot] = back - avail;
                memcpy(predictions + shot * pred_bytes, reply, pred_bytes);
            }
        }
    }
    status = 0;
done:
    free(copy), free(msg), free(reply);
    qb_core_close(&core);
    return status;
}

/* -- the window multiplexer (parallel windows) ------------------------------------------------- */

struct qs_mux {
    uint32_t shapes;
    qs_fn fns[255];
    void *ctxs[255];
    qb_bound *bound; /* what qs_mux_init bound (NULL when built from Python) */
};

/* qs_mux_create, the multiplexer then owning `bound` (what qs_mux_init bound; NULL: none); it has no blob */
static void *mux_new(const uint8_t *blob, size_t blob_len, const qs_fn *fns, void *const *ctxs, uint32_t shapes,
                     qb_bound *bound) {
    if (!fns || !ctxs || !shapes || shapes > 255u) return set_err("1 to 255 window decoders, got %u", shapes), NULL;
    qs_mux *m = calloc(1, sizeof *m);
    if (!m) return set_err("out of memory"), NULL;
    m->shapes = shapes;
    for (uint32_t s = 0; s < shapes; s++) m->fns[s] = fns[s], m->ctxs[s] = ctxs[s];
    m->bound = bound;
    return m;
}

qs_mux *qs_mux_create(const qs_fn *fns, void *const *ctxs, uint32_t shapes) {
    return mux_new(NULL, 0, fns, ctxs, shapes, NULL);
}

void qs_mux_free(qs_mux *m) {
    if (!m) return;
    if (m->bound) qb_unbind_list(m->bound, m->shapes);
    free(m);
}

static const qb_owner_kind mux_kind = {.has_blob = 0, .max_n = 255u, .build = mux_new, .set_err = set_err,
                                        .truncated = "the window decoders' context is missing",
                                        .list = "window decoders"};

int32_t qs_mux_init(const void *params, size_t len, void **ctx) { return qb_owner_init(&mux_kind, params, len, ctx); }

void qs_mux_fini(void *ctx) { qs_mux_free(ctx); }

int32_t qs_mux_fn(void *ctx, uint32_t decoder_id, const uint8_t *in, uint32_t in_len, uint8_t *out,
                  uint32_t out_cap, uint32_t *out_len) {
    qs_mux *m = ctx;
    if (!m || decoder_id >= m->shapes) return QS_EORDER; /* no window shape with this id */
    return m->fns[decoder_id](m->ctxs[decoder_id], 0, in, in_len, out, out_cap, out_len);
}
