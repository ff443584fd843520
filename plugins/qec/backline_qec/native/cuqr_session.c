/* CUDA-Q QEC's decoding session as a coprocessor function, and the server's UDP loop (cuqr_session.h). */
#define _GNU_SOURCE
#include "cuqr_session.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "bind.h"

/* theirs: kMaxSyndromeBits, the most bits one enqueue may carry */
#define CQ_MAX_SYNDROME_BITS (1u << 20)
#define CQ_MAX_BITS (1u << 24) /* measurements or detectors a decoder holds */

static __thread char g_err[512];

static void set_err(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
}

const char *cq_last_error(void) { return g_err; }

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void wr64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* -- parsing a request (the network's bytes: every field is bounds-checked) ------------------- */

int32_t cq_classify(const uint8_t *msg, size_t len, uint32_t slot_size, cq_request *r) {
    memset(r, 0, sizeof *r);
    if (len > slot_size) return CQ_DROP_OVERSIZED;
    if (len < CUQR_HEADER_BYTES || !msg) return CQ_DROP_TRUNCATED;
    if (rd32(msg) != CUQR_REQUEST_MAGIC) return CQ_DROP_MAGIC;
    r->function_id = rd32(msg + 4), r->arg_len = rd32(msg + 8), r->request_id = rd32(msg + 12);
    r->ptp_timestamp = rd64(msg + 16);
    /* their host dispatcher drops a slot whose function_id has no table entry */
    if (r->function_id != CUQR_FN_ENQUEUE_SYNDROMES && r->function_id != CUQR_FN_GET_CORRECTIONS &&
        r->function_id != CUQR_FN_RESET_DECODER)
        return CQ_DROP_FUNCTION;
    size_t present = len - CUQR_HEADER_BYTES;
    r->payload_len = (uint32_t)(r->arg_len < present ? r->arg_len : present);
    if (r->arg_len > slot_size - CUQR_HEADER_BYTES) r->bad = CQ_BAD_OVERSIZED;
    else if (present < r->arg_len) r->bad = CQ_BAD_TRUNCATED;
    const uint8_t *pl = msg + CUQR_HEADER_BYTES;
    if (r->payload_len < 8) {
        r->bad = CQ_BAD_TRUNCATED;
        return 0;
    }
    r->has_id = 1, r->decoder_id = (int64_t)rd64(pl);
    if (r->bad) return 0; /* the header's fault is the one reported */
    if (r->function_id == CUQR_FN_ENQUEUE_SYNDROMES) {
        if (r->payload_len < CUQR_ENQUEUE_ARGS_BYTES) {
            r->bad = CQ_BAD_TRUNCATED;
        } else {
            int64_t n = (int64_t)rd64(pl + 24);
            if (n <= 0 || n > (int64_t)CQ_MAX_SYNDROME_BITS) r->bad = CQ_BAD_INVALID;
            else if (r->payload_len < CUQR_ENQUEUE_ARGS_BYTES + ((uint64_t)n + 7u) / 8u) r->bad = CQ_BAD_TRUNCATED;
        }
    } else if (r->function_id == CUQR_FN_GET_CORRECTIONS && r->payload_len < CUQR_GET_ARGS_BYTES) {
        r->bad = CQ_BAD_TRUNCATED;
    }
    return 0;
}

/* A malformed request counts as one unless it names a decoder the server does not have (answered
 * INVALID_DECODER): with no decoder_id at all it is always counted. */
static int counts_as_malformed(const cq_request *r, int known) { return r->bad && (!r->has_id || known); }

/* -- the session ---------------------------------------------------------------------------------- */

typedef struct {
    int64_t id;
    uint32_t nm, nd, no;
    uint32_t *d_ptr, *d_idx; /* NULL: the measurements are the detectors */
    qs_fn fn;
    void *ctx;
    uint8_t *meas;  /* this shot's measurements so far, one byte each */
    uint8_t *corr;  /* XOR-accumulated observable flips, one byte each */
    uint8_t *dets;  /* packed detection events handed to the decoder */
    uint8_t *reply; /* the decoder's reply */
    uint32_t accepted, reply_cap;
    int32_t state;
    uint64_t enqueues, gets, resets, decodes, errors;
    char last_error[160];
} cq_decoder;

struct cq_session {
    uint32_t slot_size, n;
    cq_decoder *dec;
    qb_bound *bound; /* what cq_session_init bound (NULL when built from Python) */
    cq_counts counts;
};

void cq_session_free(cq_session *s) {
    if (!s) return;
    for (uint32_t i = 0; s->dec && i < s->n; i++) {
        cq_decoder *d = &s->dec[i];
        free(d->d_ptr), free(d->d_idx), free(d->meas), free(d->corr), free(d->dets), free(d->reply);
    }
    qb_unbind_list(s->bound, s->n);
    free(s->dec);
    free(s);
}

/* u32 words from the spec: NULL when it is truncated */
static uint32_t *take_words(const uint8_t **p, const uint8_t *end, size_t n) {
    if ((size_t)(end - *p) / 4u < n) return NULL;
    uint32_t *out = malloc(n ? n * 4u : 4u);
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) out[i] = rd32(*p + 4u * i);
    *p += 4u * n;
    return out;
}

