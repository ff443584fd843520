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
 * Control plane (docs/ucx.md, "Handshake"): the coprocessor listens on its Endpoint (the keys
 * `host` and `port`), the controller dials, and they exchange UCX worker addresses in a
 * versioned big-endian handshake (backline/oob.h): HELLO (controller: ABI, key), OFFER
 * (coprocessor: ring geometry, last served round, its worker address), CONNECT (controller:
 * its worker address), READY. The connection stays open: its closing is how each side learns
 * that the other has gone, besides UCX's own endpoint error callback. The coprocessor's
 * acceptor thread takes the next controller once the current one has gone; its poller thread
 * (the only one that touches the worker once it runs) creates the endpoint to it.
 */
#define _GNU_SOURCE
#include <backline/backline.h>
#include <backline/oob.h>

#include <ucp/api/ucp.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define BL_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define BL_LIKELY(x) __builtin_expect(!!(x), 1)

/* ---- handshake messages (docs/ucx.md): backline/oob.h's header, then a fixed-size body ---- */
#define HS_MAGIC 0x424c5558u /* "BLUX" */
#define HS_VERSION 1u
enum { HS_HELLO = 1, HS_OFFER = 2, HS_CONNECT = 3, HS_READY = 4 };
#define HS_TEXT_BYTES 160u
#define HS_KEY_BYTES BL_KEY_MAX_LEN
#define HS_ADDR_BYTES 2048u /* a UCX worker address (it grows with the transports a worker has) */
#define HELLO_BYTES (4u + HS_KEY_BYTES + 4u)
#define OFFER_BYTES (4u + 4u + 4u + 8u + 4u + HS_ADDR_BYTES + HS_TEXT_BYTES)
#define CONNECT_BYTES (4u + HS_ADDR_BYTES)
#define READY_BYTES (4u + HS_TEXT_BYTES)
_Static_assert(OFFER_BYTES <= BL_OOB_MAX_BODY, "the largest handshake body fits bl_oob_send_msg");

/* Active message ids: requests go to the coprocessor, replies to the controller. */
enum { AM_REQUEST = 1, AM_REPLY = 2 };
/* A controller sends its HELLO as soon as it has connected; a peer that does not is dropped soon. */
#define HELLO_WAIT_NS 3000000000ull

static const char *const config_keys[] = {"host", "port", "tls", "cpu", "rt_priority", NULL};

/* The UCX transports each `tls` value allows (UCX_TLS); "auto" leaves UCX's own choice. */
static const struct {
    const char *name, *ucx_tls;
} tls_choices[] = {{"shm", "posix,sysv,self"}, {"tcp", "tcp,self"}, {"auto", NULL}};

/* One endpoint to one peer. Used by one thread at a time: the controller's round thread, or
 * the coprocessor's poller (which swaps links, see below). */
struct link {
    ucp_ep_h ep;
    int dead; /* the endpoint failed, or a send did */
    char error[256];
    size_t addr_len;
    uint8_t addr[HS_ADDR_BYTES]; /* the peer's worker address, until the endpoint exists */
};

struct ux {
    int role, runs_in;
    char key[HS_KEY_BYTES + 1];
    const bl_host_api *host;
    bl_session *session;
    uint32_t slots, slot_bytes;
    /* configuration */
    char host_name[256];
    int port, cpu, rt_priority;
    int tls; /* index into tls_choices */
    uint64_t connect_timeout_ns, timeout_ns;
    /* UCX */
    ucp_context_h context;
    ucp_worker_h worker;
    ucp_address_t *my_addr;
    size_t my_addr_len;
    uint8_t *mem; /* the request ring, then the reply ring */
    uint64_t base;     /* rounds the coprocessor had served when this controller connected */
    uint64_t received; /* frames published into this side's receive ring */
    char protocol_error[200];
    /* controller: its one link and the socket to its coprocessor */
    struct link *link;
    int fd;
    /* coprocessor: the listening socket, the acceptor thread and the link handed to the poller */
    int listen_fd, stop_fd, ctl_fd;
    struct link *next_link; /* published by the acceptor, taken by the poller */
    pthread_t poller, acceptor;
    int poller_running, acceptor_running, stopping;
    char applied[256];
    char transports[256]; /* what UCX chose for the current endpoint (ucp_ep_print_info) */
};

static uint8_t *ring(const struct ux *m, int which) {
    return m->mem + (size_t)which * m->slots * m->slot_bytes;
}

