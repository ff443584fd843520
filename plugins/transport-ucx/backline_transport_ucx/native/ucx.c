/*
 * ucx transport backend: frames as UCX active messages (libucp), over shared memory or TCP.
 *
 * Each side keeps both rings in its own memory. The core writes a frame into this side's
 * ring as it would for memcpy; the deliver hook sends it with one ucp_am_send_nbx whose
 * 8-byte header is the frame's sequence number and whose data is the rest of the frame.
 * The peer's receive handler, which runs inside ucp_worker_progress (called by the peer's
 * poll hook, which the core calls while it waits for a frame), copies the data into the same
 * slot of its own ring and only then stores the sequence number with release order; the
 * core's acquire load of it then sees the whole frame. A frame whose sequence number is not
 * the next one is a protocol error: nothing is duplicated or reordered silently.
 *
 * Round path: one ucp_am_send_nbx (eager; a request it returns is released at once, UCX
 * finishes it in the background: the slot it reads is not rewritten before the peer has
 * answered it) and ucp_worker_progress. Nothing of this backend's allocates, locks or makes a
 * system call there; UCX's TCP transport does its own socket calls.
 *
 * Control plane: the core's backline/remote.h, as for every networked transport (docs/ucx.md,
 * "Handshake"; magic "BLUX"): the coprocessor listens on its Endpoint (the keys `host` and
 * `port`), the controller dials, and the OFFER and CONNECT carry each side's UCX worker address
 * (length, then 2048 bytes). The connection stays open: its closing is how each side learns
 * that the other has gone, besides UCX's own endpoint error callback. A coprocessor's link to
 * a controller is only that controller's address until its poller thread (the only one that
 * drives the worker once it runs) takes it and makes the endpoint; the endpoint of the last
 * controller is closed there too. The worker and endpoint set-up is worker.c's.
 */
#define _GNU_SOURCE
#include "worker.h"

#include <backline/backline.h>
#include <backline/remote.h>

#include <ucp/api/ucp.h>

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BL_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define BL_LIKELY(x) __builtin_expect(!!(x), 1)

/* The handshake's peer part (docs/ucx.md): a worker address record (worker.h). */
#define PEER_BYTES UX_ADDRESS_RECORD_BYTES

/* A frame on the wire: its header up to `fn_status` (seq, len, decoder_id, status, flags) as the
 * active message's header, its payload as the data; `fn_status` is not sent. */
#define WIRE_HEADER_BYTES offsetof(bl_frame_header, fn_status)
_Static_assert(offsetof(bl_frame_header, fn_status) == 24 && BL_FRAME_HEADER_BYTES == 32, "the frame header's layout");

/* Active message ids: requests go to the coprocessor, replies to the controller. */
enum { AM_REQUEST = 1, AM_REPLY = 2 };

static const char *const config_keys[] = {BL_REMOTE_CONFIG_KEYS, "tls", NULL};

/* One endpoint to one peer. Used by one thread at a time: the controller's round thread, or
 * the coprocessor's poller once it has taken it (current_link). */
struct link {
    ucp_ep_h ep;
    int dead; /* the endpoint failed, or a send did */
    char error[256];
    size_t addr_len;
    uint8_t addr[UX_ADDRESS_BYTES]; /* the peer's worker address, for its endpoint */
};

struct ux {
    bl_remote r; /* the control plane: configuration, handshake, the coprocessor's threads */
    int tls;     /* UX_TLS_* */
    ux_worker w;
    uint8_t *mem;      /* the request ring, then the reply ring */
    uint64_t received; /* frames published into this side's receive ring */
    char protocol_error[200];
    struct link *link;    /* the controller's one link; the coprocessor's current controller's (poller) */
    char transports[256]; /* what UCX chose for the current endpoint */
};

static uint8_t *ring(const struct ux *m, int which) {
    return m->mem + (size_t)which * m->r.slots * m->r.slot_bytes;
}

/* ---- the data path ---- */

/* Receive handler of both sides: the frame less its sequence number goes into its slot, then
 * the sequence number is published. */