static int parse_decoder(const uint8_t **p, const uint8_t *end, cq_decoder *d, uint32_t i) {
    uint32_t *w = take_words(p, end, 6);
    if (!w) return set_err("decoder %u: the spec is truncated", i), -1;
    d->id = (int64_t)((uint64_t)w[0] | (uint64_t)w[1] << 32);
    d->nm = w[2], d->nd = w[3], d->no = w[4];
    uint32_t has_d = w[5];
    free(w);
    if (!d->nm || d->nm > CQ_MAX_BITS || d->nd > CQ_MAX_BITS || d->no > CQ_MAX_BITS || has_d > 1u)
        return set_err("decoder %lld: %u measurements, %u detectors, %u observables are out of range",
                       (long long)d->id, d->nm, d->nd, d->no), -1;
    if (!has_d && d->nd != d->nm)
        return set_err("decoder %lld: without D the %u detectors are the %u measurements", (long long)d->id, d->nd,
                       d->nm), -1;
    if (has_d) {
        if (!(d->d_ptr = take_words(p, end, (size_t)d->nd + 1u)))
            return set_err("decoder %lld: D is truncated", (long long)d->id), -1;
        uint32_t nnz = d->d_ptr[d->nd];
        if (d->d_ptr[0] || !(d->d_idx = take_words(p, end, nnz)))
            return set_err("decoder %lld: D is malformed or truncated", (long long)d->id), -1;
        for (uint32_t r = 0; r < d->nd; r++)
            if (d->d_ptr[r] > d->d_ptr[r + 1]) return set_err("decoder %lld: D's rows are malformed", (long long)d->id), -1;
        for (uint32_t k = 0; k < nnz; k++)
            if (d->d_idx[k] >= d->nm)
                return set_err("decoder %lld: D names measurement %u of %u", (long long)d->id, d->d_idx[k], d->nm), -1;
    }
    d->reply_cap = (d->no + 7u) / 8u + 8u; /* room to see a reply of the wrong width */
    d->meas = calloc(d->nm, 1), d->corr = calloc(d->no + 1u, 1);
    d->dets = calloc((d->nd + 7u) / 8u + 1u, 1), d->reply = calloc(d->reply_cap, 1);
    if (!d->meas || !d->corr || !d->dets || !d->reply) return set_err("out of memory"), -1;
    return 0;
}

