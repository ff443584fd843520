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
 * Control plane and lifecycle: the core's backline/sdk/remote.h, as for every networked
 * transport, made from this file's record (`transport`, at the end; docs/ucx.md, "Handshake";
 * magic "BLUX"): the coprocessor listens on its Endpoint (the keys `host` and `port`), the
 * controller dials, and the OFFER and CONNECT carry each side's UCX worker address (length,
 * then 2048 bytes). The connection stays open: its closing is how each side learns that the
 * other has gone, over every UCX transport (shared memory has no failure reports of its own),
 * besides UCX's endpoint error callback where there is one. A link to a peer is its address
 * until link_start, on the thread that drives the worker (the controller's; the coprocessor's
 * poller, the only one once it runs), makes the endpoint; the endpoint of the last controller
 * is closed there too. The worker and endpoint set-up is worker.c's; with tls=auto a peer on
 * this host is reached over shared memory (worker.h, ux_ep_open).
 */
#define _GNU_SOURCE
#include "worker.h"

#include <backline/backline.h>
#include <backline/sdk/remote.h>

#include <ucp/api/ucp.h>

#include <dlfcn.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BL_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define BL_LIKELY(x) __builtin_expect(!!(x), 1)

/* A frame on the wire: its header up to `fn_status` (seq, len, decoder_id, status, flags) as the
 * active message's header, its payload as the data; `fn_status` is not sent. */
#define WIRE_HEADER_BYTES offsetof(bl_frame_header, fn_status)
_Static_assert(offsetof(bl_frame_header, fn_status) == 24 && BL_FRAME_HEADER_BYTES == 32, "the frame header's layout");

/* Active message ids: requests go to the coprocessor, replies to the controller. */
enum { AM_REQUEST = 1, AM_REPLY = 2 };

static const char *const config_keys[] = {BL_REMOTE_CONFIG_KEYS, "tls", NULL};

/* One endpoint to one peer. Used by one thread at a time: the controller's round thread, or
 * the coprocessor's poller once it has taken it. */
struct link {
    ucp_ep_h ep;
    int dead; /* the endpoint failed, or a send did */
    int same_host;
    char error[256];
    size_t addr_len;
    uint8_t addr[UX_ADDRESS_BYTES]; /* the peer's worker address, for its endpoint */
};

struct ux {
    bl_remote *r; /* the core's: role, geometry, rings, the count received */
    int tls;      /* UX_TLS_* */
    ux_worker w;
    char protocol_error[200];
    char transports[256]; /* what UCX chose for the current endpoint */
};

/* ---- the data path ---- */

/* Receive handler of both sides: the frame less its sequence number goes into its slot, then
 * the sequence number is published. */
static ucs_status_t on_frame(void *arg, const void *header, size_t header_length, void *data, size_t length,
                             const ucp_am_recv_param_t *param) {
    struct ux *m = arg;
    bl_remote *r = m->r;
    bl_frame_header h;
    /* Eager data is in `data` for the callback's duration; a rendezvous message would need a
     * receive of its own, and a frame is never sent so. */
    if (BL_UNLIKELY(header_length != WIRE_HEADER_BYTES || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ||
                    length > r->slot_bytes - BL_FRAME_HEADER_BYTES)) {
        snprintf(m->protocol_error, sizeof m->protocol_error,
                 "the peer broke the protocol: a message with a %zu-byte header and %zu bytes of data%s", header_length,
                 length, param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV ? " by rendezvous" : "");
        return UCS_OK;
    }
    memcpy(&h, header, WIRE_HEADER_BYTES);
    if (BL_UNLIKELY(h.seq != r->received + 1 || h.len != length)) {
        if (!m->protocol_error[0])
            snprintf(m->protocol_error, sizeof m->protocol_error,
                     "the peer broke the protocol: frame %llu (%u payload bytes, %zu sent) arrived where %llu was due",
                     (unsigned long long)h.seq, h.len, length, (unsigned long long)(r->received + 1));
        return UCS_OK;
    }
    uint8_t *ring = r->rings[r->role == BL_CONTROLLER ? 1 : 0];
    uint8_t *slot = ring + (size_t)((h.seq - 1) & (r->slots - 1)) * r->slot_bytes;
    memcpy(slot + 8, (const uint8_t *)header + 8, WIRE_HEADER_BYTES - 8);
    memcpy(slot + BL_FRAME_HEADER_BYTES, data, length);
    __atomic_store_n((uint64_t *)slot, h.seq, __ATOMIC_RELEASE);
    r->received = h.seq;
    return UCS_OK;
}

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status) {
    struct link *l = arg;
    (void)ep;
    if (!l->dead)
        snprintf(l->error, sizeof l->error, "the UCX endpoint to the peer failed: %s", ucs_status_string(status));
    l->dead = 1;
}

