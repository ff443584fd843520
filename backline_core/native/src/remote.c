/* The control plane of a coprocessor in another process or on another host (see backline/sdk/remote.h). */
#define _GNU_SOURCE
#include <backline/backline.h>
#include <backline/sdk/oob.h>
#include <backline/sdk/remote.h>
#include <backline/sdk/stream_frame.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

enum { HS_HELLO = 1, HS_OFFER = 2, HS_CONNECT = 3, HS_READY = 4, HS_CHALLENGE = 5 };
#define TEXT_BYTES BL_REMOTE_TEXT_BYTES
#define TAG_BYTES BL_TRUST_TAG_BYTES
#define NONCE_BYTES BL_TRUST_NONCE_BYTES
#define HELLO_ASK (4u + BL_KEY_MAX_LEN + 4u) /* abi, key, reserved: what the controller asks for */
#define HELLO_BYTES (HELLO_ASK + NONCE_BYTES + TAG_BYTES)
#define OFFER_HEAD 20u /* status, slots, slot_bytes, rounds served; then the peer part, the text, the tag */
#define READY_BYTES (4u + TEXT_BYTES)
_Static_assert(BL_OOB_HEADER_BYTES + HELLO_BYTES <= sizeof(((bl_oob_pending *)0)->buf), "a HELLO fits a pending entry");

/* ---- handshake messages ---- */

static uint32_t body_bytes(const bl_remote *r, uint16_t type) {
    switch (type) {
    case HS_HELLO: return HELLO_BYTES;
    case HS_OFFER: return OFFER_HEAD + r->proto->peer_bytes + TEXT_BYTES + TAG_BYTES;
    case HS_CHALLENGE: return NONCE_BYTES;
    case HS_CONNECT: return r->proto->peer_bytes;
    case HS_READY: return READY_BYTES;
    default: return 0;
    }
}

static const char *msg_name(uint16_t type) {
    static const char *const names[] = {"?", "HELLO", "OFFER", "CONNECT", "READY", "CHALLENGE"};
    return type <= HS_CHALLENGE ? names[type] : "?";
}

static int32_t send_msg(const bl_remote *r, int fd, uint16_t type, const uint8_t *body, uint64_t deadline, char *err,
                        size_t n) {
    return bl_oob_send_msg(fd, r->proto->magic, r->proto->version, type, body, body_bytes(r, type), deadline, err, n);
}

/* Receive a message of `type` into body: a peer that is not this transport's, or speaks
 * another version of its handshake, is refused with what it sent. */
static int32_t recv_msg(const bl_remote *r, int fd, uint16_t type, uint8_t *body, uint64_t deadline, const char *who,
                        char *err, size_t n) {
    const bl_remote_protocol *p = r->proto;
    bl_oob_header h;
    char why[256];
    int32_t rc = bl_oob_recv_header(fd, &h, deadline, why, sizeof why);
    if (rc) return bl_oob_fail(err, n, rc, "%s: no %s message (%s)", who, msg_name(type), why);
    if (h.magic != p->magic) {
        uint8_t m[4];
        char magic[24];
        bl_oob_put32(m, p->magic);
        bl_oob_printable(m, sizeof m, magic, sizeof magic);
        return bl_oob_fail(err, n, BL_EPEER, "%s is not a Backline %s peer: it sent \"%s\" where a handshake starts "
                           "with \"%s\"", who, p->transport, h.text, magic);
    }
    if (h.version != p->version)
        return bl_oob_fail(err, n, BL_EABI, "%s speaks version %u of the %s handshake, this side version %u; run both "
                           "sides from the same backline-transport-%s", who, h.version, p->transport, p->version,
                           p->transport);
    if (h.type != type || h.body_bytes != body_bytes(r, type))
        return bl_oob_fail(err, n, BL_EPEER, "%s sent a %s message of %u bytes where a %s of %u was due", who,
                           msg_name(h.type), h.body_bytes, msg_name(type), body_bytes(r, type));
    rc = bl_oob_recv_all(fd, body, body_bytes(r, type), deadline, why, sizeof why);
    if (rc) return bl_oob_fail(err, n, rc, "%s: truncated %s message (%s)", who, msg_name(type), why);
    return BL_OK;
}

static void put_text(uint8_t *p, const char *text) {
    memset(p, 0, TEXT_BYTES);
    if (text) memcpy(p, text, strnlen(text, TEXT_BYTES - 1)); /* cut to fit; NUL-padded */
}

/* A peer's text, made printable (it may be anything). */
static void get_text(const uint8_t *p, char *out, size_t n) {
    char t[TEXT_BYTES + 1];
    memcpy(t, p, TEXT_BYTES);
    t[TEXT_BYTES] = 0;
    bl_oob_printable((const uint8_t *)t, strlen(t), out, n);
}

void bl_remote_note(const bl_remote *r, const char *fmt, ...) {
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fprintf(stderr, "backline-transport-%s: %s '%s': %s\n", r->proto->transport,
            r->role == BL_CONTROLLER ? "controller" : "coprocessor", r->key, text);
}

int bl_remote_same_host(int fd) {
    struct sockaddr_storage mine, theirs;
    socklen_t a = sizeof mine, b = sizeof theirs;
    if (getsockname(fd, (struct sockaddr *)&mine, &a) || getpeername(fd, (struct sockaddr *)&theirs, &b) ||
        mine.ss_family != theirs.ss_family)
        return 0;
    if (mine.ss_family == AF_INET) {
        const struct in_addr *x = &((struct sockaddr_in *)&mine)->sin_addr, *y = &((struct sockaddr_in *)&theirs)->sin_addr;
        /* Loopback reaches only this network namespace, whichever 127.x address it uses. */
        return x->s_addr == y->s_addr || ((ntohl(x->s_addr) >> 24) == 127 && (ntohl(y->s_addr) >> 24) == 127);
    }
    if (mine.ss_family == AF_INET6) {
        const struct in6_addr *x = &((struct sockaddr_in6 *)&mine)->sin6_addr,
                              *y = &((struct sockaddr_in6 *)&theirs)->sin6_addr;
        return !memcmp(x, y, sizeof *x);
    }
    return 0;
}