/* cq_session_create, the session then owning `bound` (what cq_session_init bound; NULL: none) */
static void *session_new(const uint8_t *spec, size_t spec_len, const qs_fn *fns, void *const *ctxs, uint32_t n,
                         qb_bound *bound) {
    const uint8_t *p = spec, *end = spec + spec_len;
    if (!spec || spec_len < 16 || rd32(p) != CQ_MAGIC || rd32(p + 4) != CQ_VERSION)
        return set_err("not a CUQR session spec of version %u", CQ_VERSION), NULL;
    uint32_t slot = rd32(p + 8), count = rd32(p + 12);
    p += 16;
    if (slot < CUQR_HEADER_BYTES + CUQR_GET_ARGS_BYTES || slot > CUQR_MAX_SLOT_SIZE)
        return set_err("a %u-byte slot is not in %u..%u", slot, CUQR_HEADER_BYTES + CUQR_GET_ARGS_BYTES,
                       CUQR_MAX_SLOT_SIZE), NULL;
    if (!count || count > CUQR_MAX_DECODERS)
        return set_err("%u decoders; a session holds 1..%u", count, CUQR_MAX_DECODERS), NULL;
    if (count != n) return set_err("the spec has %u decoders but %u functions were given", count, n), NULL;
    cq_session *s = calloc(1, sizeof *s);
    if (!s || !(s->dec = calloc(count, sizeof *s->dec))) {
        free(s);
        return set_err("out of memory"), NULL;
    }
    s->slot_size = slot, s->n = count;
    for (uint32_t i = 0; i < count; i++) {
        if (parse_decoder(&p, end, &s->dec[i], i)) goto fail;
        for (uint32_t j = 0; j < i; j++)
            if (s->dec[j].id == s->dec[i].id) {
                set_err("decoder id %lld repeats", (long long)s->dec[i].id);
                goto fail;
            }
        if (!fns || !fns[i]) {
            set_err("no inner function for decoder %lld", (long long)s->dec[i].id);
            goto fail;
        }
        s->dec[i].fn = fns[i], s->dec[i].ctx = ctxs ? ctxs[i] : NULL;
    }
    if (p != end) {
        set_err("%zu bytes follow the spec", (size_t)(end - p));
        goto fail;
    }
    s->bound = bound;
    return s;
fail:
    cq_session_free(s);
    return NULL;
}

cq_session *cq_session_create(const uint8_t *spec, size_t spec_len, const qs_fn *fns, void *const *ctxs,
                              uint32_t n) {
    return session_new(spec, spec_len, fns, ctxs, n, NULL);
}

static const qb_owner_kind session_kind = {.has_blob = 1, .max_n = CUQR_MAX_DECODERS, .build = session_new,
                                            .set_err = set_err, .truncated = "the session's context is truncated",
                                            .list = "the session's decoders"};

int32_t cq_session_init(const void *params, size_t len, void **ctx) {
    return qb_owner_init(&session_kind, params, len, ctx);
}

void cq_session_fini(void *ctx) { cq_session_free(ctx); }

static void fail(cq_decoder *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->last_error, sizeof d->last_error, fmt, ap);
    va_end(ap);
    d->errors++;
    d->state = CQ_FAILED;
}

static void decode_shot(cq_decoder *d) {
    uint32_t nbytes = (d->nd + 7u) / 8u, want = (d->no + 7u) / 8u, got = 0;
    memset(d->dets, 0, nbytes);
    for (uint32_t r = 0; r < d->nd; r++) {
        uint8_t bit;
        if (d->d_ptr) { /* D m mod 2 */
            bit = 0;
            for (uint32_t k = d->d_ptr[r]; k < d->d_ptr[r + 1]; k++) bit ^= d->meas[d->d_idx[k]];
        } else {
            bit = d->meas[r];
        }
        d->dets[r >> 3] |= (uint8_t)(bit << (r & 7u));
    }
    int32_t rc = d->fn(d->ctx, 0, d->dets, nbytes, d->reply, d->reply_cap, &got);
    if (rc != 0) return fail(d, "decode failed: the decoder returned %d", rc);
    if (got != want) return fail(d, "decode failed: the decoder replied %u bytes, not %u", got, want);
    for (uint32_t o = 0; o < d->no; o++) d->corr[o] ^= (d->reply[o >> 3] >> (o & 7u)) & 1u;
    d->decodes++;
    d->accepted = 0;
    d->state = CQ_RESULT_READY;
}

static int32_t enqueue(cq_decoder *d, const uint8_t *pl) {
    d->enqueues++;
    int64_t mapping = (int64_t)rd64(pl + 16);
    uint32_t n = (uint32_t)rd64(pl + 24); /* cq_classify checked 1..2^20 and the bits' presence */
    if (mapping != 0) {
        /* theirs: only the identity mapping is honoured, and the shot is failed */
        fail(d, "syndrome_mapping_id %lld (only 0 is supported)", (long long)mapping);
        return CUQR_BAD_REQUEST;
    }
    if (d->state == CQ_FAILED) return CUQR_OK; /* the shot's history is unknowable: ignored until reset */
    d->state = CQ_COLLECTING;                  /* new input: the old result is no longer ready */
    if ((uint64_t)d->accepted + n > d->nm) {
        fail(d, "%u + %u measurements exceed the %u a shot has", d->accepted, n, d->nm);
        return CUQR_OK;
    }
    const uint8_t *bits = pl + CUQR_ENQUEUE_ARGS_BYTES;
    for (uint32_t i = 0; i < n; i++) d->meas[d->accepted + i] = (bits[i >> 3] >> (i & 7u)) & 1u;
    d->accepted += n;
    if (d->accepted == d->nm) decode_shot(d); /* a failure is latched; the reply is still OK */
    return CUQR_OK;
}