static ucs_status_t on_frame(void *arg, const void *header, size_t header_length, void *data, size_t length,
                             const ucp_am_recv_param_t *param) {
    struct ux *m = arg;
    int which = m->r.role == BL_CONTROLLER ? 1 : 0;
    bl_frame_header h;
    /* Eager data is in `data` for the callback's duration; a rendezvous message would need a
     * receive of its own, and a frame is never sent so. */
    if (BL_UNLIKELY(header_length != WIRE_HEADER_BYTES || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ||
                    length > m->r.slot_bytes - BL_FRAME_HEADER_BYTES)) {
        snprintf(m->protocol_error, sizeof m->protocol_error,
                 "the peer broke the protocol: a message with a %zu-byte header and %zu bytes of data%s", header_length,
                 length, param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV ? " by rendezvous" : "");
        return UCS_OK;
    }
    memcpy(&h, header, WIRE_HEADER_BYTES);
    if (BL_UNLIKELY(h.seq != m->received + 1 || h.len != length)) {
        if (!m->protocol_error[0])
            snprintf(m->protocol_error, sizeof m->protocol_error,
                     "the peer broke the protocol: frame %llu (%u payload bytes, %zu sent) arrived where %llu was due",
                     (unsigned long long)h.seq, h.len, length, (unsigned long long)(m->received + 1));
        return UCS_OK;
    }
    uint8_t *slot = ring(m, which) + (size_t)((h.seq - 1) & (m->r.slots - 1)) * m->r.slot_bytes;
    memcpy(slot + 8, (const uint8_t *)header + 8, WIRE_HEADER_BYTES - 8);
    memcpy(slot + BL_FRAME_HEADER_BYTES, data, length);
    __atomic_store_n((uint64_t *)slot, h.seq, __ATOMIC_RELEASE);
    m->received = h.seq;
    return UCS_OK;
}

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status) {
    struct link *l = arg;
    (void)ep;
    if (!l->dead)
        snprintf(l->error, sizeof l->error, "the UCX endpoint to the peer failed: %s", ucs_status_string(status));
    l->dead = 1;
}

/* Send the frame in `slot` of ring `which` to the same slot of the peer's. */
static int32_t send_frame(struct ux *m, struct link *l, int which, uint32_t slot) {
    if (BL_UNLIKELY(l->dead)) return BL_EPEER;
    uint8_t *frame = ring(m, which) + (size_t)slot * m->r.slot_bytes;
    size_t len = ((const bl_frame_header *)frame)->len;
    ucp_request_param_t p;
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_EAGER;
    ucs_status_ptr_t r = ucp_am_send_nbx(l->ep, which == 0 ? AM_REQUEST : AM_REPLY, frame, WIRE_HEADER_BYTES,
                                     frame + BL_FRAME_HEADER_BYTES, len, &p);
    if (BL_LIKELY(r == NULL)) return BL_OK;
    if (BL_UNLIKELY(UCS_PTR_IS_ERR(r))) {
        snprintf(l->error, sizeof l->error, "ucp_am_send_nbx failed: %s", ucs_status_string(UCS_PTR_STATUS(r)));
        l->dead = 1;
        return BL_EPEER;
    }
    ucp_request_free(r); /* UCX completes it; the slot is not rewritten before the peer answers it */
    return BL_OK;
}

/* One pass of the worker, not a loop until it is idle: the core calls poll again as long as
 * it waits, and a second pass after a frame came would only delay seeing it (~30 ns each). */
static inline void progress(struct ux *m) { ucp_worker_progress(m->w.worker); }

/* ---- links ---- */

/* Make the endpoint to the link's peer (on the thread that drives the worker). */
static int32_t link_connect(struct ux *m, struct link *l, char *err, size_t n) {
    int32_t rc = ux_ep_open(&m->w, l->addr, on_ep_error, l, &l->ep, err, n);
    if (!rc) ux_ep_transports(l->ep, m->transports, sizeof m->transports);
    return rc;
}

static void link_free(struct ux *m, struct link *l) {
    if (!l) return;
    ux_ep_close(&m->w, l->ep);
    free(l);
}

/* ---- the coprocessor's links (remote.c calls these on its acceptor thread) ---- */

/* A link for the next controller; this worker's address goes into the OFFER. */
static void *ucx_link_create(void *arg, uint8_t *peer, int32_t *rc, char *err, size_t n) {
    struct ux *m = arg;
    if ((*rc = ux_address_put(&m->w, peer, err, n))) return NULL;
    struct link *l = calloc(1, sizeof *l);
    if (!l) *rc = bl_oob_fail(err, n, BL_ENOMEM, "the coprocessor is out of memory");
    return l;
}