/* ---- open: configuration only ---- */

int32_t bl_remote_open(bl_remote *r, const bl_remote_protocol *proto, const bl_remote_links *links, void *arg,
                       const bl_open_args *a, char *err, size_t n) {
    memset(r, 0, sizeof *r);
    r->fd = r->listen_fd = r->stop_fd = r->ctl_fd = -1;
    r->proto = proto;
    r->links = links;
    r->arg = arg;
    const char *t = proto->transport;
    const bl_host_api *h = a->host;
    if (!h || h->abi_version < 4)
        return bl_oob_fail(err, n, BL_EABI, "this backend needs Backline ABI 4 (a host that passes its deadlines in bl_open_args)");
    if (OFFER_HEAD + proto->peer_bytes + TEXT_BYTES + TAG_BYTES > BL_OOB_MAX_BODY)
        return bl_oob_fail(err, n, BL_EINVAL, "%s: a peer part of %u bytes makes an OFFER longer than the %u a handshake "
                           "message may have", t, proto->peer_bytes, BL_OOB_MAX_BODY);
    if (a->role == BL_COPROCESSOR && a->runs_in != BL_RUNS_PROCESS)
        return bl_oob_fail(err, n, BL_EINVAL, "%s joins processes (on this or another machine): a coprocessor in the "
                           "controller's own process has nothing to send over; run it in a process or an executor, or "
                           "use memcpy", t);
    if (a->role == BL_CONTROLLER && a->runs_in != BL_RUNS_PROCESS && a->runs_in != BL_RUNS_ANY)
        return bl_oob_fail(err, n, BL_EINVAL, "%s reaches coprocessors in other processes; this controller expects one "
                           "in its own process", t);
    r->role = a->role;
    r->runs_in = a->runs_in;
    snprintf(r->key, sizeof r->key, "%s", a->key);
    r->host = h;
    r->session = a->session;
    r->slots = a->slots;
    r->slot_bytes = a->slot_bytes;
    const char *host = h->config_str(a->session, "host");
    if (!host || !h->config_str(a->session, "port"))
        return bl_oob_fail(err, n, BL_EINVAL, "%s needs the coprocessor's endpoint (keys host and port): give the "
                           "coprocessor endpoint=Endpoint(host=..., port=...)", t);
    if (strlen(host) >= sizeof r->host_name)
        return bl_oob_fail(err, n, BL_EINVAL, "host=%.40s...: longer than %zu characters", host, sizeof r->host_name - 1);
    snprintf(r->host_name, sizeof r->host_name, "%s", host);
    int64_t v;
    int32_t rc;
    if ((rc = h->config_int(a->session, "port", 1, 65535, 0, &v, err, n))) return rc;
    r->port = (int)v;
    if ((rc = h->config_int(a->session, "cpu", -1, CPU_SETSIZE - 1, -1, &v, err, n))) return rc;
    r->cpu = (int)v;
    if ((rc = h->config_int(a->session, "rt_priority", 0, 99, 0, &v, err, n))) return rc;
    r->rt_priority = (int)v;
    r->connect_timeout_ns = a->connect_timeout_ns;
    r->timeout_ns = a->timeout_ns;
    /* The secret is read when the session connects: resolution opens sessions only to check
     * their configuration, before a deployment has made the secret it gives both ends. */
    const char *secret = h->config_str(a->session, "secret_file");
    if (secret && strlen(secret) >= sizeof r->secret_path)
        return bl_oob_fail(err, n, BL_EINVAL, "secret_file=%.40s...: longer than %zu characters", secret,
                           sizeof r->secret_path - 1);
    snprintf(r->secret_path, sizeof r->secret_path, "%s", secret ? secret : "");
    return BL_OK;
}

/* The secret of secret_file, from connect (both roles). */
static int32_t read_secret(bl_remote *r, char *err, size_t n) {
    if (r->secret.len) return BL_OK;
    if (!r->secret_path[0])
        return bl_oob_fail(err, n, BL_EINVAL, "%s authenticates both ends with a secret: give both nodes "
                           "secret_file=PATH, a file only you can read (deploy and bench make one per deployment; "
                           "`backline secret new PATH` makes one for nodes started by hand)", r->proto->transport);
    char what[320];
    snprintf(what, sizeof what, "for %s %s '%s'", r->proto->transport,
             r->role == BL_CONTROLLER ? "controller" : "coprocessor", r->key);
    return bl_oob_secret_read(r->secret_path, what, &r->secret, err, n);
}

/* The transcript of this connection's handshake (backline/trust.h), context = HELLO's ask. */
static int32_t transcript(const bl_remote *r, int fd, int server_side, const uint8_t *ns, const uint8_t *hello,
                          bl_oob_transcript *t, char *err, size_t n) {
    memset(t, 0, sizeof *t);
    t->protocol = r->proto->transport;
    memcpy(t->server_nonce, ns, NONCE_BYTES);
    memcpy(t->client_nonce, hello + HELLO_ASK, NONCE_BYTES);
    t->context = hello;
    t->context_len = HELLO_ASK;
    return bl_oob_addresses(fd, server_side, t, err, n);
}