static void note(struct ux *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(struct ux *m, const char *fmt, ...) {
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fprintf(stderr, "backline-transport-ucx: %s '%s': %s\n", m->role == BL_CONTROLLER ? "controller" : "coprocessor",
            m->key, text);
}

/* ---- the data path ---- */

/* Receive handler of both sides: the frame less its sequence number goes into its slot, then
 * the sequence number is published. */
static ucs_status_t on_frame(void *arg, const void *header, size_t header_length, void *data, size_t length,
                             const ucp_am_recv_param_t *param) {
    struct ux *m = arg;
    int which = m->role == BL_CONTROLLER ? 1 : 0;
    uint64_t seq;
    /* Eager data is in `data` for the callback's duration; a rendezvous message would need a
     * receive of its own, and a frame is never sent so. */
    if (BL_UNLIKELY(header_length != sizeof seq || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ||
                    length > m->slot_bytes - sizeof seq)) {
        snprintf(m->protocol_error, sizeof m->protocol_error,
                 "the peer broke the protocol: a message with a %zu-byte header and %zu bytes of data%s", header_length,
                 length, param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV ? " by rendezvous" : "");
        return UCS_OK;
    }
    memcpy(&seq, header, sizeof seq);
    if (BL_UNLIKELY(seq != m->received + 1)) {
        if (!m->protocol_error[0])
            snprintf(m->protocol_error, sizeof m->protocol_error,
                     "the peer broke the protocol: frame %llu arrived where %llu was due", (unsigned long long)seq,
                     (unsigned long long)(m->received + 1));
        return UCS_OK;
    }
    uint8_t *slot = ring(m, which) + (size_t)((seq - 1) & (m->slots - 1)) * m->slot_bytes;
    memcpy(slot + sizeof seq, data, length);
    __atomic_store_n((uint64_t *)slot, seq, __ATOMIC_RELEASE);
    m->received = seq;
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
    uint8_t *frame = ring(m, which) + (size_t)slot * m->slot_bytes;
    size_t body = BL_FRAME_HEADER_BYTES - 8 + ((const bl_frame_header *)frame)->len;
    ucp_request_param_t p;
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_EAGER;
    ucs_status_ptr_t r = ucp_am_send_nbx(l->ep, which == 0 ? AM_REQUEST : AM_REPLY, frame, 8, frame + 8, body, &p);
    if (BL_LIKELY(r == NULL)) return BL_OK;
    if (BL_UNLIKELY(UCS_PTR_IS_ERR(r))) {
        snprintf(l->error, sizeof l->error, "ucp_am_send_nbx failed: %s", ucs_status_string(UCS_PTR_STATUS(r)));
        l->dead = 1;
        return BL_EPEER;
    }
    ucp_request_free(r); /* UCX completes it; the slot is not rewritten before the peer answers it */
    return BL_OK;
}

static void progress(struct ux *m) {
    while (ucp_worker_progress(m->worker)) {
    }
}

/* ---- links ---- */

static void describe_ep(struct ux *m, ucp_ep_h ep) {
    /* ucp_ep_print_info's lanes name the transports and devices UCX chose (posix/memory, tcp/lo). */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    m->transports[0] = 0;
    if (!f) return;
    ucp_ep_print_info(ep, f);
    fclose(f);
    size_t o = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *lane = strstr(line, "lane[");
        char *colon = lane ? strchr(lane, ':') : NULL;
        if (!colon) continue;
        char name[64];
        /* "lane[0]:  8:posix/memory.0 md[4] ..." -> "posix/memory" */
        if (sscanf(colon + 1, " %*[0-9]:%63[^. ]", name) != 1) continue;
        if (strstr(m->transports, name)) continue;
        o += (size_t)snprintf(m->transports + o, sizeof m->transports - o, "%s%s", o ? "," : "", name);
        if (o >= sizeof m->transports) break;
    }
    free(text);
}

/* Make the endpoint to the link's peer (on the thread that drives the worker). */
static int32_t link_connect(struct ux *m, struct link *l, char *err, size_t n) {
    ucp_ep_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                   UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.address = (const ucp_address_t *)l->addr;
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = on_ep_error;
    p.err_handler.arg = l;
    if (tls_choices[m->tls].ucx_tls && !strcmp(tls_choices[m->tls].name, "shm")) {
        /* UCX 1.13's shared-memory transports cannot report a failed peer (their endpoints are
         * unreachable in that mode): over shm a dead peer is told by the out-of-band
         * connection's closing and the deadline. */
        p.field_mask &= ~(uint64_t)(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER);
    }
    ucs_status_t s = ucp_ep_create(m->worker, &p, &l->ep);
    if (s != UCS_OK) {
        l->ep = NULL;
        return bl_oob_fail(err, n, BL_EPEER, "cannot reach the peer's UCX worker (ucp_ep_create: %s); with tls=%s both "
                           "sides need a transport in common", ucs_status_string(s), tls_choices[m->tls].name);
    }
    describe_ep(m, l->ep);
    return BL_OK;
}