/* Send the frame at `frame` to the same slot of the peer's ring. */
static int32_t ux_deliver(void *state, void *link, const uint8_t *frame, uint64_t seq, uint32_t slot) {
    (void)seq;
    (void)slot;
    struct ux *m = state;
    struct link *l = link;
    if (BL_UNLIKELY(l->dead) || BL_UNLIKELY(m->protocol_error[0] && m->r->role == BL_CONTROLLER)) return BL_EPEER;
    size_t len = ((const bl_frame_header *)frame)->len;
    ucp_request_param_t p;
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_EAGER;
    ucs_status_ptr_t r = ucp_am_send_nbx(l->ep, m->r->role == BL_CONTROLLER ? AM_REQUEST : AM_REPLY, frame,
                                         WIRE_HEADER_BYTES, frame + BL_FRAME_HEADER_BYTES, len, &p);
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
static void ux_poll(void *state, void *link) {
    (void)link;
    struct ux *m = state;
    ucp_worker_progress(m->w.worker);
    if (BL_UNLIKELY(m->protocol_error[0]) && m->r->role == BL_COPROCESSOR) {
        bl_remote_note(m->r, "%s", m->protocol_error); /* the controller's round fails on its deadline */
        m->protocol_error[0] = 0;
    }
}

static int ux_alive(void *state, void *link) {
    struct ux *m = state;
    ucp_worker_progress(m->w.worker);
    return !((struct link *)link)->dead && !m->protocol_error[0];
}

static const char *ux_failure(void *state, void *link) {
    struct ux *m = state;
    return m->protocol_error[0] ? m->protocol_error : ((struct link *)link)->error;
}

/* ---- links ---- */

/* A link toward a new peer: this worker's address goes into the OFFER or CONNECT. */
static void *ux_link_create(void *state, uint8_t *record, int32_t *rc, char *err, size_t n) {
    struct ux *m = state;
    if ((*rc = ux_address_put(&m->w, record, err, n))) return NULL;
    struct link *l = calloc(1, sizeof *l);
    if (!l) *rc = bl_oob_fail(err, n, BL_ENOMEM, "out of memory");
    return l;
}

/* Only the peer's address is kept: link_start, on the thread that drives the worker, makes its endpoint. */
static int32_t ux_link_accept(void *state, void *link, const bl_remote_peer *peer, char *err, size_t n) {
    struct link *l = link;
    l->same_host = peer->same_host;
    return ux_address_get(&((struct ux *)state)->w, peer->record, peer->same_host, l->addr, &l->addr_len, peer->who,
                          err, n);
}

static int32_t ux_link_start(void *state, void *link, char *err, size_t n) {
    struct ux *m = state;
    struct link *l = link;
    int32_t rc = ux_ep_open(&m->w, l->addr, l->same_host, on_ep_error, l, &l->ep, err, n);
    if (rc) {
        snprintf(l->error, sizeof l->error, "%s", err);
        l->dead = 1;
        return rc;
    }
    ux_ep_transports(l->ep, m->transports, sizeof m->transports);
    return BL_OK;
}

static void ux_link_destroy(void *state, void *link) {
    struct ux *m = state;
    struct link *l = link;
    if (!l) return;
    ux_ep_close(&m->w, l->ep); /* only a link that reached its thread has one */
    free(l);
}

static void ux_describe(void *state, void *link, char *out, size_t n) {
    struct ux *m = state;
    (void)link;
    if (m->transports[0]) snprintf(out, n, "tls=%s, UCX transports: %s", ux_tls_name(m->tls), m->transports);
}

/* ---- open: configuration only; the worker at connect ---- */

static int32_t ux_open(void *state, bl_remote *r, const bl_open_args *a, char *err, size_t n) {
    struct ux *m = state;
    m->r = r;
    const char *tls = a->host->config_str(a->session, "tls");
    m->tls = tls ? ux_tls_find(tls) : UX_TLS_AUTO;
    if (m->tls < 0)
        return bl_oob_fail(err, n, BL_EINVAL, "tls=%.40s: choose shm (UCX shared memory), tcp, or auto (shared memory "
                           "to a peer on this host, else UCX's own choice)", tls);
    return BL_OK;
}

/* The UCX context and worker, with the receive handler of this side's role. */
static int32_t ux_prepare(void *state, char *err, size_t n) {
    struct ux *m = state;
    int32_t rc = m->w.address ? BL_OK
                              : ux_worker_open(&m->w, m->tls, m->r->role == BL_CONTROLLER ? AM_REPLY : AM_REQUEST,
                                               on_frame, m, err, n);
    if (rc) return rc;
    uint8_t record[UX_ADDRESS_RECORD_BYTES];
    return ux_address_put(&m->w, record, err, n); /* whether its address fits the handshake */
}

static void ux_release(void *state) {
    struct ux *m = state;
    ux_worker_close(&m->w);
}

static const bl_remote_transport transport = {
    .protocol = {
        .transport = "ucx",
        .magic = UX_MAGIC_TRANSPORT,
        .version = BL_REMOTE_HANDSHAKE_VERSION,
        .peer_bytes = UX_ADDRESS_RECORD_BYTES,
        .accepting = "take this controller's UCX worker address",
    },
    .name = "ucx",
    .config_keys = config_keys,
    .state_bytes = sizeof(struct ux),
    .open = ux_open,
    .prepare = ux_prepare,
    .link_create = ux_link_create,
    .link_accept = ux_link_accept,
    .link_start = ux_link_start,
    .link_destroy = ux_link_destroy,
    .deliver = ux_deliver,
    .poll = ux_poll,
    .alive = ux_alive,
    .failure = ux_failure,
    .describe = ux_describe,
    .release = ux_release,
};

BL_API const bl_backend *backline_transport_backend_v1(void) { return bl_remote_backend(&transport); }

/* libucs, loaded with this library, catches SIGHUP for its debug handler (UCX_DEBUG_SIGNO), so a
 * process that loads this backend would no longer end on SIGHUP: a serve child whose terminal
 * goes, an executor told to stop. Its constructor ran before this one (a dependency's first),
 * so the handler it left is put back to the default here; one the program set is left alone. */
__attribute__((constructor)) static void give_back_sighup(void) {
    struct sigaction now;
    Dl_info where;
    if (sigaction(SIGHUP, NULL, &now) || now.sa_handler == SIG_DFL || now.sa_handler == SIG_IGN) return;
    void *handler = (now.sa_flags & SA_SIGINFO) ? (void *)now.sa_sigaction : (void *)now.sa_handler;
    if (dladdr(handler, &where) && where.dli_fname && strstr(where.dli_fname, "libucs")) signal(SIGHUP, SIG_DFL);
}