/* ---- controller ---- */

int32_t bl_remote_dial(bl_remote *r, uint64_t deadline, uint8_t *peer, char *err, size_t n) {
    if (r->fd >= 0) close(r->fd); /* a retried connect dials again */
    r->fd = -1;
    int32_t rc = read_secret(r, err, n);
    if (rc) return rc;
    rc = bl_oob_dial(r->host_name, r->port, deadline, r->proto->transport, &r->fd, err, n);
    if (rc) return rc;
    r->same_host = bl_remote_same_host(r->fd);
    char who[300];
    snprintf(who, sizeof who, "the peer at %s:%d", r->host_name, r->port);
    uint8_t ns[NONCE_BYTES], hello[HELLO_BYTES] = {0}, offer[BL_OOB_MAX_BODY], want[TAG_BYTES];
    bl_oob_transcript t;
    /* CHALLENGE: the coprocessor's nonce; HELLO: what this controller asks for, its nonce, its proof. */
    if ((rc = recv_msg(r, r->fd, HS_CHALLENGE, ns, deadline, who, err, n))) return rc;
    bl_oob_put32(hello, BACKLINE_ABI_VERSION);
    memcpy(hello + 4, r->key, strlen(r->key));
    if ((rc = bl_oob_nonce(hello + HELLO_ASK, err, n)) || (rc = transcript(r, r->fd, 0, ns, hello, &t, err, n)) ||
        (rc = bl_oob_tag(&r->secret, "client", &t, hello + HELLO_ASK + NONCE_BYTES, err, n)))
        return rc;
    if ((rc = send_msg(r, r->fd, HS_HELLO, hello, deadline, err, n))) return rc;
    if ((rc = recv_msg(r, r->fd, HS_OFFER, offer, deadline, who, err, n))) return rc;
    int32_t status = (int32_t)bl_oob_get32(offer);
    const uint8_t *text_at = offer + OFFER_HEAD + r->proto->peer_bytes;
    char text[TEXT_BYTES * 4];
    get_text(text_at, text, sizeof text);
    if (status == BL_EAUTH)
        return bl_oob_fail(err, n, BL_EAUTH, "the coprocessor at %s:%d refused this controller's authentication: %s",
                           r->host_name, r->port, text);
    /* Only the holder of the secret can answer this connection's HELLO; anything else is not ours. */
    if ((rc = bl_oob_tag(&r->secret, "server", &t, want, err, n))) return rc;
    if (!bl_oob_tags_equal(want, text_at + TEXT_BYTES))
        return bl_oob_fail(err, n, BL_EAUTH, "the peer at %s:%d did not prove it holds this placement's secret (a wrong "
                           "OFFER tag): it is not this controller's coprocessor, or its secret_file holds another "
                           "secret", r->host_name, r->port);
    if (status != BL_OK)
        return bl_oob_fail(err, n, status == BL_EBUSY || status == BL_ENOTFOUND || status == BL_EABI ? status : BL_EPEER,
                           "the coprocessor at %s:%d refused this controller: %s", r->host_name, r->port, text);
    uint32_t slots = bl_oob_get32(offer + 4), slot_bytes = bl_oob_get32(offer + 8);
    if (!slots || slots > BL_MAX_SLOTS || (slots & (slots - 1)) || slot_bytes < BL_SLOT_ALIGN ||
        slot_bytes > BL_MAX_SLOT_BYTES || slot_bytes % BL_SLOT_ALIGN)
        return bl_oob_fail(err, n, BL_EPEER, "%s offered an impossible ring (slots=%u slot_bytes=%u)", who, slots,
                           slot_bytes);
    r->slots = slots; /* the coprocessor owns the geometry, as a memcpy coprocessor owns its region */
    r->slot_bytes = slot_bytes;
    r->base = bl_oob_get64(offer + 12);
    memcpy(peer, offer + OFFER_HEAD, r->proto->peer_bytes);
    return BL_OK;
}

int32_t bl_remote_connect(bl_remote *r, const uint8_t *peer, uint64_t deadline, char *err, size_t n) {
    char who[300];
    snprintf(who, sizeof who, "the coprocessor at %s:%d", r->host_name, r->port);
    uint8_t ready[READY_BYTES];
    int32_t rc;
    if ((rc = send_msg(r, r->fd, HS_CONNECT, peer, deadline, err, n))) return rc;
    if ((rc = recv_msg(r, r->fd, HS_READY, ready, deadline, who, err, n))) return rc;
    if ((int32_t)bl_oob_get32(ready) != BL_OK) {
        char text[TEXT_BYTES * 4];
        get_text(ready + 4, text, sizeof text);
        return bl_oob_fail(err, n, BL_EPEER, "%s could not %s: %s", who, r->proto->accepting, text);
    }
    return BL_OK;
}

int bl_remote_alive(const bl_remote *r) {
    if (!bl_oob_peer_closed(r->fd)) return 1;
    char text[400];
    snprintf(text, sizeof text, "its connection from %s:%d closed (the coprocessor exited or was killed)", r->host_name,
             r->port);
    r->host->error_text(text);
    return 0;
}