static void link_free(struct ux *m, struct link *l) {
    if (!l) return;
    if (l->ep) {
        ucp_request_param_t p;
        p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        p.flags = UCP_EP_CLOSE_FLAG_FORCE; /* the peer may be gone: do not wait for it */
        ucs_status_ptr_t r = ucp_ep_close_nbx(l->ep, &p);
        if (UCS_PTR_IS_PTR(r)) {
            uint64_t until = bl_oob_now_ns() + 1000000000ull;
            while (ucp_request_check_status(r) == UCS_INPROGRESS && bl_oob_now_ns() < until)
                ucp_worker_progress(m->worker);
            ucp_request_free(r);
        }
    }
    free(l);
}

/* ---- handshake messages ---- */

static int32_t hs_send(int fd, uint16_t type, const uint8_t *body, uint32_t len, uint64_t deadline, char *err,
                       size_t n) {
    return bl_oob_send_msg(fd, HS_MAGIC, HS_VERSION, type, body, len, deadline, err, n);
}

static const char *hs_name(uint16_t type) {
    static const char *const names[] = {"?", "HELLO", "OFFER", "CONNECT", "READY"};
    return type <= HS_READY ? names[type] : "?";
}

static uint32_t hs_body_bytes(uint16_t type) {
    switch (type) {
    case HS_HELLO: return HELLO_BYTES;
    case HS_OFFER: return OFFER_BYTES;
    case HS_CONNECT: return CONNECT_BYTES;
    case HS_READY: return READY_BYTES;
    default: return 0;
    }
}

/* Receive a message of `type` into body: a peer that is not Backline's ucx transport, or
 * speaks another version of it, is refused with what it sent. */
static int32_t hs_recv(int fd, uint16_t type, uint8_t *body, uint64_t deadline, const char *who, char *err, size_t n) {
    bl_oob_header h;
    char why[256];
    int32_t rc = bl_oob_recv_header(fd, &h, deadline, why, sizeof why);
    if (rc) return bl_oob_fail(err, n, rc, "%s: no %s message (%s)", who, hs_name(type), why);
    if (h.magic != HS_MAGIC)
        return bl_oob_fail(err, n, BL_EPEER, "%s is not a Backline ucx peer: it sent \"%s\" where a handshake starts "
                           "with \"BLUX\"", who, h.text);
    if (h.version != HS_VERSION)
        return bl_oob_fail(err, n, BL_EABI, "%s speaks version %u of the ucx handshake, this side version %u; run both "
                           "sides from the same backline-transport-ucx", who, h.version, HS_VERSION);
    if (h.type != type || h.body_bytes != hs_body_bytes(type))
        return bl_oob_fail(err, n, BL_EPEER, "%s sent a %s message of %u bytes where a %s of %u was due", who,
                           hs_name(h.type), h.body_bytes, hs_name(type), hs_body_bytes(type));
    rc = bl_oob_recv_all(fd, body, hs_body_bytes(type), deadline, why, sizeof why);
    if (rc) return bl_oob_fail(err, n, rc, "%s: truncated %s message (%s)", who, hs_name(type), why);
    return BL_OK;
}

static void put_text(uint8_t *p, const char *text) {
    memset(p, 0, HS_TEXT_BYTES);
    if (text) memcpy(p, text, strnlen(text, HS_TEXT_BYTES - 1)); /* cut to fit; NUL-padded */
}

static void get_text(const uint8_t *p, char *out, size_t n) {
    char t[HS_TEXT_BYTES + 1];
    memcpy(t, p, HS_TEXT_BYTES);
    t[HS_TEXT_BYTES] = 0;
    bl_oob_printable((const uint8_t *)t, strlen(t), out, n);
}

static void put_addr(uint8_t *p, const struct ux *m) {
    bl_oob_put32(p, (uint32_t)m->my_addr_len);
    memset(p + 4, 0, HS_ADDR_BYTES);
    memcpy(p + 4, m->my_addr, m->my_addr_len);
}

static int32_t get_addr(const uint8_t *p, struct link *l, const char *who, char *err, size_t n) {
    uint32_t len = bl_oob_get32(p);
    if (!len || len > HS_ADDR_BYTES)
        return bl_oob_fail(err, n, BL_EPEER, "%s sent a worker address of %u bytes (1 to %u allowed)", who, len,
                           HS_ADDR_BYTES);
    l->addr_len = len;
    memcpy(l->addr, p + 4, len);
    return BL_OK;
}

/* ---- open: configuration only ---- */