/* Only the controller's address is kept: the poller, which drives the worker, makes its endpoint. */
static int32_t ucx_link_accept(void *arg, void *link, const uint8_t *peer, char *err, size_t n) {
    (void)arg;
    struct link *l = link;
    return ux_address_get(peer, l->addr, &l->addr_len, "the controller", err, n);
}

static void ucx_link_destroy(void *arg, void *link) {
    (void)arg;
    free(link); /* it never reached the poller: it has no endpoint */
}

static const bl_remote_links ucx_links = {ucx_link_create, ucx_link_accept, ucx_link_destroy};
static const bl_remote_protocol protocol = {
    .transport = "ucx",
    .magic = 0x424c5558u, /* "BLUX" */
    .version = 1,
    .peer_bytes = PEER_BYTES,
    .accepting = "take this controller's UCX worker address",
};

/* ---- open: configuration only ---- */

static int32_t ux_open(const bl_open_args *a, void **impl, char *err, size_t n) {
    struct ux *m = calloc(1, sizeof *m);
    if (!m) return bl_oob_fail(err, n, BL_ENOMEM, "out of memory");
    int32_t rc = bl_remote_open(&m->r, &protocol, &ucx_links, m, a, err, n);
    if (rc) goto fail;
    const char *tls = a->host->config_str(a->session, "tls");
    m->tls = tls ? ux_tls_find(tls) : UX_TLS_AUTO;
    if (m->tls < 0) {
        rc = bl_oob_fail(err, n, BL_EINVAL, "tls=%.40s: choose shm (UCX shared memory), tcp, or auto (UCX's own "
                         "choice)", tls);
        goto fail;
    }
    *impl = m;
    return BL_OK;
fail:
    free(m);
    return rc;
}

/* The UCX context and worker, with the receive handler of this side's role. */
static int32_t open_worker(struct ux *m, char *err, size_t n) {
    int32_t rc = m->w.address ? BL_OK
                              : ux_worker_open(&m->w, m->tls, m->r.role == BL_CONTROLLER ? AM_REPLY : AM_REQUEST,
                                               on_frame, m, err, n);
    if (rc) return rc;
    uint8_t record[UX_ADDRESS_RECORD_BYTES];
    return ux_address_put(&m->w, record, err, n); /* whether its address fits the handshake */
}

/* ---- controller ---- */

static int32_t ctl_connect(struct ux *m, uint64_t deadline, char *err, size_t n) {
    int32_t rc = open_worker(m, err, n);
    if (rc) return rc;
    uint8_t peer[PEER_BYTES];
    if ((rc = bl_remote_dial(&m->r, deadline, peer, err, n))) return rc;
    if (!m->link && !(m->link = calloc(1, sizeof *m->link))) return bl_oob_fail(err, n, BL_ENOMEM, "out of memory");
    char who[300];
    snprintf(who, sizeof who, "the coprocessor at %s:%d", m->r.host_name, m->r.port);
    return ux_address_get(peer, m->link->addr, &m->link->addr_len, who, err, n);
}

static int32_t ctl_exchange(struct ux *m, uint64_t deadline, char *err, size_t n) {
    int32_t rc;
    if (!m->link->ep && (rc = link_connect(m, m->link, err, n))) return rc;
    uint8_t peer[PEER_BYTES];
    if ((rc = ux_address_put(&m->w, peer, err, n))) return rc;
    return bl_remote_connect(&m->r, peer, deadline, err, n);
}

static int32_t fail_round(struct ux *m, struct link *l) {
    m->r.host->error_text(m->protocol_error[0] ? m->protocol_error : l->error);
    return BL_EPEER;
}

static int32_t ctl_deliver(void *impl, uint64_t seq, uint32_t slot) {
    (void)seq;
    struct ux *m = impl;
    if (BL_UNLIKELY(m->protocol_error[0])) return fail_round(m, m->link);
    int32_t rc = send_frame(m, m->link, 0, slot);
    if (BL_UNLIKELY(rc)) return fail_round(m, m->link);
    return BL_OK;
}

static void ctl_poll(void *impl) { progress(impl); }

static int32_t ctl_alive(void *impl) {
    struct ux *m = impl;
    progress(m);
    if (m->link->dead || m->protocol_error[0]) {
        fail_round(m, m->link);
        return 0;
    }
    return bl_remote_alive(&m->r);
}