uint64_t bl_remote_establish(bl_remote *r, bl_channel *ch, uint8_t *request_ring, uint8_t *reply_ring,
                             const bl_remote_hooks *hooks, void *impl) {
    r->rings[0] = ch->request_ring = request_ring;
    r->rings[1] = ch->reply_ring = reply_ring;
    ch->slots = r->slots;
    ch->slot_bytes = r->slot_bytes;
    ch->impl = impl;
    if (r->role != BL_CONTROLLER) {
        ch->deliver = hooks->coprocessor_deliver;
        ch->poll = hooks->coprocessor_poll;
        return 0;
    }
    ch->deliver = hooks->controller_deliver;
    ch->poll = hooks->controller_poll;
    ch->peer_alive = hooks->controller_alive;
    if (!r->base) return 0;
    uint32_t slot = (uint32_t)((r->base - 1) & (r->slots - 1));
    for (int which = 0; which < 2; ++which)
        __atomic_store_n((uint64_t *)(r->rings[which] + (size_t)slot * r->slot_bytes), r->base, __ATOMIC_RELEASE);
    return r->base;
}

/* ---- coprocessor ---- */

int32_t bl_remote_listen(bl_remote *r, char *err, size_t n) {
    if (r->listen_fd >= 0) return BL_OK;
    int32_t rc = read_secret(r, err, n);
    if (rc) return rc;
    return bl_oob_listen(r->host_name, r->port, &r->listen_fd, err, n);
}

/* The highest sequence number in ring `which`. */
static uint64_t highest(const bl_remote *r, int which) {
    uint64_t top = 0;
    for (uint32_t i = 0; i < r->slots; ++i) {
        uint64_t s = __atomic_load_n((uint64_t *)(r->rings[which] + (size_t)i * r->slot_bytes), __ATOMIC_ACQUIRE);
        if (s > top) top = s;
    }
    return top;
}

/* Refuse a controller with a reason it can show (best effort: it may have gone), and hang up.
 * t: the transcript of a controller that proved it holds the secret (the refusal carries this
 * side's tag, so the controller can believe it), or NULL. */
static void refuse(const bl_remote *r, int fd, int32_t status, const char *text, const bl_oob_transcript *t,
                   uint64_t deadline) {
    uint8_t offer[BL_OOB_MAX_BODY] = {0};
    char ignored[64];
    uint8_t *text_at = offer + OFFER_HEAD + r->proto->peer_bytes;
    bl_oob_put32(offer, (uint32_t)status);
    put_text(text_at, text);
    if (t) bl_oob_tag(&r->secret, "server", t, text_at + TEXT_BYTES, ignored, sizeof ignored);
    send_msg(r, fd, HS_OFFER, offer, deadline, ignored, sizeof ignored);
    close(fd);
}