static int32_t ux_open(const bl_open_args *a, void **impl, char *err, size_t n) {
    const bl_host_api *h = a->host;
    if (!h || h->abi_version < 3)
        return bl_oob_fail(err, n, BL_EABI, "this backend needs Backline ABI 3 (a host with error_text)");
    if (a->role == BL_COPROCESSOR && a->runs_in != BL_RUNS_PROCESS)
        return bl_oob_fail(err, n, BL_EINVAL, "ucx joins processes (on this or another machine): a coprocessor in the "
                           "controller's own process has nothing to send over; run it in a process or an executor, or "
                           "use memcpy");
    if (a->role == BL_CONTROLLER && a->runs_in != BL_RUNS_PROCESS && a->runs_in != BL_RUNS_ANY)
        return bl_oob_fail(err, n, BL_EINVAL, "ucx reaches coprocessors in other processes; this controller expects one "
                           "in its own process");
    struct ux *m = calloc(1, sizeof *m);
    if (!m) return bl_oob_fail(err, n, BL_ENOMEM, "out of memory");
    m->role = a->role;
    m->runs_in = a->runs_in;
    snprintf(m->key, sizeof m->key, "%s", a->key);
    m->host = h;
    m->session = a->session;
    m->slots = a->slots;
    m->slot_bytes = a->slot_bytes;
    m->fd = m->listen_fd = m->stop_fd = m->ctl_fd = -1;
    int64_t v;
    int32_t rc = BL_OK;
    const char *host = h->config_str(a->session, "host");
    if (!host || !h->config_str(a->session, "port")) {
        rc = bl_oob_fail(err, n, BL_EINVAL, "ucx needs the coprocessor's endpoint (keys host and port): give the "
                         "coprocessor endpoint=Endpoint(host=..., port=...)");
        goto fail;
    }
    if (strlen(host) >= sizeof m->host_name) {
        rc = bl_oob_fail(err, n, BL_EINVAL, "host=%.40s...: longer than %zu characters", host, sizeof m->host_name - 1);
        goto fail;
    }
    snprintf(m->host_name, sizeof m->host_name, "%s", host);
    if ((rc = h->config_int(a->session, "port", 1, 65535, 0, &v, err, n))) goto fail;
    m->port = (int)v;
    const char *tls = h->config_str(a->session, "tls");
    m->tls = 2; /* auto */
    if (tls) {
        size_t i = 0;
        while (i < sizeof tls_choices / sizeof tls_choices[0] && strcmp(tls, tls_choices[i].name)) ++i;
        if (i == sizeof tls_choices / sizeof tls_choices[0]) {
            rc = bl_oob_fail(err, n, BL_EINVAL, "tls=%.40s: choose shm (UCX shared memory), tcp, or auto (UCX's own "
                             "choice)", tls);
            goto fail;
        }
        m->tls = (int)i;
    }
    if ((rc = h->config_int(a->session, "cpu", -1, CPU_SETSIZE - 1, -1, &v, err, n))) goto fail;
    m->cpu = (int)v;
    if ((rc = h->config_int(a->session, "rt_priority", 0, 99, 0, &v, err, n))) goto fail;
    m->rt_priority = (int)v;
    if ((rc = h->config_int(a->session, "connect_timeout_ms", 1, BL_MAX_TIMEOUT_MS, BL_DEFAULT_CONNECT_TIMEOUT_MS, &v,
                            err, n)))
        goto fail;
    m->connect_timeout_ns = (uint64_t)v * 1000000ull;
    if ((rc = h->config_int(a->session, "timeout_ms", 1, BL_MAX_TIMEOUT_MS, BL_DEFAULT_TIMEOUT_MS, &v, err, n)))
        goto fail;
    m->timeout_ns = (uint64_t)v * 1000000ull;
    *impl = m;
    return BL_OK;
fail:
    free(m);
    return rc;
}

