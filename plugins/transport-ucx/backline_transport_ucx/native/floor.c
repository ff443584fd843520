/*
 * The bare UCX floor of `backline bench --transport ucx` (floor.h): ucx_perftest's am_lat
 * method, through a worker set up as the ucx backend sets up its own (worker.h: the same
 * UCX_TLS choice, thread mode, endpoint error handling), and nothing else of the framework.
 *
 * Messages. One active message per direction per round, sent eagerly with ucp_am_send_nbx
 * as the backend sends a frame: an 8-byte header, the round counter (1, 2, 3, ...,
 * little-endian), and payload_bytes of data. The initiator's payload of round i is
 * bl_bench_rounds' echo payload (backline/pingpong.h). The receiving side's handler, which
 * runs inside ucp_worker_progress, copies the data into its rx buffer and then stores the
 * counter with release order -- what the backend's handler does with a frame. The responder
 * spins on its worker; when its rx counter reads the round it awaits it sends the same bytes
 * back (id PONG). The initiator's clock runs from just before its ucp_am_send_nbx to the
 * moment its rx counter reads the round; then it compares every payload byte.
 *
 * Handshake (out of band, one TCP connection the initiator dials and keeps open; its
 * closing ends the serve). Big-endian; each message is backline/oob.h's 12-byte header and
 * a fixed body:
 *
 *     header:  magic 0x424c5546 "BLUF" (4) | version 1 (2) | type (2) | body length (4)
 *     HELLO  (type 1, initiator -> responder, 2060): payload_bytes (4) | flags 0 (4) | address length (4) |
 *                                                    UCX worker address (2048, zero-padded)
 *     ACCEPT (type 2, responder -> initiator, 2216): status (4, signed) | address length (4) |
 *                                                    worker address (2048) | text (160, NUL-padded)
 *
 * The responder makes its endpoint to the initiator before it answers, so the first PING
 * finds it ready. The different magic makes a framework coprocessor on the port ("BLUX") a
 * clear error on either side, not a misread peer.
 *
 * Rounds, deadlines, the cadence and the responder's wait are backline/bench_floor.h's, as
 * for every floor: the dial, each handshake message and the responder's wait for an
 * initiator end after max(timeout_ms, BL_DEFAULT_CONNECT_TIMEOUT_MS), a reply after
 * timeout_ms; about once a millisecond a waiting side looks at its endpoint's error flag and
 * the TCP connection. Only the responder's wait for the next round has no deadline: it lasts
 * until the initiator sends, disconnects, or bl_ucx_floor_stop.
 */
#define _GNU_SOURCE
#include "floor.h"

#include "worker.h"

#include <backline/bench_floor.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { AM_PING = 1, AM_PONG = 2 };
#define FL_HELLO_BYTES (4u + 4u + UX_ADDRESS_RECORD_BYTES)
#define FL_ACCEPT_BYTES (4u + UX_ADDRESS_RECORD_BYTES + BL_FLOOR_TEXT_BYTES)
_Static_assert(FL_ACCEPT_BYTES <= BL_OOB_MAX_BODY, "the floor's largest message fits bl_oob_send_msg");
_Static_assert(BL_UCX_FLOOR_ERROR_BYTES == BL_FLOOR_ERROR_BYTES, "floor.h's error size is bench_floor.h's");
_Static_assert(BL_UCX_FLOOR_MAX_PAYLOAD_BYTES == BL_BENCH_MAX_PAYLOAD_BYTES, "the floor carries what the bench's does");
#define UX_MAGIC_TRANSPORT 0x424c5558u /* "BLUX", the framework's handshake */

static const bl_floor_protocol protocol = {BL_UCX_FLOOR_MAGIC, UX_MAGIC_TRANSPORT, BL_UCX_FLOOR_VERSION, "ucx",
                                          "backline-transport-ucx"};