static int32_t get_corrections(cq_decoder *d, const uint8_t *pl, uint8_t *result, uint32_t cap, uint32_t *len) {
    d->gets++;
    int64_t size = (int64_t)rd64(pl + 8);
    int reset = pl[16] != 0;
    if (size <= 0) return d->errors++, CUQR_BAD_REQUEST;
    if (d->state == CQ_FAILED) return CUQR_INTERNAL_ERROR; /* sticky until reset_decoder */
    if (size != (int64_t)d->no) return d->errors++, CUQR_BAD_REQUEST;
    if (d->state != CQ_RESULT_READY) return CUQR_NOT_READY;
    uint32_t bytes = (d->no + 7u) / 8u;
    if (bytes > cap) return CUQR_INTERNAL_ERROR; /* truncating would hand back bits never written */
    memset(result, 0, bytes);
    for (uint32_t o = 0; o < d->no; o++) result[o >> 3] |= (uint8_t)(d->corr[o] << (o & 7u));
    *len = bytes;
    if (reset) { /* their clear_corrections, not a full reset */
        memset(d->corr, 0, d->no);
        d->state = CQ_COLLECTING;
    }
    return CUQR_OK;
}

static void reset_decoder(cq_decoder *d) {
    d->resets++;
    memset(d->meas, 0, d->nm);
    memset(d->corr, 0, d->no);
    d->accepted = 0;
    d->state = CQ_COLLECTING;
    d->last_error[0] = 0;
}

static cq_decoder *find(cq_session *s, const cq_request *r) {
    for (uint32_t i = 0; r->has_id && i < s->n; i++)
        if (s->dec[i].id == r->decoder_id) return &s->dec[i];
    return NULL;
}

static void write_response(uint8_t *out, uint32_t slot, int32_t status, uint32_t result_len, const cq_request *r) {
    memset(out + CUQR_HEADER_BYTES + result_len, 0, slot - CUQR_HEADER_BYTES - result_len);
    wr32(out, CUQR_RESPONSE_MAGIC);
    wr32(out + 4, (uint32_t)status);
    wr32(out + 8, result_len);
    wr32(out + 12, r->request_id);
    wr64(out + 16, r->ptp_timestamp);
}

int32_t cq_session_fn(void *ctx, uint32_t decoder_id, const uint8_t *in, uint32_t in_len, uint8_t *out,
                      uint32_t out_cap, uint32_t *out_len) {
    cq_session *s = ctx;
    (void)decoder_id;
    cq_request r;
    int32_t drop = cq_classify(in, in_len, s->slot_size, &r);
    if (drop) {
        s->counts.dropped[drop]++;
        return drop;
    }
    if (out_cap < s->slot_size) return CQ_ECAP;
    cq_decoder *d = find(s, &r);
    if (counts_as_malformed(&r, d != NULL)) s->counts.malformed[r.bad]++;
    const uint8_t *pl = in + CUQR_HEADER_BYTES;
    int32_t status;
    uint32_t result_len = 0;
    if (!r.has_id) {
        status = CUQR_BAD_REQUEST;
    } else if (!d) {
        status = CUQR_INVALID_DECODER;
    } else if (r.bad) {
        status = CUQR_BAD_REQUEST;
        if (r.function_id == CUQR_FN_ENQUEUE_SYNDROMES) { /* theirs: a malformed enqueue fails the shot */
            d->enqueues++;
            fail(d, "a malformed enqueue_syndromes");
        }
    } else if (r.function_id == CUQR_FN_ENQUEUE_SYNDROMES) {
        status = enqueue(d, pl);
    } else if (r.function_id == CUQR_FN_GET_CORRECTIONS) {
        status = get_corrections(d, pl, out + CUQR_HEADER_BYTES, s->slot_size - CUQR_HEADER_BYTES, &result_len);
    } else {
        reset_decoder(d);
        status = CUQR_OK;
    }
    write_response(out, s->slot_size, status, result_len, &r);
    *out_len = s->slot_size;
    return 0;
}