/* The UCX context and worker, with the receive handler of this side's role. */
static int32_t open_worker(struct ux *m, char *err, size_t n) {
    if (m->worker) return BL_OK;
    ucp_config_t *config;
    ucs_status_t s = ucp_config_read(NULL, NULL, &config);
    if (s != UCS_OK) return bl_oob_fail(err, n, BL_EBACKEND, "ucp_config_read: %s", ucs_status_string(s));
    if (tls_choices[m->tls].ucx_tls && (s = ucp_config_modify(config, "TLS", tls_choices[m->tls].ucx_tls)) != UCS_OK) {
        ucp_config_release(config);
        return bl_oob_fail(err, n, BL_EBACKEND, "UCX refused TLS=%s: %s", tls_choices[m->tls].ucx_tls,
                           ucs_status_string(s));
    }
    ucp_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = UCP_PARAM_FIELD_FEATURES;
    p.features = UCP_FEATURE_AM;
    s = ucp_init(&p, config, &m->context);
    ucp_config_release(config);
    if (s != UCS_OK) {
        m->context = NULL;
        return bl_oob_fail(err, n, BL_EBACKEND, "ucp_init (tls=%s): %s", tls_choices[m->tls].name, ucs_status_string(s));
    }
    ucp_worker_params_t w;
    memset(&w, 0, sizeof w);
    w.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    w.thread_mode = UCS_THREAD_MODE_SERIALIZED; /* one thread at a time: the round thread, or the poller */
    if ((s = ucp_worker_create(m->context, &w, &m->worker)) != UCS_OK) {
        m->worker = NULL;
        return bl_oob_fail(err, n, BL_EBACKEND, "ucp_worker_create: %s", ucs_status_string(s));
    }
    ucp_am_handler_param_t hp;
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG |
                    UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.id = m->role == BL_CONTROLLER ? AM_REPLY : AM_REQUEST;
    hp.cb = on_frame;
    hp.arg = m;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    if ((s = ucp_worker_set_am_recv_handler(m->worker, &hp)) != UCS_OK)
        return bl_oob_fail(err, n, BL_EBACKEND, "ucp_worker_set_am_recv_handler: %s", ucs_status_string(s));
    if ((s = ucp_worker_get_address(m->worker, &m->my_addr, &m->my_addr_len)) != UCS_OK) {
        m->my_addr = NULL;
        return bl_oob_fail(err, n, BL_EBACKEND, "ucp_worker_get_address: %s", ucs_status_string(s));
    }
    if (m->my_addr_len > HS_ADDR_BYTES)
        return bl_oob_fail(err, n, BL_EBACKEND, "this UCX worker's address is %zu bytes, more than the handshake's %u; "
                           "choose fewer transports (tls=shm or tls=tcp)", m->my_addr_len, HS_ADDR_BYTES);
    return BL_OK;
}

/* ---- controller ---- */

static int32_t ctl_connect(struct ux *m, uint64_t deadline, char *err, size_t n) {
    int32_t rc = open_worker(m, err, n);
    if (rc) return rc;
    if (m->fd >= 0) close(m->fd); /* a retried connect dials again */
    m->fd = -1;
    if ((rc = bl_oob_dial(m->host_name, m->port, deadline, "ucx", &m->fd, err, n))) return rc;
    char who[300];
    snprintf(who, sizeof who, "the peer at %s:%d", m->host_name, m->port);
    uint8_t hello[HELLO_BYTES] = {0}, offer[OFFER_BYTES];
    bl_oob_put32(hello, BACKLINE_ABI_VERSION);
    memcpy(hello + 4, m->key, strlen(m->key));
    if ((rc = hs_send(m->fd, HS_HELLO, hello, sizeof hello, deadline, err, n))) return rc;
    if ((rc = hs_recv(m->fd, HS_OFFER, offer, deadline, who, err, n))) return rc;
    int32_t status = (int32_t)bl_oob_get32(offer);
    if (status != BL_OK) {
        char text[HS_TEXT_BYTES * 4];
        get_text(offer + 24 + HS_ADDR_BYTES, text, sizeof text);
        return bl_oob_fail(err, n, status == BL_EBUSY || status == BL_ENOTFOUND || status == BL_EABI ? status : BL_EPEER,
                           "the coprocessor at %s:%d refused this controller: %s", m->host_name, m->port, text);
    }
    uint32_t slots = bl_oob_get32(offer + 4), slot_bytes = bl_oob_get32(offer + 8);
    if (!slots || slots > BL_MAX_SLOTS || (slots & (slots - 1)) || slot_bytes < BL_SLOT_ALIGN ||
        slot_bytes > BL_MAX_SLOT_BYTES || slot_bytes % BL_SLOT_ALIGN)
        return bl_oob_fail(err, n, BL_EPEER, "%s offered an impossible ring (slots=%u slot_bytes=%u)", who, slots,
                           slot_bytes);
    m->slots = slots; /* the coprocessor owns the geometry, as a memcpy coprocessor owns its region */
    m->slot_bytes = slot_bytes;
    m->base = bl_oob_get64(offer + 12);
    if (!m->link && !(m->link = calloc(1, sizeof *m->link))) return bl_oob_fail(err, n, BL_ENOMEM, "out of memory");
    return get_addr(offer + 20, m->link, who, err, n);
}

static int32_t ctl_exchange(struct ux *m, uint64_t deadline, char *err, size_t n) {
    char who[300];
    snprintf(who, sizeof who, "the coprocessor at %s:%d", m->host_name, m->port);
    int32_t rc = BL_OK;
    if (!m->link->ep && (rc = link_connect(m, m->link, err, n))) return rc;
    uint8_t body[CONNECT_BYTES], ready[READY_BYTES];
    put_addr(body, m);
    if ((rc = hs_send(m->fd, HS_CONNECT, body, sizeof body, deadline, err, n))) return rc;
    if ((rc = hs_recv(m->fd, HS_READY, ready, deadline, who, err, n))) return rc;
    int32_t status = (int32_t)bl_oob_get32(ready);
    if (status != BL_OK) {
        char text[HS_TEXT_BYTES * 4];
        get_text(ready + 4, text, sizeof text);
        return bl_oob_fail(err, n, BL_EPEER, "%s could not reach this controller's UCX worker: %s", who, text);
    }
    return BL_OK;
}