struct bl_ucx_floor {
    bl_floor f;
    ux_worker w;
    ucp_ep_h ep;
    int dead; /* the endpoint failed (UCX's error callback) */
    char ep_error[256];
    size_t peer_len;
    uint8_t peer[UX_ADDRESS_BYTES]; /* the peer's worker address, for its endpoint */
    char transports[128];
    uint8_t *tx, *rx;       /* payload_bytes each */
    uint64_t tx_counter;    /* the header of the message in flight: valid until its reply */
    uint64_t rx_counter;    /* stored (release) by the handler once rx holds its message */
    char protocol_error[200];
    uint8_t hello[FL_HELLO_BYTES], accept_[FL_ACCEPT_BYTES]; /* the handshake's (large: not on a stack) */
};

static struct bl_ucx_floor *floor_new(void) {
    struct bl_ucx_floor *h = calloc(1, sizeof *h);
    if (h) h->f.fd = h->f.listen_fd = -1;
    return h;
}

static void floor_free(struct bl_ucx_floor *h) {
    if (!h) return;
    bl_floor_close_sockets(&h->f); /* first: the peer takes its closing as the end, not a failure */
    if (h->ep) ux_ep_close(&h->w, h->ep);
    ux_worker_close(&h->w);
    free(h->tx);
    free(h->rx);
    free(h);
}

/* The handler of both sides: the data into rx, then the counter, as the backend's on_frame. */
static ucs_status_t on_message(void *arg, const void *header, size_t header_length, void *data, size_t length,
                               const ucp_am_recv_param_t *param) {
    struct bl_ucx_floor *h = arg;
    uint64_t counter;
    if (header_length != sizeof counter || length != h->f.payload_bytes || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        snprintf(h->protocol_error, sizeof h->protocol_error, "the peer sent a message with a %zu-byte header and %zu "
                 "bytes of data where 8 and %u were due", header_length, length, h->f.payload_bytes);
        return UCS_OK;
    }
    memcpy(&counter, header, sizeof counter);
    memcpy(h->rx, data, length);
    __atomic_store_n(&h->rx_counter, counter, __ATOMIC_RELEASE);
    return UCS_OK;
}

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status) {
    struct bl_ucx_floor *h = arg;
    (void)ep;
    if (!h->dead)
        snprintf(h->ep_error, sizeof h->ep_error, "the UCX endpoint to the peer failed: %s", ucs_status_string(status));
    h->dead = 1;
}

/* ---- the data path (bench_floor.h's ops) ---- */

/* One message, the counter as its header and payload_bytes from `data`, eagerly as the
 * backend sends a frame (a request UCX returns is released at once: UCX finishes it, and
 * the buffers are not rewritten before the peer has answered). */
static inline int32_t send_message(struct bl_ucx_floor *h, unsigned id, const uint8_t *data, uint64_t counter_le) {
    h->tx_counter = counter_le;
    ucp_request_param_t p;
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_EAGER;
    ucs_status_ptr_t r = ucp_am_send_nbx(h->ep, id, &h->tx_counter, sizeof h->tx_counter, data, h->f.payload_bytes, &p);
    if (__builtin_expect(r == NULL, 1)) return BL_OK;
    if (UCS_PTR_IS_ERR(r))
        return BL_FLOOR_FAIL(&h->f, BL_EPEER, "ucp_am_send_nbx failed: %s", ucs_status_string(UCS_PTR_STATUS(r)));
    ucp_request_free(r);
    return BL_OK;
}

static int32_t op_send(void *ctx, uint64_t counter_le) {
    struct bl_ucx_floor *h = ctx;
    return send_message(h, AM_PING, h->tx, counter_le);
}

static int32_t op_reply(void *ctx, uint64_t counter_le) {
    struct bl_ucx_floor *h = ctx;
    return send_message(h, AM_PONG, h->rx, counter_le); /* the bytes as they came */
}

static int op_arrived(void *ctx, uint64_t counter_le) {
    struct bl_ucx_floor *h = ctx;
    ucp_worker_progress(h->w.worker); /* the handler runs in here */
    return __atomic_load_n(&h->rx_counter, __ATOMIC_ACQUIRE) == counter_le;
}

static int32_t op_check(void *ctx) {
    struct bl_ucx_floor *h = ctx;
    if (h->protocol_error[0]) return BL_FLOOR_FAIL(&h->f, BL_EPEER, "the floor's peer broke the protocol: %s", h->protocol_error);
    if (h->dead) return BL_FLOOR_FAIL(&h->f, BL_EPEER, "%s", h->ep_error);
    return BL_OK;
}