/* ---- coprocessor: the poller's side ---- */

/* The link of the current controller. A new one, admitted by the acceptor, is taken here
 * (on the poller, the worker's thread): its endpoint is made and the last one's closed. */
static struct link *current_link(struct ux *m) {
    struct link *next = bl_remote_take(&m->r);
    if (BL_UNLIKELY(next != NULL)) {
        link_free(m, m->link);
        m->link = next;
        char err[256];
        if (link_connect(m, next, err, sizeof err)) {
            snprintf(next->error, sizeof next->error, "%s", err);
            next->dead = 1;
            bl_remote_note(&m->r, "%s", err);
        }
    }
    return m->link;
}

static void cop_poll(void *impl) {
    struct ux *m = impl;
    current_link(m);
    progress(m);
    if (BL_UNLIKELY(m->protocol_error[0])) {
        bl_remote_note(&m->r, "%s", m->protocol_error);
        m->protocol_error[0] = 0;
    }
}

static int32_t cop_deliver(void *impl, uint64_t seq, uint32_t slot) {
    (void)seq;
    struct ux *m = impl;
    struct link *l = current_link(m);
    if (BL_UNLIKELY(!l)) return BL_EPEER;
    return send_frame(m, l, 1, slot);
}

/* ---- hooks ---- */

static int32_t ux_connect(void *impl, uint64_t deadline, char *err, size_t n) {
    struct ux *m = impl;
    if (m->r.role == BL_CONTROLLER) return ctl_connect(m, deadline, err, n);
    int32_t rc = open_worker(m, err, n);
    return rc ? rc : bl_remote_listen(&m->r, err, n);
}

static int32_t ux_alloc_memory(void *impl, char *err, size_t n) {
    struct ux *m = impl;
    if (m->mem) return BL_OK;
    size_t bytes = 2 * (size_t)m->r.slots * m->r.slot_bytes;
    m->mem = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!m->mem) return bl_oob_fail(err, n, BL_ENOMEM, "cannot allocate %zu bytes of rings", bytes);
    memset(m->mem, 0, bytes);
    return BL_OK;
}

static int32_t ux_exchange_keys(void *impl, uint64_t deadline, char *err, size_t n) {
    struct ux *m = impl;
    /* A coprocessor exchanges with each controller as it comes, on its acceptor thread. */
    return m->r.role == BL_CONTROLLER ? ctl_exchange(m, deadline, err, n) : BL_OK;
}

static const bl_remote_hooks hooks = {
    .controller_deliver = ctl_deliver,
    .controller_poll = ctl_poll,
    .controller_alive = ctl_alive,
    .coprocessor_deliver = cop_deliver,
    .coprocessor_poll = cop_poll,
};

static int32_t ux_establish(void *impl, bl_channel *ch, uint64_t deadline, char *err, size_t n) {
    (void)deadline;
    (void)err;
    (void)n;
    struct ux *m = impl;
    m->received = bl_remote_establish(&m->r, ch, ring(m, 0), ring(m, 1), &hooks, m); /* replies come after it */
    if (m->r.role == BL_CONTROLLER && m->transports[0]) bl_remote_note(&m->r, "UCX transports: %s", m->transports);
    return BL_OK;
}

static int32_t ux_start(void *impl, char *err, size_t n) {
    struct ux *m = impl;
    return bl_remote_start(&m->r, err, n);
}

static int32_t ux_stop(void *impl, char *err, size_t n) {
    (void)err;
    (void)n;
    struct ux *m = impl;
    bl_remote_stop(&m->r);
    return BL_OK;
}

static void ux_close(void *impl) {
    struct ux *m = impl;
    bl_remote_close(&m->r); /* its threads are gone: the worker and its endpoints are this thread's */
    link_free(m, m->link);
    ux_worker_close(&m->w);
    free(m->mem);
    free(m);
}

static const bl_backend backend = {
    .abi_version = BACKLINE_ABI_VERSION,
    .name = "ucx",
    .config_keys = config_keys,
    .open = ux_open,
    .connect = ux_connect,
    .alloc_memory = ux_alloc_memory,
    .exchange_keys = ux_exchange_keys,
    .establish_channel = ux_establish,
    .start = ux_start,
    .stop = ux_stop,
    .close = ux_close,
};

BL_API const bl_backend *backline_transport_backend_v1(void) { return &backend; }