/* A line about a refused peer, at most one a second: a flood of junk must not flood stderr. */
static void note_refused(bl_remote *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note_refused(bl_remote *r, const char *fmt, ...) {
    uint64_t now = bl_oob_now_ns();
    if (r->last_note_ns && now - r->last_note_ns < 1000000000ull) {
        ++r->notes_held;
        return;
    }
    char text[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (r->notes_held) bl_remote_note(r, "%s (and %llu more refusals in the last second)", text, (unsigned long long)r->notes_held);
    else bl_remote_note(r, "%s", text);
    r->last_note_ns = now;
    r->notes_held = 0;
}

/* Whether an authenticated controller's HELLO may be served; if not it is refused. What this
 * port serves is never named: a refusal says only what was asked for. */
static int welcome(bl_remote *r, int fd, const uint8_t *hello, const bl_oob_transcript *t, uint64_t deadline) {
    char key[BL_KEY_MAX_LEN + 1], text[TEXT_BYTES];
    memcpy(key, hello + 4, BL_KEY_MAX_LEN);
    key[BL_KEY_MAX_LEN] = 0;
    uint32_t abi = bl_oob_get32(hello);
    if (abi != BACKLINE_ABI_VERSION) {
        snprintf(text, sizeof text, "the controller is Backline ABI %u, this coprocessor ABI %d", abi,
                 BACKLINE_ABI_VERSION);
        refuse(r, fd, BL_EABI, text, t, deadline);
        return 0;
    }
    if (strcmp(key, r->key)) {
        char shown[BL_KEY_MAX_LEN * 4 + 1];
        bl_oob_printable((const uint8_t *)key, strlen(key), shown, sizeof shown);
        snprintf(text, sizeof text, "this port does not serve key '%.64s'", shown);
        refuse(r, fd, BL_ENOTFOUND, text, t, deadline);
        return 0;
    }
    if (r->ctl_fd >= 0 && !bl_oob_peer_closed(r->ctl_fd)) {
        refuse(r, fd, BL_EBUSY, "another controller holds this coprocessor; one controller at a time", t, deadline);
        return 0;
    }
    return 1;
}

/* The rest of an authenticated controller's handshake, on the acceptor thread. On success its
 * link is published for the poller and fd stays open as r->ctl_fd (its closing tells us the
 * controller has gone). */
static void admit(bl_remote *r, int fd, const uint8_t *hello, const bl_oob_transcript *t) {
    const bl_remote_links *L = r->links;
    uint64_t deadline = bl_oob_now_ns() + r->connect_timeout_ns;
    char err[512], ignored[64];
    uint8_t offer[BL_OOB_MAX_BODY] = {0}, body[BL_OOB_MAX_BODY], ready[READY_BYTES] = {0};
    int32_t rc;
    if (!welcome(r, fd, hello, t, deadline)) return;
    /* Every request the last controller got in must be answered before the next one numbers
     * its rounds after them. */
    uint64_t served;
    while ((served = highest(r, 1)) != highest(r, 0)) {
        if (bl_oob_now_ns() > deadline) {
            refuse(r, fd, BL_EPEER, "a previous controller's last round is still unanswered", t, deadline);
            return;
        }
        usleep(100);
    }
    r->same_host = bl_remote_same_host(fd);
    void *link = L->create(r->arg, offer + OFFER_HEAD, &rc, err, sizeof err);
    if (!link) {
        refuse(r, fd, rc, err, t, deadline);
        bl_remote_note(r, "cannot take a controller: %s", err);
        return;
    }
    bl_oob_put32(offer, BL_OK);
    bl_oob_put32(offer + 4, r->slots);
    bl_oob_put32(offer + 8, r->slot_bytes);
    bl_oob_put64(offer + 12, served);
    if ((rc = bl_oob_tag(&r->secret, "server", t, offer + OFFER_HEAD + r->proto->peer_bytes + TEXT_BYTES, err,
                         sizeof err)) ||
        (rc = send_msg(r, fd, HS_OFFER, offer, deadline, err, sizeof err)) ||
        (rc = recv_msg(r, fd, HS_CONNECT, body, deadline, "the controller", err, sizeof err))) {
        bl_remote_note(r, "a controller went away during its handshake: %s", err);
        goto drop;
    }
    rc = L->accept(r->arg, link, body, err, sizeof err);
    bl_oob_put32(ready, (uint32_t)rc);
    put_text(ready + 4, rc ? err : "");
    if (rc) {
        send_msg(r, fd, HS_READY, ready, deadline, ignored, sizeof ignored);
        bl_remote_note(r, "cannot connect to a controller: %s", err);
        goto drop;
    }
    /* The link goes to the poller before READY does to the controller: its first request may
     * be in this side's ring before this thread runs again (ucx's receive handler is the
     * worker's, not a link's), and the reply needs the link. One that the poller never picked
     * up (its controller came and went without a round) is taken back here. Should READY fail,
     * the link stays: a gone controller's link carries no rounds, and the next one replaces it. */
    void *unused = __atomic_exchange_n(&r->next_link, link, __ATOMIC_ACQ_REL);
    if (unused) L->destroy(r->arg, unused);
    if ((rc = send_msg(r, fd, HS_READY, ready, deadline, err, sizeof err))) {
        bl_remote_note(r, "a controller went away during its handshake: %s", err);
        close(fd);
        return;
    }
    if (r->ctl_fd >= 0) close(r->ctl_fd);
    r->ctl_fd = fd;
    return;
drop:
    L->destroy(r->arg, link);
    close(fd);
}

/* A new connection: into the gate (which may close the oldest pending one to make room), sent
 * this side's nonce. Nothing is read from it until it has proved it holds the secret. */
static void challenge(bl_remote *r, bl_oob_gate *g, int fd) {
    bl_oob_pending *p = bl_oob_gate_admit(g, fd, 0);
    char err[256];
    if (bl_oob_nonce(p->nonce, err, sizeof err) ||
        bl_oob_send_msg(fd, r->proto->magic, r->proto->version, HS_CHALLENGE, p->nonce, NONCE_BYTES,
                        bl_oob_now_ns() + 100000000ull, err, sizeof err)) {
        note_refused(r, "dropped a connection before its handshake: %s", err);
        bl_oob_gate_drop(g, p, 1);
    }
}

static void peer_name(int fd, char *out, size_t n) {
    struct sockaddr_storage a;
    socklen_t len = sizeof a;
    char host[64] = "?";
    int port = 0;
    if (getpeername(fd, (struct sockaddr *)&a, &len) == 0) {
        if (a.ss_family == AF_INET) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)&a)->sin_addr, host, sizeof host);
            port = ntohs(((struct sockaddr_in *)&a)->sin_port);
        } else if (a.ss_family == AF_INET6) {
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&a)->sin6_addr, host, sizeof host);
            port = ntohs(((struct sockaddr_in6 *)&a)->sin6_port);
        }
    }
    snprintf(out, n, "%s:%d", host, port);
}

/* Bytes from a pending connection: its HELLO's header (checked first: a peer that is not this
 * transport's, or of another version, is refused before its body is read), then the body,
 * whose tag decides. An authenticated controller goes on to admit. */
static void on_pending(bl_remote *r, bl_oob_gate *g, bl_oob_pending *p) {
    size_t need = p->got < BL_OOB_HEADER_BYTES ? BL_OOB_HEADER_BYTES : BL_OOB_HEADER_BYTES + HELLO_BYTES;
    ssize_t k = recv(p->fd, p->buf + p->got, need - p->got, MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        bl_oob_gate_drop(g, p, 1);
        return;
    }
    if (k < 0) return;
    p->got += (size_t)k;
    if (p->got < need) return;
    char who[80], err[512];
    peer_name(p->fd, who, sizeof who);
    uint64_t deadline = bl_oob_now_ns() + 100000000ull;
    if (need == BL_OOB_HEADER_BYTES) {
        bl_stream_header h = bl_stream_header_get(p->buf);
        if (h.magic != r->proto->magic || h.type != HS_HELLO) {
            char text[64];
            bl_oob_printable(p->buf, BL_OOB_HEADER_BYTES, text, sizeof text);
            note_refused(r, "refused a connection from %s: not a Backline %s controller (it sent \"%s\")", who,
                         r->proto->transport, text);
            bl_oob_gate_drop(g, p, 1);
        } else if (h.version != r->proto->version) {
            char text[TEXT_BYTES];
            snprintf(text, sizeof text, "the controller speaks version %u of the %s handshake, this coprocessor "
                     "version %u; run both sides from the same backline-transport-%s", h.version, r->proto->transport,
                     r->proto->version, r->proto->transport);
            note_refused(r, "refused a connection from %s: %s", who, text);
            int fd = p->fd;
            bl_oob_gate_drop(g, p, 0);
            refuse(r, fd, BL_EABI, text, NULL, deadline);
        } else if (h.body_bytes != HELLO_BYTES) {
            note_refused(r, "refused a connection from %s: a HELLO of %u bytes, not %u", who, h.body_bytes, HELLO_BYTES);
            bl_oob_gate_drop(g, p, 1);
        }
        return; /* the body is read when it comes */
    }
    const uint8_t *hello = p->buf + BL_OOB_HEADER_BYTES;
    bl_oob_transcript t;
    uint8_t want[TAG_BYTES];
    int32_t rc = transcript(r, p->fd, 1, p->nonce, hello, &t, err, sizeof err);
    if (!rc) rc = bl_oob_tag(&r->secret, "client", &t, want, err, sizeof err);
    int fd = p->fd;
    if (rc || !bl_oob_tags_equal(want, hello + HELLO_ASK + NONCE_BYTES)) {
        if (!rc) snprintf(err, sizeof err, "authentication failed");
        note_refused(r, "refused a connection from %s: %s", who, err);
        bl_oob_gate_drop(g, p, 0);
        refuse(r, fd, BL_EAUTH, "authentication failed: this controller does not hold the coprocessor's secret "
               "(give both nodes the same secret_file)", NULL, deadline);
        return;
    }
    uint8_t copy[HELLO_BYTES];
    memcpy(copy, hello, sizeof copy);
    t.context = copy;
    bl_oob_gate_drop(g, p, 0);
    admit(r, fd, copy, &t);
}