static const bl_floor_ops ops = {.send = op_send, .reply = op_reply, .arrived = op_arrived, .check = op_check};

/* The worker (its handler takes `id`). */
static int32_t open_worker(struct bl_ucx_floor *h, const char *tls, unsigned id, char *err, size_t n) {
    int i = ux_tls_find(tls ? tls : "auto");
    if (i < 0)
        return bl_oob_fail(err, n, BL_EINVAL, "tls=%.40s: choose shm (UCX shared memory), tcp, or auto (UCX's own choice)",
                           tls);
    return ux_worker_open(&h->w, i, (uint16_t)id, on_message, h, err, n);
}

/* The buffers for payload_bytes, and the endpoint to the peer's address. */
static int32_t make_path(struct bl_ucx_floor *h, uint32_t payload_bytes, char *err, size_t n) {
    h->f.payload_bytes = payload_bytes;
    free(h->tx); /* a responder's earlier initiator may have been refused after these */
    free(h->rx);
    if (h->ep) ux_ep_close(&h->w, h->ep);
    h->ep = NULL;
    h->tx = calloc(1, payload_bytes);
    h->rx = calloc(1, payload_bytes);
    if (!h->tx || !h->rx) return bl_oob_fail(err, n, BL_ENOMEM, "cannot allocate two buffers of %u bytes", payload_bytes);
    int32_t rc = ux_ep_open(&h->w, h->peer, on_ep_error, h, &h->ep, err, n);
    if (!rc) ux_ep_transports(h->ep, h->transports, sizeof h->transports);
    return rc;
}

/* ---- responder ---- */

BL_API int32_t bl_ucx_floor_listen(const char *host, int32_t port, const char *tls, int32_t cpu, uint64_t timeout_ms,
                                   bl_ucx_floor **out, char *err, size_t n) {
    if (!out) return bl_oob_fail(err, n, BL_EINVAL, "bl_ucx_floor_listen: out is NULL");
    *out = NULL;
    struct bl_ucx_floor *h = floor_new();
    if (!h) return bl_oob_fail(err, n, BL_ENOMEM, "out of memory");
    int32_t rc = bl_floor_init(&h->f, 1, host, port, cpu, timeout_ms, err, n);
    /* The worker now, so that a UCX that cannot start fails before the responder says ready. */
    if (rc || (rc = open_worker(h, tls, AM_PING, err, n)) || (rc = bl_floor_listen(&h->f, err, n))) {
        floor_free(h);
        return rc;
    }
    *out = h;
    return BL_OK;
}

BL_API int32_t bl_ucx_floor_port(const bl_ucx_floor *h) { return h ? h->f.port : -1; }

BL_API void bl_ucx_floor_stop(bl_ucx_floor *h) {
    if (h) bl_floor_request_stop(&h->f);
}

/* Handshake with one connection: 1 admitted, else refused (h->f.error says why). */
static int32_t admit(void *ctx, int fd) {
    struct bl_ucx_floor *h = ctx;
    char *err = h->f.error;
    size_t n = sizeof h->f.error;
    uint64_t deadline = bl_oob_now_ns() + h->f.connect_timeout_ns;
    uint8_t *hello = h->hello, *accept_ = h->accept_;
    memset(accept_, 0, FL_ACCEPT_BYTES);
    int32_t rc = bl_floor_recv_msg(&protocol, fd, BL_FLOOR_HELLO, hello, FL_HELLO_BYTES, deadline, "a peer", err, n);
    if (rc) return 0;
    uint32_t payload = bl_oob_get32(hello);
    if (bl_floor_check_payload(payload, err, n))
        return bl_floor_refuse(&protocol, &h->f, fd, BL_EINVAL, accept_, FL_ACCEPT_BYTES, deadline);
    if ((rc = ux_address_get(hello + 8, h->peer, &h->peer_len, "the initiator", err, n)) ||
        (rc = make_path(h, payload, err, n)) || (rc = ux_address_put(&h->w, accept_ + 4, err, n)))
        return bl_floor_refuse(&protocol, &h->f, fd, rc, accept_, FL_ACCEPT_BYTES, deadline);
    char why[256];
    if ((rc = bl_floor_send_msg(&protocol, fd, BL_FLOOR_ACCEPT, accept_, FL_ACCEPT_BYTES, deadline, why, sizeof why)))
        return BL_FLOOR_FAIL(&h->f, BL_EPEER, "the initiator went away during the handshake: %s", why);
    return 1;
}