static int32_t fail_round(struct ux *m, struct link *l) {
    m->host->error_text(m->protocol_error[0] ? m->protocol_error : l->error);
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
    if (bl_oob_peer_closed(m->fd)) {
        char text[400];
        snprintf(text, sizeof text, "its connection from %s:%d closed (the coprocessor exited or was killed)",
                 m->host_name, m->port);
        m->host->error_text(text);
        return 0;
    }
    return 1;
}

/* ---- coprocessor ---- */

/* The highest sequence number in ring `which`. */
static uint64_t highest(struct ux *m, int which) {
    uint64_t top = 0;
    for (uint32_t i = 0; i < m->slots; ++i) {
        uint64_t s = __atomic_load_n((uint64_t *)(ring(m, which) + (size_t)i * m->slot_bytes), __ATOMIC_ACQUIRE);
        if (s > top) top = s;
    }
    return top;
}

/* Refuse a controller with a reason it can show (best effort: it may have gone). */
static void refuse(int fd, int32_t status, const char *text, uint64_t deadline) {
    uint8_t offer[OFFER_BYTES] = {0};
    char ignored[64];
    bl_oob_put32(offer, (uint32_t)status);
    put_text(offer + 24 + HS_ADDR_BYTES, text);
    hs_send(fd, HS_OFFER, offer, sizeof offer, deadline, ignored, sizeof ignored);
}

/* One controller's handshake, on the acceptor thread. On success the new link (the
 * controller's worker address) is published for the poller, which makes its endpoint. */
static void admit(struct ux *m, int fd) {
    uint64_t now = bl_oob_now_ns();
    uint64_t deadline = now + m->connect_timeout_ns;
    uint64_t hello_by = now + (m->connect_timeout_ns < HELLO_WAIT_NS ? m->connect_timeout_ns : HELLO_WAIT_NS);
    char err[512], text[HS_TEXT_BYTES];
    uint8_t hello[HELLO_BYTES];
    int32_t rc = hs_recv(fd, HS_HELLO, hello, hello_by, "a peer", err, sizeof err);
    if (rc) {
        if (rc == BL_EABI) refuse(fd, BL_EABI, err, deadline);
        note(m, "refused a connection: %s", err);
        close(fd);
        return;
    }
    char key[HS_KEY_BYTES + 1];
    memcpy(key, hello + 4, HS_KEY_BYTES);
    key[HS_KEY_BYTES] = 0;
    if (bl_oob_get32(hello) != BACKLINE_ABI_VERSION || strcmp(key, m->key)) {
        if (bl_oob_get32(hello) != BACKLINE_ABI_VERSION)
            snprintf(text, sizeof text, "the controller is Backline ABI %u, this coprocessor ABI %d",
                     bl_oob_get32(hello), BACKLINE_ABI_VERSION);
        else
            snprintf(text, sizeof text, "this port serves key '%s', not '%.64s'", m->key, key);
        refuse(fd, bl_oob_get32(hello) != BACKLINE_ABI_VERSION ? BL_EABI : BL_ENOTFOUND, text, deadline);
        close(fd);
        return;
    }
    if (m->ctl_fd >= 0 && !bl_oob_peer_closed(m->ctl_fd)) {
        refuse(fd, BL_EBUSY, "another controller holds this coprocessor; one controller at a time", deadline);
        close(fd);
        return;
    }
    /* Every request the last controller got in must be answered before the next one numbers
     * its rounds after them. */
    uint64_t served;
    while ((served = highest(m, 1)) != highest(m, 0)) {
        if (bl_oob_now_ns() > deadline) {
            refuse(fd, BL_EPEER, "a previous controller's last round is still unanswered", deadline);
            close(fd);
            return;
        }
        usleep(100);
    }
    struct link *l = calloc(1, sizeof *l);
    if (!l) {
        refuse(fd, BL_ENOMEM, "the coprocessor is out of memory", deadline);
        close(fd);
        return;
    }
    uint8_t offer[OFFER_BYTES] = {0}, body[CONNECT_BYTES], ready[READY_BYTES] = {0};
    bl_oob_put32(offer, BL_OK);
    bl_oob_put32(offer + 4, m->slots);
    bl_oob_put32(offer + 8, m->slot_bytes);
    bl_oob_put64(offer + 12, served);
    put_addr(offer + 20, m);
    if ((rc = hs_send(fd, HS_OFFER, offer, sizeof offer, deadline, err, sizeof err)) ||
        (rc = hs_recv(fd, HS_CONNECT, body, deadline, "the controller", err, sizeof err)) ||
        (rc = get_addr(body, l, "the controller", err, sizeof err))) {
        note(m, "a controller went away during its handshake: %s", err);
        free(l);
        close(fd);
        return;
    }
    /* Take back a link the poller never picked up (its controller came and went without a round). */
    free(__atomic_exchange_n(&m->next_link, NULL, __ATOMIC_ACQ_REL));
    bl_oob_put32(ready, BL_OK);
    if ((rc = hs_send(fd, HS_READY, ready, sizeof ready, deadline, err, sizeof err))) {
        note(m, "a controller went away during its handshake: %s", err);
        free(l);
        close(fd);
        return;
    }
    __atomic_store_n(&m->next_link, l, __ATOMIC_RELEASE);
    if (m->ctl_fd >= 0) close(m->ctl_fd);
    m->ctl_fd = fd;
}