int32_t cq_session_info(const cq_session *s, uint32_t index, cq_decoder_info *info) {
    if (!s || index >= s->n) return -1;
    const cq_decoder *d = &s->dec[index];
    memset(info, 0, sizeof *info);
    info->id = d->id, info->state = d->state, info->accepted = d->accepted;
    info->enqueues = d->enqueues, info->gets = d->gets, info->resets = d->resets;
    info->decodes = d->decodes, info->errors = d->errors;
    memcpy(info->last_error, d->last_error, sizeof info->last_error);
    return 0;
}

void cq_session_counts(const cq_session *s, cq_counts *out) { *out = s->counts; }

/* -- the server's loop ------------------------------------------------------------------------- */

#define CQ_BURST 64u             /* datagrams read from one socket before the others get a turn */
#define CQ_DATAGRAM_BYTES 65536u /* any datagram whole, so one longer than a slot is seen as such */

struct cq_server {
    qb_core core;
    uint32_t rings, slot_size;
    void **sessions;
    int64_t *ids;
    struct pollfd *pfd;
    uint64_t *dispatched;
    uint8_t *msg, *reply;
    cq_counts counts;
    char first_error[256];
};

void cq_server_free(cq_server *s) {
    if (!s) return;
    qb_core_close(&s->core);
    free(s->sessions), free(s->ids), free(s->pfd), free(s->dispatched), free(s->msg), free(s->reply);
    free(s);
}

cq_server *cq_server_create(const char *libbackline, const char *const *keys, const int32_t *fds,
                            const int64_t *ids, uint32_t rings, uint32_t slot_size) {
    if (!rings || rings > CUQR_MAX_DECODERS || slot_size < CUQR_HEADER_BYTES + CUQR_GET_ARGS_BYTES ||
        slot_size > CUQR_MAX_SLOT_SIZE || !keys || !fds || !ids)
        return set_err("%u rings of %u-byte slots: out of range", rings, slot_size), NULL;
    cq_server *s = calloc(1, sizeof *s);
    if (!s) return set_err("out of memory"), NULL;
    s->rings = rings, s->slot_size = slot_size;
    s->sessions = calloc(rings, sizeof *s->sessions);
    s->ids = calloc(rings, sizeof *s->ids);
    s->pfd = calloc(rings, sizeof *s->pfd);
    s->dispatched = calloc(rings, sizeof *s->dispatched);
    s->msg = malloc(CQ_DATAGRAM_BYTES);
    s->reply = malloc(slot_size);
    if (!s->sessions || !s->ids || !s->pfd || !s->dispatched || !s->msg || !s->reply) {
        set_err("out of memory");
        goto fail;
    }
    char err[400];
    if (qb_core_open(&s->core, libbackline, err, sizeof err)) {
        set_err("%s", err);
        goto fail;
    }
    for (uint32_t i = 0; i < rings; i++) {
        if (!(s->sessions[i] = s->core.session_get(BL_CONTROLLER, keys[i]))) {
            set_err("no controller session '%s': %s", keys[i], s->core.last_error());
            goto fail;
        }
        s->ids[i] = ids[i];
        s->pfd[i].fd = fds[i], s->pfd[i].events = POLLIN;
    }
    return s;
fail:
    cq_server_free(s);
    return NULL;
}

static uint64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void note_error(cq_server *s, uint64_t *counter, const char *fmt, ...) {
    if (!s->counts.socket_errors && !s->counts.round_errors) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->first_error, sizeof s->first_error, fmt, ap);
        va_end(ap);
    }
    (*counter)++;
}