BL_API int32_t bl_ucx_floor_serve(bl_ucx_floor *h, uint64_t wait_ms) {
    return h ? bl_floor_serve(&h->f, wait_ms, admit, &ops, h) : BL_EINVAL;
}

BL_API void bl_ucx_floor_free(bl_ucx_floor *h) { floor_free(h); }

/* ---- initiator ---- */

BL_API int32_t bl_ucx_floor_open(const char *host, int32_t port, const char *tls, uint32_t payload_bytes,
                                 uint64_t timeout_ms, bl_ucx_floor **out, char *err, size_t n) {
    if (!out) return bl_oob_fail(err, n, BL_EINVAL, "bl_ucx_floor_open: out is NULL");
    *out = NULL;
    struct bl_ucx_floor *h = floor_new();
    if (!h) return bl_oob_fail(err, n, BL_ENOMEM, "out of memory");
    uint8_t *hello = h->hello, *accept_ = h->accept_; /* zeroed with the handle */
    bl_oob_put32(hello, payload_bytes);
    int32_t rc = bl_floor_init(&h->f, 0, host, port, -1, timeout_ms, err, n);
    if (rc || (rc = bl_floor_check_payload(payload_bytes, err, n)) || (rc = open_worker(h, tls, AM_PONG, err, n)) ||
        (rc = ux_address_put(&h->w, hello + 8, err, n)))
        goto fail;
    uint64_t deadline = bl_oob_now_ns() + h->f.connect_timeout_ns;
    char who[300];
    snprintf(who, sizeof who, "the peer at %s:%d", host, port);
    if ((rc = bl_floor_dial(&h->f, "backline_transport_ucx.floor", deadline, err, n)) ||
        (rc = bl_floor_exchange(&protocol, &h->f, hello, FL_HELLO_BYTES, accept_, FL_ACCEPT_BYTES, deadline, err, n)) ||
        (rc = ux_address_get(accept_ + 4, h->peer, &h->peer_len, who, err, n)) ||
        (rc = make_path(h, payload_bytes, err, n)))
        goto fail;
    *out = h;
    return BL_OK;
fail:
    floor_free(h);
    return rc;
}

BL_API int32_t bl_ucx_floor_cadence(bl_ucx_floor *h, int32_t cadence, uint32_t lfsr, uint64_t gap_base_ns,
                                    uint64_t gap_span_mask) {
    return h ? bl_floor_set_cadence(&h->f, cadence, lfsr, gap_base_ns, gap_span_mask) : BL_EINVAL;
}

BL_API int32_t bl_ucx_floor_rounds(bl_ucx_floor *h, uint64_t first_round, uint64_t rounds, uint64_t *rtt_ns,
                                   bl_bench_result *res) {
    return bl_floor_rounds(h ? &h->f : NULL, &ops, h, h ? h->tx : NULL, h ? h->rx : NULL, first_round, rounds, rtt_ns,
                           res);
}

BL_API void bl_ucx_floor_close(bl_ucx_floor *h) { floor_free(h); }

/* ---- either side ---- */

BL_API double bl_ucx_floor_ns_per_tick(void) { return bl_floor_ns_per_tick(); }

BL_API const char *bl_ucx_floor_tls(const char *tls) {
    int i = tls ? ux_tls_find(tls) : -1;
    if (i < 0) return NULL;
    const char *list = ux_tls_ucx(i);
    return list ? list : "";
}

BL_API const char *bl_ucx_floor_error(const bl_ucx_floor *h) { return h ? h->f.error : "no floor handle"; }

BL_API void bl_ucx_floor_describe(const bl_ucx_floor *h, char *out, size_t n) {
    if (!out || !n) return;
    if (!h || !h->w.worker) {
        snprintf(out, n, "no worker");
        return;
    }
    snprintf(out, n, "tls=%s, UCX transports %s", ux_tls_name(h->w.tls), h->transports[0] ? h->transports : "?");
}
