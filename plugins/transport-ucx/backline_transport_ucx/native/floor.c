/*
 * The bare UCX floor of `backline bench --transport ucx` (floor.h): ucx_perftest's am_lat
 * method, through a worker set up as the ucx backend sets up its own (worker.h: the same
 * UCX_TLS choice, thread mode, endpoint error handling), and nothing else of the framework.
 *
 * Messages. One active message per direction per round, sent eagerly with ucp_am_send_nbx
 * as the backend sends a frame: an 8-byte header, the round counter (1, 2, 3, ...,
 * little-endian), and payload_bytes of data. The initiator's payload of round i is
 * bl_bench_rounds' echo payload (backline/sdk/pingpong.h). The receiving side's handler, which
 * runs inside ucp_worker_progress, copies the data into its rx buffer and then stores the
 * counter with release order -- what the backend's handler does with a frame. The responder
 * spins on its worker; when its rx counter reads the round it awaits it sends the same bytes
 * back (id PONG). The initiator's clock runs from just before its ucp_am_send_nbx to the
 * moment its rx counter reads the round; then it compares every payload byte.
 *
 * Handshake (backline/sdk/bench_floor.h's, out of band, one TCP connection the initiator dials
 * and keeps open; its closing ends the serve). Big-endian; each message is backline/sdk/oob.h's
 * 12-byte header and a fixed body:
 *
 *     header:  magic 0x424c5546 "BLUF" (4) | version 1 (2) | type (2) | body length (4)
 *     HELLO  (type 1, initiator -> responder, 2060): payload_bytes (4) | flags 0 (4) | address length (4) |
 *                                                    UCX worker address (2048, zero-padded)
 *     ACCEPT (type 2, responder -> initiator, 2216): status (4, signed) | address length (4) |
 *                                                    worker address (2048) | text (160, NUL-padded)
 *
 * The responder makes its endpoint to the initiator before it answers, so the first PING
 * finds it ready. With tls=auto a peer on this host is reached over shared memory, as the
 * backend reaches one (worker.h, ux_ep_open). The different magic makes a framework coprocessor on the port ("BLUX") a
 * clear error on either side, not a misread peer.
 *
 * Listen, serve, open, rounds, deadlines, the cadence and the responder's wait are
 * backline/sdk/bench_floor.h's, as for every floor (this file is the record, `transport`): the dial, each handshake message and the responder's wait for an
 * initiator end after max(timeout_ms, BL_DEFAULT_CONNECT_TIMEOUT_MS), a reply after
 * timeout_ms; about once a millisecond a waiting side looks at its endpoint's error flag and
 * the TCP connection. Only the responder's wait for the next round has no deadline: it lasts
 * until the initiator sends, disconnects, or bl_ucx_floor_stop.
 */
#define _GNU_SOURCE
#include "floor.h"

#include "worker.h"

#include <backline/sdk/bench_floor.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { AM_PING = 1, AM_PONG = 2 };
_Static_assert(BL_UCX_FLOOR_ERROR_BYTES == BL_FLOOR_ERROR_BYTES, "floor.h's error size is bench_floor.h's");
_Static_assert(BL_UCX_FLOOR_MAX_PAYLOAD_BYTES == BL_BENCH_MAX_PAYLOAD_BYTES, "the floor carries what the bench's does");

struct bl_ucx_floor {
    bl_floor f; /* first: bench_floor.h's */
    ux_worker w;
    ucp_ep_h ep;
    int dead; /* the endpoint failed (UCX's error callback) */
    char ep_error[256];
    char transports[128];
    uint64_t tx_counter; /* the header of the message in flight: valid until its reply */
    uint64_t rx_counter; /* stored (release) by the handler once rx holds its message */
    char protocol_error[200];
};

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
    memcpy(h->f.rx, data, length);
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

/* ---- the data path ---- */

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
    return send_message(h, AM_PING, h->f.tx, counter_le);
}