/* one datagram from ring i: classify, route, one round, the reply to its source */
static void serve_one(cq_server *s, uint32_t i, size_t len, const struct sockaddr_storage *peer, socklen_t plen) {
    cq_request r;
    int32_t drop = cq_classify(s->msg, len, s->slot_size, &r);
    if (drop) {
        s->counts.dropped[drop]++;
        return;
    }
    uint32_t target = i;
    int known = 0;
    for (uint32_t j = 0; r.has_id && j < s->rings; j++)
        if (s->ids[j] == r.decoder_id) target = j, known = 1;
    if (counts_as_malformed(&r, known)) s->counts.malformed[r.bad]++;
    uint32_t got = 0;
    int32_t rc = s->core.round(s->sessions[target], s->msg, (uint32_t)len, 0, s->reply, s->slot_size, &got);
    if (rc != 0 || got != s->slot_size) {
        /* the request was readable: answer it rather than leave the client to its deadline */
        note_error(s, &s->counts.round_errors, "decoder %lld's round failed: %s (status %d)",
                   (long long)s->ids[target], rc ? s->core.last_error() : "a reply of the wrong size", rc);
        write_response(s->reply, s->slot_size, CUQR_INTERNAL_ERROR, 0, &r);
    }
    s->dispatched[i]++;
    if (sendto(s->pfd[i].fd, s->reply, s->slot_size, MSG_DONTWAIT, (const struct sockaddr *)peer, plen) < 0)
        note_error(s, &s->counts.socket_errors, "reply on decoder %lld's socket: %s", (long long)s->ids[i],
                   strerror(errno));
}

int32_t cq_server_poll(cq_server *s, uint32_t timeout_ms) {
    if (timeout_ms > 1000u) timeout_ms = 1000u;
    uint64_t deadline = now_ms() + timeout_ms;
    for (;;) {
        uint64_t now = now_ms();
        if (now >= deadline) return 0;
        int ready = poll(s->pfd, s->rings, (int)(deadline - now));
        if (ready < 0) {
            if (errno == EINTR) return 0; /* a signal: Python looks at it */
            set_err("poll: %s", strerror(errno));
            return -1;
        }
        for (uint32_t i = 0; i < s->rings && ready > 0; i++) {
            if (!(s->pfd[i].revents & (POLLIN | POLLERR))) continue;
            for (uint32_t k = 0; k < CQ_BURST; k++) {
                struct sockaddr_storage peer;
                socklen_t plen = sizeof peer;
                ssize_t n = recvfrom(s->pfd[i].fd, s->msg, CQ_DATAGRAM_BYTES, MSG_DONTWAIT, (struct sockaddr *)&peer,
                                     &plen);
                if (n < 0) {
                    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
                    /* e.g. ICMP port unreachable reported for an earlier reply */
                    note_error(s, &s->counts.socket_errors, "receive on decoder %lld's socket: %s",
                               (long long)s->ids[i], strerror(errno));
                    continue;
                }
                serve_one(s, i, (size_t)n, &peer, plen);
                if (now_ms() >= deadline) return 0;
            }
        }
    }
}

int32_t cq_echo_poll(int32_t fd, uint32_t slot_size, uint32_t timeout_ms) {
    /* the server loop's system calls (poll, recvfrom, sendto of a slot) and nothing else */
    uint8_t msg[CQ_DATAGRAM_BYTES];
    if (slot_size > sizeof msg) slot_size = sizeof msg;
    if (timeout_ms > 1000u) timeout_ms = 1000u;
    uint64_t deadline = now_ms() + timeout_ms;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    for (uint64_t now = now_ms(); now < deadline; now = now_ms()) {
        int ready = poll(&pfd, 1, (int)(deadline - now));
        if (ready < 0 && errno != EINTR) {
            set_err("poll: %s", strerror(errno));
            return -1;
        }
        if (ready <= 0) continue;
        struct sockaddr_storage peer;
        socklen_t plen = sizeof peer;
        ssize_t n = recvfrom(fd, msg, sizeof msg, MSG_DONTWAIT, (struct sockaddr *)&peer, &plen);
        if (n >= 0) sendto(fd, msg, slot_size, MSG_DONTWAIT, (const struct sockaddr *)&peer, plen);
    }
    return 0;
}

void cq_server_counts(const cq_server *s, cq_counts *out) { *out = s->counts; }
uint64_t cq_server_dispatched(const cq_server *s, uint32_t ring) { return ring < s->rings ? s->dispatched[ring] : 0; }
const char *cq_server_first_error(const cq_server *s) { return s->first_error; }