/* Connections in their handshake are served together (each within its deadline, at most
 * BL_TRUST_MAX_PENDING_PER_PEER from one address); an authenticated controller is admitted,
 * one at a time; the current controller's connection is watched for its closing. */
static void *acceptor(void *arg) {
    bl_remote *r = arg;
    bl_oob_gate *g = malloc(sizeof *g);
    if (!g) {
        bl_remote_note(r, "out of memory: this coprocessor takes no controllers");
        return NULL;
    }
    bl_oob_gate_init(g);
    enum { FIXED = 3 };
    struct pollfd p[FIXED + BL_TRUST_MAX_PENDING];
    bl_oob_pending *at[BL_TRUST_MAX_PENDING];
    while (!__atomic_load_n(&r->stopping, __ATOMIC_ACQUIRE)) {
        p[0] = (struct pollfd){.fd = r->listen_fd, .events = POLLIN};
        p[1] = (struct pollfd){.fd = r->stop_fd, .events = POLLIN};
        p[2] = (struct pollfd){.fd = r->ctl_fd, .events = POLLIN}; /* -1: ignored by poll */
        uint64_t now = bl_oob_now_ns(), wake = now + 1000000000ull;
        int np = FIXED;
        for (size_t i = 0; i < BL_TRUST_MAX_PENDING; ++i) {
            bl_oob_pending *e = &g->entry[i];
            if (e->fd < 0) continue;
            if (e->deadline <= now) { /* it did not prove itself in time */
                bl_oob_gate_drop(g, e, 1);
                continue;
            }
            if (e->deadline < wake) wake = e->deadline;
            at[np - FIXED] = e;
            p[np++] = (struct pollfd){.fd = e->fd, .events = POLLIN};
        }
        int got = poll(p, (nfds_t)np, (int)((wake - now + 999999) / 1000000));
        if (got < 0 && errno != EINTR) break;
        if (got <= 0) continue;
        if (p[1].revents) break;
        if (r->ctl_fd >= 0 && p[2].revents) {
            if (bl_oob_peer_closed(r->ctl_fd)) {
                close(r->ctl_fd); /* its controller has gone: the next may come */
                r->ctl_fd = -1;
            } else {
                uint8_t junk[256]; /* nothing is due after READY: drop it rather than wake on it forever */
                if (recv(r->ctl_fd, junk, sizeof junk, MSG_DONTWAIT) < 0 && errno != EAGAIN) {
                    close(r->ctl_fd);
                    r->ctl_fd = -1;
                }
            }
        }
        for (int i = FIXED; i < np; ++i)
            if (p[i].revents && at[i - FIXED]->fd == p[i].fd) on_pending(r, g, at[i - FIXED]);
        if (p[0].revents) {
            int fd; /* everything waiting, so a burst does not sit in the backlog */
            for (int k = 0; k < (int)BL_TRUST_MAX_PENDING && bl_oob_accept(r->listen_fd, &fd) == 1; ++k) challenge(r, g, fd);
        }
    }
    bl_oob_gate_clear(g);
    free(g);
    return NULL;
}

static void *poller(void *arg) {
    bl_remote *r = arg;
    r->host->serve(r->session);
    return NULL;
}

int32_t bl_remote_start(bl_remote *r, char *err, size_t n) {
    if (r->role != BL_COPROCESSOR) return BL_OK;
    r->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (r->stop_fd < 0) return bl_oob_fail(err, n, BL_EBACKEND, "eventfd: %s", strerror(errno));
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    size_t o = (size_t)snprintf(r->applied, sizeof r->applied, "poller thread");
    if (r->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(r->cpu, &set);
        pthread_attr_setaffinity_np(&attr, sizeof set, &set);
        o += (size_t)snprintf(r->applied + o, sizeof r->applied - o, " pinned to CPU %d", r->cpu);
    }
    int e = pthread_create(&r->poller, &attr, poller, r);
    pthread_attr_destroy(&attr);
    if (e)
        return bl_oob_fail(err, n, BL_EBACKEND, "cannot start the poller thread%s: %s", r->cpu >= 0 ? " (pinned)" : "",
                           strerror(e));
    r->poller_running = 1;
    if (r->rt_priority > 0 && o < sizeof r->applied) {
        /* Best effort: an unprivileged process is refused, and says so. */
        struct sched_param sp = {.sched_priority = r->rt_priority};
        e = pthread_setschedparam(r->poller, SCHED_FIFO, &sp);
        snprintf(r->applied + o, sizeof r->applied - o, e ? ", SCHED_FIFO %d not applied (%s)" : ", SCHED_FIFO %d",
                 r->rt_priority, strerror(e));
    }
    if (r->cpu >= 0 || r->rt_priority > 0) bl_remote_note(r, "%s", r->applied);
    e = pthread_create(&r->acceptor, NULL, acceptor, r);
    if (e) return bl_oob_fail(err, n, BL_EBACKEND, "cannot start the acceptor thread: %s", strerror(e));
    r->acceptor_running = 1;
    return BL_OK;
}