static void *acceptor(void *arg) {
    struct ux *m = arg;
    while (!__atomic_load_n(&m->stopping, __ATOMIC_ACQUIRE)) {
        struct pollfd p[3] = {{.fd = m->listen_fd, .events = POLLIN}, {.fd = m->stop_fd, .events = POLLIN},
                              {.fd = m->ctl_fd, .events = POLLIN}};
        int r = poll(p, m->ctl_fd >= 0 ? 3 : 2, 1000);
        if (r < 0 && errno != EINTR) break;
        if (p[1].revents) break;
        if (m->ctl_fd >= 0 && p[2].revents) {
            if (bl_oob_peer_closed(m->ctl_fd)) {
                close(m->ctl_fd); /* its controller has gone: the next may come */
                m->ctl_fd = -1;
            } else {
                uint8_t junk[256]; /* nothing is due after READY: drop it rather than wake on it forever */
                if (recv(m->ctl_fd, junk, sizeof junk, MSG_DONTWAIT) < 0 && errno != EAGAIN) {
                    close(m->ctl_fd);
                    m->ctl_fd = -1;
                }
            }
        }
        int fd;
        if (p[0].revents && bl_oob_accept(m->listen_fd, &fd) == 1) admit(m, fd);
    }
    return NULL;
}

/* The link of the current controller. A new one, published by the acceptor, is taken here
 * (on the poller, the worker's thread): its endpoint is made and the last one's closed. */