static int32_t op_reply(void *ctx, uint64_t counter_le) {
    struct bl_ucx_floor *h = ctx;
    return send_message(h, AM_PONG, h->f.rx, counter_le); /* the bytes as they came */
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

/* ---- the record's set-up ---- */

/* The worker on `tls` (args), its handler taking the messages of this side's role. */
static int32_t fl_setup(void *handle, const void *args, char *err, size_t n) {
    struct bl_ucx_floor *h = handle;
    const char *tls = args ? args : "auto";
    int i = ux_tls_find(tls);
    if (i < 0)
        return bl_oob_fail(err, n, BL_EINVAL, "tls=%.40s: choose shm (UCX shared memory), tcp, or auto (shared memory "
                           "to a peer on this host, else UCX's own choice)", tls);
    return ux_worker_open(&h->w, i, h->f.responder ? AM_PING : AM_PONG, on_message, h, err, n);
}

/* The buffers for payload_bytes (a responder's earlier initiator may have been refused after
 * these: they are made again, and its endpoint closed). */
static int32_t fl_path(void *handle, uint32_t payload_bytes, char *err, size_t n) {
    struct bl_ucx_floor *h = handle;
    free(h->f.tx);
    free(h->f.rx);
    if (h->ep) ux_ep_close(&h->w, h->ep);
    h->ep = NULL;
    h->f.tx = calloc(1, payload_bytes);
    h->f.rx = calloc(1, payload_bytes);
    if (!h->f.tx || !h->f.rx) return bl_oob_fail(err, n, BL_ENOMEM, "cannot allocate two buffers of %u bytes", payload_bytes);
    h->f.payload_bytes = payload_bytes; /* the handler checks what comes against it */
    return BL_OK;
}

static int32_t fl_record(void *handle, uint8_t *out, char *err, size_t n) {
    struct bl_ucx_floor *h = handle;
    return ux_address_put(&h->w, out, err, n);
}

/* The endpoint to the peer's worker address. */
static int32_t fl_aim(void *handle, const uint8_t *record, int same_host, const char *who, char *err, size_t n) {
    struct bl_ucx_floor *h = handle;
    uint8_t peer[UX_ADDRESS_BYTES];
    size_t len;
    int32_t rc = ux_address_get(&h->w, record, same_host, peer, &len, who, err, n);
    if (rc || (rc = ux_ep_open(&h->w, peer, same_host, on_ep_error, h, &h->ep, err, n))) return rc;
    ux_ep_transports(h->ep, h->transports, sizeof h->transports);
    return BL_OK;
}

static void fl_release(void *handle) {
    struct bl_ucx_floor *h = handle;
    if (h->ep) ux_ep_close(&h->w, h->ep);
    ux_worker_close(&h->w);
    free(h->f.tx);
    free(h->f.rx);
}

static const bl_floor_transport transport = {
    .protocol = {BL_UCX_FLOOR_MAGIC, UX_MAGIC_TRANSPORT, BL_UCX_FLOOR_VERSION, "ucx", "backline-transport-ucx"},
    .module = "backline_transport_ucx.floor",
    .record_bytes = UX_ADDRESS_RECORD_BYTES,
    .handle_bytes = sizeof(struct bl_ucx_floor),
    .ops = {.send = op_send, .reply = op_reply, .arrived = op_arrived, .check = op_check},
    .setup = fl_setup,
    .path = fl_path,
    .record = fl_record,
    .aim = fl_aim,
    .release = fl_release,
};

BL_FLOOR_EXPORTS(bl_ucx_floor, transport)

/* The worker now, so that a UCX that cannot start fails before the responder says ready. */
BL_API int32_t bl_ucx_floor_listen(const char *host, int32_t port, const char *tls, int32_t cpu, uint64_t timeout_ms,
                                   bl_ucx_floor **out, char *err, size_t n) {
    return bl_floor_responder(&transport, host, port, cpu, timeout_ms, tls, (void **)out, err, n);
}

BL_API int32_t bl_ucx_floor_open(const char *host, int32_t port, const char *tls, uint32_t payload_bytes,
                                 uint64_t timeout_ms, bl_ucx_floor **out, char *err, size_t n) {
    return bl_floor_open(&transport, host, port, payload_bytes, timeout_ms, tls, (void **)out, err, n);
}

/* ---- either side ---- */

BL_API const char *bl_ucx_floor_tls(const char *tls) {
    int i = tls ? ux_tls_find(tls) : -1;
    if (i < 0) return NULL;
    const char *list = ux_tls_ucx(i);
    return list ? list : "";
}

BL_API void bl_ucx_floor_describe(const bl_ucx_floor *h, char *out, size_t n) {
    if (!out || !n) return;
    if (!h || !h->w.worker) {
        snprintf(out, n, "no worker");
        return;
    }
    snprintf(out, n, "tls=%s, UCX transports %s", ux_tls_name(h->w.tls), h->transports[0] ? h->transports : "?");
}