void bl_remote_stop(bl_remote *r) {
    if (r->poller_running) {
        pthread_join(r->poller, NULL); /* the core set the stop flag */
        r->poller_running = 0;
    }
    if (r->acceptor_running) {
        __atomic_store_n(&r->stopping, 1, __ATOMIC_RELEASE);
        uint64_t one = 1;
        if (write(r->stop_fd, &one, sizeof one) < 0) { /* the 1 s poll timeout still ends it */
        }
        pthread_join(r->acceptor, NULL);
        r->acceptor_running = 0;
    }
    if (r->fd >= 0) {
        close(r->fd); /* tells the coprocessor at once that the next controller may come */
        r->fd = -1;
    }
}

void bl_remote_close(bl_remote *r) {
    bl_remote_stop(r);
    void *unused = __atomic_exchange_n(&r->next_link, NULL, __ATOMIC_ACQ_REL);
    if (unused) r->links->destroy(r->arg, unused);
    bl_oob_secret_clear(&r->secret);
    int *fds[] = {&r->listen_fd, &r->stop_fd, &r->ctl_fd};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; ++i)
        if (*fds[i] >= 0) {
            close(*fds[i]);
            *fds[i] = -1;
        }
}

/* ---- the whole backend of a networked transport (bl_remote_backend) ---- */

/* One session of a networked transport: the control plane, the transport's state and the
 * link of the moment (the controller's one; the coprocessor's current controller's, which
 * only its poller uses). The round-path hooks are copied out of the record: one load less. */
struct net {
    bl_remote r;
    const bl_remote_transport *t;
    void *state;
    void *link;
    uint8_t *rings; /* request ring, then reply ring */
    int own_rings;  /* the core allocated them (t->alloc is NULL) */
    int32_t (*deliver)(void *state, void *link, const uint8_t *frame, uint64_t seq, uint32_t slot);
    void (*poll)(void *state, void *link);
    uint8_t offered[BL_OOB_MAX_BODY]; /* controller: the coprocessor's peer part, from its OFFER */
};

static const bl_remote_transport *the_transport; /* this library's (bl_remote_backend) */

/* bl_remote_links onto the record's, for the acceptor thread. */
static void *net_link_create(void *arg, uint8_t *peer, int32_t *rc, char *err, size_t n) {
    struct net *m = arg;
    return m->t->link_create(m->state, peer, rc, err, n);
}

static int32_t net_link_accept(void *arg, void *link, const uint8_t *record, char *err, size_t n) {
    struct net *m = arg;
    bl_remote_peer p = {.record = record, .who = "the controller", .same_host = m->r.same_host};
    return m->t->link_accept(m->state, link, &p, err, n);
}

static void net_link_destroy(void *arg, void *link) {
    struct net *m = arg;
    m->t->link_destroy(m->state, link);
}

static const bl_remote_links net_links = {net_link_create, net_link_accept, net_link_destroy};

static void net_free(struct net *m) {
    if (m->link) m->t->link_destroy(m->state, m->link);
    m->link = NULL;
    if (m->t->release) m->t->release(m->state);
    if (m->own_rings) free(m->rings);
    free(m->state);
    free(m);
}

static int32_t net_open(const bl_open_args *a, void **impl, char *err, size_t n) {
    const bl_remote_transport *t = the_transport;
    struct net *m = calloc(1, sizeof *m);
    if (!m) return bl_oob_fail(err, n, BL_ENOMEM, "out of memory");
    m->t = t;
    m->deliver = t->deliver;
    m->poll = t->poll;
    m->state = calloc(1, t->state_bytes ? t->state_bytes : 1);
    if (!m->state) {
        free(m);
        return bl_oob_fail(err, n, BL_ENOMEM, "out of memory");
    }
    int32_t rc = bl_remote_open(&m->r, &t->protocol, &net_links, m, a, err, n);
    if (!rc) rc = t->open(m->state, &m->r, a, err, n);
    if (rc) {
        net_free(m);
        return rc;
    }
    *impl = m;
    return BL_OK;
}

static int32_t net_connect(void *impl, uint64_t deadline, char *err, size_t n) {
    struct net *m = impl;
    int32_t rc = m->t->prepare ? m->t->prepare(m->state, err, n) : BL_OK;
    if (rc) return rc;
    if (m->r.role == BL_CONTROLLER) return bl_remote_dial(&m->r, deadline, m->offered, err, n);
    return bl_remote_listen(&m->r, err, n);
}

static int32_t net_alloc_memory(void *impl, char *err, size_t n) {
    struct net *m = impl;
    if (m->rings) return BL_OK;
    size_t bytes = 2 * (size_t)m->r.slots * m->r.slot_bytes;
    if (m->t->alloc) return m->t->alloc(m->state, bytes, &m->rings, err, n);
    m->rings = aligned_alloc(BL_SLOT_ALIGN, bytes); /* a multiple of 64: slot_bytes is */
    if (!m->rings) return bl_oob_fail(err, n, BL_ENOMEM, "cannot allocate %zu bytes of rings", bytes);
    memset(m->rings, 0, bytes);
    m->own_rings = 1;
    return BL_OK;
}