static struct link *current_link(struct ux *m) {
    struct link *next = __atomic_load_n(&m->next_link, __ATOMIC_ACQUIRE);
    if (BL_UNLIKELY(next != NULL) &&
        __atomic_compare_exchange_n(&m->next_link, &next, NULL, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        link_free(m, m->link);
        m->link = next;
        char err[256];
        if (link_connect(m, next, err, sizeof err)) {
            snprintf(next->error, sizeof next->error, "%s", err);
            next->dead = 1;
            note(m, "%s", err);
        }
    }
    return m->link;
}

static void cop_poll(void *impl) {
    struct ux *m = impl;
    current_link(m);
    progress(m);
    if (BL_UNLIKELY(m->protocol_error[0])) {
        note(m, "%s", m->protocol_error);
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

static void *poller(void *arg) {
    struct ux *m = arg;
    m->host->serve(m->session);
    return NULL;
}

static int32_t cop_start(struct ux *m, char *err, size_t n) {
    m->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (m->stop_fd < 0) return bl_oob_fail(err, n, BL_EBACKEND, "eventfd: %s", strerror(errno));
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    size_t o = (size_t)snprintf(m->applied, sizeof m->applied, "poller thread");
    if (m->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(m->cpu, &set);
        pthread_attr_setaffinity_np(&attr, sizeof set, &set);
        o += (size_t)snprintf(m->applied + o, sizeof m->applied - o, " pinned to CPU %d", m->cpu);
    }
    int rc = pthread_create(&m->poller, &attr, poller, m);
    pthread_attr_destroy(&attr);
    if (rc)
        return bl_oob_fail(err, n, BL_EBACKEND, "cannot start the poller thread%s: %s",
                           m->cpu >= 0 ? " (pinned)" : "", strerror(rc));
    m->poller_running = 1;
    if (m->rt_priority > 0 && o < sizeof m->applied) {
        /* Best effort: an unprivileged process is refused, and says so. */
        struct sched_param sp = {.sched_priority = m->rt_priority};
        int e = pthread_setschedparam(m->poller, SCHED_FIFO, &sp);
        snprintf(m->applied + o, sizeof m->applied - o, e ? ", SCHED_FIFO %d not applied (%s)" : ", SCHED_FIFO %d",
                 m->rt_priority, strerror(e));
    }
    if (m->cpu >= 0 || m->rt_priority > 0) note(m, "%s", m->applied);
    rc = pthread_create(&m->acceptor, NULL, acceptor, m);
    if (rc) return bl_oob_fail(err, n, BL_EBACKEND, "cannot start the acceptor thread: %s", strerror(rc));
    m->acceptor_running = 1;
    return BL_OK;
}

/* ---- hooks ---- */

static int32_t ux_connect(void *impl, uint64_t deadline, char *err, size_t n) {
    struct ux *m = impl;
    if (m->role == BL_CONTROLLER) return ctl_connect(m, deadline, err, n);
    int32_t rc = open_worker(m, err, n);
    if (rc) return rc;
    if (m->listen_fd >= 0) return BL_OK;
    return bl_oob_listen(m->host_name, m->port, &m->listen_fd, err, n);
}

static int32_t ux_alloc_memory(void *impl, char *err, size_t n) {
    struct ux *m = impl;
    if (m->mem) return BL_OK;
    size_t bytes = 2 * (size_t)m->slots * m->slot_bytes;
    m->mem = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!m->mem) return bl_oob_fail(err, n, BL_ENOMEM, "cannot allocate %zu bytes of rings", bytes);
    memset(m->mem, 0, bytes);
    return BL_OK;
}

static int32_t ux_exchange_keys(void *impl, uint64_t deadline, char *err, size_t n) {
    struct ux *m = impl;
    /* A coprocessor exchanges with each controller as it comes, on its acceptor thread. */
    return m->role == BL_CONTROLLER ? ctl_exchange(m, deadline, err, n) : BL_OK;
}

static int32_t ux_establish(void *impl, bl_channel *ch, uint64_t deadline, char *err, size_t n) {
    (void)deadline;
    (void)err;
    (void)n;
    struct ux *m = impl;
    ch->request_ring = ring(m, 0);
    ch->reply_ring = ring(m, 1);
    ch->slots = m->slots;
    ch->slot_bytes = m->slot_bytes;
    ch->impl = m;
    if (m->role == BL_CONTROLLER) {
        ch->deliver = ctl_deliver;
        ch->poll = ctl_poll;
        ch->peer_alive = ctl_alive;
        m->received = m->base; /* replies to this controller's rounds come after the base */
        if (m->base) {
            /* What a shared ring would show after the last controller's rounds: the core then
             * numbers this controller's rounds from base + 1, as the coprocessor expects. */
            uint32_t slot = (uint32_t)((m->base - 1) & (m->slots - 1));
            __atomic_store_n((uint64_t *)(ring(m, 0) + (size_t)slot * m->slot_bytes), m->base, __ATOMIC_RELEASE);
            __atomic_store_n((uint64_t *)(ring(m, 1) + (size_t)slot * m->slot_bytes), m->base, __ATOMIC_RELEASE);
        }
        if (m->transports[0]) note(m, "UCX transports: %s", m->transports);
    } else {
        ch->deliver = cop_deliver;
        ch->poll = cop_poll;
    }
    return BL_OK;
}

static int32_t ux_start(void *impl, char *err, size_t n) {
    struct ux *m = impl;
    return m->role == BL_COPROCESSOR ? cop_start(m, err, n) : BL_OK;
}

static int32_t ux_stop(void *impl, char *err, size_t n) {
    (void)err;
    (void)n;
    struct ux *m = impl;
    if (m->poller_running) {
        pthread_join(m->poller, NULL); /* the core set the stop flag */
        m->poller_running = 0;
    }
    if (m->acceptor_running) {
        __atomic_store_n(&m->stopping, 1, __ATOMIC_RELEASE);
        uint64_t one = 1;
        if (write(m->stop_fd, &one, sizeof one) < 0) { /* the 1 s poll timeout still ends it */
        }
        pthread_join(m->acceptor, NULL);
        m->acceptor_running = 0;
    }
    if (m->role == BL_CONTROLLER && m->fd >= 0) {
        close(m->fd); /* tells the coprocessor at once that the next controller may come */
        m->fd = -1;
    }
    return BL_OK;
}

static void ux_close(void *impl) {
    struct ux *m = impl;
    char err[8];
    ux_stop(m, err, sizeof err);
    if (m->worker) {
        link_free(m, m->link);
        free(__atomic_exchange_n(&m->next_link, NULL, __ATOMIC_ACQ_REL));
        if (m->my_addr) ucp_worker_release_address(m->worker, m->my_addr);
        ucp_worker_destroy(m->worker);
    } else {
        free(m->link);
    }
    if (m->context) ucp_cleanup(m->context);
    free(m->mem);
    int fds[] = {m->fd, m->listen_fd, m->stop_fd, m->ctl_fd};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; ++i)
        if (fds[i] >= 0) close(fds[i]);
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