/* A controller's link to the coprocessor whose OFFER it read, then CONNECT + READY. (A
 * coprocessor exchanges with each controller as it comes, on its acceptor thread.) */
static int32_t net_exchange_keys(void *impl, uint64_t deadline, char *err, size_t n) {
    struct net *m = impl;
    if (m->r.role != BL_CONTROLLER) return BL_OK;
    const bl_remote_transport *t = m->t;
    if (m->link) t->link_destroy(m->state, m->link); /* a retried exchange starts afresh */
    uint8_t mine[BL_OOB_MAX_BODY];
    int32_t rc;
    if (!(m->link = t->link_create(m->state, mine, &rc, err, n))) return rc;
    char who[300];
    snprintf(who, sizeof who, "the coprocessor at %s:%d", m->r.host_name, m->r.port);
    bl_remote_peer p = {.record = m->offered, .who = who, .same_host = m->r.same_host};
    if ((rc = t->link_accept(m->state, m->link, &p, err, n))) return rc;
    if (t->link_start && (rc = t->link_start(m->state, m->link, err, n))) return rc;
    return bl_remote_connect(&m->r, mine, deadline, err, n);
}

static int32_t ctl_deliver(void *impl, uint64_t seq, uint32_t slot) {
    struct net *m = impl;
    int32_t rc = m->deliver(m->state, m->link, m->r.rings[0] + (size_t)slot * m->r.slot_bytes, seq, slot);
    if (__builtin_expect(rc != BL_OK, 0)) m->r.host->error_text(m->t->failure(m->state, m->link));
    return rc;
}

static void ctl_poll(void *impl) {
    struct net *m = impl;
    m->poll(m->state, m->link);
}

static int32_t ctl_alive(void *impl) {
    struct net *m = impl;
    if (!m->t->alive(m->state, m->link)) {
        m->r.host->error_text(m->t->failure(m->state, m->link));
        return 0;
    }
    return bl_remote_alive(&m->r);
}

/* The link of the coprocessor's current controller. One the acceptor has just admitted is
 * taken here, on the poller, the only thread that uses links once taken: the last
 * controller's goes now, and the new one starts on this thread. */
static inline void *current_link(struct net *m) {
    void *next = bl_remote_take(&m->r);
    if (__builtin_expect(next != NULL, 0)) {
        if (m->link) m->t->link_destroy(m->state, m->link);
        m->link = next;
        char err[256];
        if (m->t->link_start && m->t->link_start(m->state, next, err, sizeof err)) bl_remote_note(&m->r, "%s", err);
    }
    return m->link;
}

static void cop_poll(void *impl) {
    struct net *m = impl;
    m->poll(m->state, current_link(m));
}

static int32_t cop_deliver(void *impl, uint64_t seq, uint32_t slot) {
    struct net *m = impl;
    void *link = current_link(m);
    if (__builtin_expect(!link, 0)) return BL_EPEER;
    return m->deliver(m->state, link, m->r.rings[1] + (size_t)slot * m->r.slot_bytes, seq, slot);
}

static const bl_remote_hooks net_hooks = {
    .controller_deliver = ctl_deliver,
    .controller_poll = ctl_poll,
    .controller_alive = ctl_alive,
    .coprocessor_deliver = cop_deliver,
    .coprocessor_poll = cop_poll,
};

static int32_t net_establish(void *impl, bl_channel *ch, uint64_t deadline, char *err, size_t n) {
    (void)deadline;
    (void)err;
    (void)n;
    struct net *m = impl;
    uint8_t *reply_ring = m->rings + (size_t)m->r.slots * m->r.slot_bytes;
    m->r.received = bl_remote_establish(&m->r, ch, m->rings, reply_ring, &net_hooks, m); /* replies come after it */
    if (m->r.role == BL_CONTROLLER && m->t->describe) {
        char text[256] = "";
        m->t->describe(m->state, m->link, text, sizeof text);
        if (text[0]) bl_remote_note(&m->r, "%s", text);
    }
    return BL_OK;
}

static int32_t net_start(void *impl, char *err, size_t n) {
    struct net *m = impl;
    return bl_remote_start(&m->r, err, n);
}

static int32_t net_stop(void *impl, char *err, size_t n) {
    (void)err;
    (void)n;
    struct net *m = impl;
    bl_remote_stop(&m->r);
    return BL_OK;
}

static void net_close(void *impl) {
    struct net *m = impl;
    bl_remote_close(&m->r); /* its threads are gone: the links are this thread's */
    net_free(m);
}

static bl_backend net_backend;
static pthread_once_t net_backend_once = PTHREAD_ONCE_INIT;

static void net_backend_init(void) {
    net_backend = (bl_backend){
        .abi_version = BACKLINE_ABI_VERSION,
        .name = the_transport->name,
        .config_keys = the_transport->config_keys,
        .open = net_open,
        .connect = net_connect,
        .alloc_memory = net_alloc_memory,
        .exchange_keys = net_exchange_keys,
        .establish_channel = net_establish,
        .start = net_start,
        .stop = net_stop,
        .close = net_close,
    };
}

const bl_backend *bl_remote_backend(const bl_remote_transport *t) {
    const bl_remote_transport *none = NULL;
    __atomic_compare_exchange_n(&the_transport, &none, t, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    if (__atomic_load_n(&the_transport, __ATOMIC_ACQUIRE) != t) return NULL; /* one transport per library */
    pthread_once(&net_backend_once, net_backend_init);
    return &net_backend;
}
