/*
 * backline/sdk/bench_floor.h -- the C side of a networked transport's bench floor (the Python
 * side is backline_core._bench_floor): everything a bare ping-pong floor does the same way,
 * whatever carries its messages. A transport gives one record (bl_floor_transport: its
 * handshake's magic, its peer record's size, its set-up and its data path: an RDMA WRITE, a
 * UCX active message); this header owns listen, serve (the handshake and the echo), open, the
 * rounds and close, and BL_FLOOR_EXPORTS makes the library's functions of them.
 *
 * Handshake (out of band, one TCP connection the initiator dials and keeps open; its closing
 * ends the serve): backline/sdk/oob.h's 12-byte header with the floor's magic, then
 *     HELLO  (1, initiator -> responder): payload_bytes (4) | flags 0 (4) | peer record
 *     ACCEPT (2, responder -> initiator): status (4, signed) | peer record | text (160, NUL-padded)
 * The responder aims its path at the initiator's record before it answers, so the first round
 * finds it ready.
 *
 * Rounds: the initiator stages round i's echo payload (backline/sdk/pingpong.h) and the next
 * counter (1, 2, 3, ..., little-endian), waits out the cadence's gap, reads the clock, has
 * ops->send send it, and spins on ops->arrived until the reply's counter is the round's;
 * about once a millisecond it calls ops->check (the path's own failure signs), looks at
 * the out-of-band connection (a killed peer's kernel closes it at once) and the deadline.
 * Then it compares every payload byte. The responder spins the same way and has ops->reply
 * send back what came. A failure breaks the handle: the peer's state is unknown.
 *
 * Header-only, static inline, so that a floor's own callbacks inline into these loops (a
 * constant record): the floor stays bare. Needs backline/sdk/oob.h's functions and
 * bl_remote_same_host (a plugin compiles oob.c and remote.c in: plain_library(..., oob=True)).
 */
#ifndef BACKLINE_BENCH_FLOOR_H
#define BACKLINE_BENCH_FLOOR_H

#include <backline/backline.h>
#include <backline/bench.h>
#include <backline/sdk/oob.h>
#include <backline/sdk/pingpong.h>
#include <backline/sdk/remote.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BL_FLOOR_ERROR_BYTES 512u
#define BL_FLOOR_CHECK_NS 1000000ull /* look at the path, the socket and the deadline this often */

typedef struct bl_floor {
    int responder;
    int fd, listen_fd; /* the out-of-band connection (its closing ends a serve), the responder's socket */
    char host[256];
    int port, cpu;
    uint64_t timeout_ns, connect_timeout_ns;
    uint32_t payload_bytes;
    uint64_t seq; /* the last round answered */
    int broken;   /* a round failed: the peer's state is unknown */
    int32_t cadence;
    uint32_t lfsr;
    uint64_t gap_base_ns, gap_span_mask;
    int stop;
    double ns_per_tick;
    uint8_t *tx, *rx; /* the payload buffers: what the initiator sends, what the peer's messages land in */
    char error[BL_FLOOR_ERROR_BYTES];
    uint8_t hello[BL_OOB_MAX_BODY], accept_[BL_OOB_MAX_BODY]; /* the handshake's (large: not on a stack) */
} bl_floor;

/* A floor's data path. `ctx` is the transport's handle; `tx` and `rx` are its payload buffers. */
typedef struct bl_floor_ops {
    int32_t (*send)(void *ctx, uint64_t counter_le); /* the initiator's tx, with this counter */
    int32_t (*reply)(void *ctx, uint64_t counter_le); /* the responder's rx as it came */
    int (*arrived)(void *ctx, uint64_t counter_le);   /* the counter of what came (progressing the path) */
    int32_t (*check)(void *ctx);                      /* BL_OK, or the path's failure (in the floor's error) */
} bl_floor_ops;

/* The round clock's calibration, once per floor library (each is one translation unit). */
static double bl_floor__ns_per_tick = 1.0;
static pthread_once_t bl_floor__calibrated = PTHREAD_ONCE_INIT;
static void bl_floor__calibrate(void) { bl_floor__ns_per_tick = bl_pingpong_measure_ns_per_tick(); }
static inline double bl_floor_ns_per_tick(void) {
    pthread_once(&bl_floor__calibrated, bl_floor__calibrate);
    return bl_floor__ns_per_tick;
}

/* A floor's handshake: its own magic and version, and the transport's magic, which a peer on
 * the wrong port speaks (named in the error). */
typedef struct bl_floor_protocol {
    uint32_t magic, transport_magic;
    uint16_t version;
    const char *transport;    /* "rdma" */
    const char *distribution; /* "backline-transport-rdma" */
} bl_floor_protocol;

#define BL_FLOOR_HELLO 1u
#define BL_FLOOR_ACCEPT 2u
#define BL_FLOOR_TEXT_BYTES 160u /* the refusal text that ends an ACCEPT, NUL-padded */

#define BL_FLOOR_FAIL(f, rc, ...) bl_oob_fail((f)->error, sizeof (f)->error, (rc), __VA_ARGS__)

/* The settings both sides share; port 0 lets a responder take any free port. */
static inline int32_t bl_floor_init(bl_floor *f, int responder, const char *host, int32_t port, int32_t cpu,
                                    uint64_t timeout_ms, char *err, size_t n) {
    memset(f, 0, sizeof *f);
    f->fd = f->listen_fd = -1;
    f->responder = responder;
    f->cpu = cpu;
    f->port = port;
    f->ns_per_tick = bl_floor_ns_per_tick();
    if (!host || !*host) return bl_oob_fail(err, n, BL_EINVAL, "the floor needs a host to listen on or dial (e.g. 127.0.0.1)");
    if (strlen(host) >= sizeof f->host)
        return bl_oob_fail(err, n, BL_EINVAL, "host '%.40s...' is longer than %zu characters", host, sizeof f->host - 1);
    snprintf(f->host, sizeof f->host, "%s", host);
    if (responder && (port < 0 || port > 65535))
        return bl_oob_fail(err, n, BL_EINVAL, "port %d: give 1 to 65535 (or 0: any free port)", port);
    if (!responder && (port < 1 || port > 65535))
        return bl_oob_fail(err, n, BL_EINVAL, "port %d: give the responder's port, 1 to 65535", port);
    if (cpu >= CPU_SETSIZE)
        return bl_oob_fail(err, n, BL_EINVAL, "cpu %d: give a CPU number below %d (or -1)", cpu, CPU_SETSIZE);
    if (timeout_ms < 1 || timeout_ms > BL_MAX_TIMEOUT_MS)
        return bl_oob_fail(err, n, BL_EINVAL, "timeout_ms %llu: give 1 to %u", (unsigned long long)timeout_ms,
                           BL_MAX_TIMEOUT_MS);
    f->timeout_ns = timeout_ms * 1000000ull;
    uint64_t c = timeout_ms > BL_DEFAULT_CONNECT_TIMEOUT_MS ? timeout_ms : BL_DEFAULT_CONNECT_TIMEOUT_MS;
    f->connect_timeout_ns = c * 1000000ull;
    return BL_OK;
}

static inline int32_t bl_floor_check_payload(uint32_t payload_bytes, char *err, size_t n) {
    if (payload_bytes < 1 || payload_bytes > BL_BENCH_MAX_PAYLOAD_BYTES)
        return bl_oob_fail(err, n, BL_ETOOBIG, "payload_bytes %u: the floor carries 1 to %u bytes", payload_bytes,
                           BL_BENCH_MAX_PAYLOAD_BYTES);
    return BL_OK;
}

static inline int32_t bl_floor_send_msg(const bl_floor_protocol *p, int fd, uint16_t type, const uint8_t *body,
                                        uint32_t len, uint64_t deadline, char *err, size_t n) {
    return bl_oob_send_msg(fd, p->magic, p->version, type, body, len, deadline, err, n);
}

/* A message of `type` and `len` bytes from `who`, or a clear refusal of what came instead. */
static inline int32_t bl_floor_recv_msg(const bl_floor_protocol *p, int fd, uint16_t type, uint8_t *body, uint32_t len,
                                        uint64_t deadline, const char *who, char *err, size_t n) {
    bl_oob_header m;
    char why[256], mine[5], theirs[5];
    for (int i = 0; i < 4; ++i) {
        mine[i] = (char)(p->magic >> (24 - 8 * i));
        theirs[i] = (char)(p->transport_magic >> (24 - 8 * i));
    }
    mine[4] = theirs[4] = 0;
    int32_t rc = bl_oob_recv_header(fd, &m, deadline, why, sizeof why);
    if (rc)
        return bl_oob_fail(err, n, rc, "%s sent no floor %s message (%s)", who,
                           type == BL_FLOOR_HELLO ? "HELLO" : "ACCEPT", why);
    if (m.magic == p->transport_magic)
        return bl_oob_fail(err, n, BL_EPEER, "%s speaks the %s transport's handshake (\"%s\"), not the floor's (\"%s\"): "
                           "it is a Backline %s coprocessor or controller; give the floor a port of its own", who,
                           p->transport, theirs, mine, p->transport);
    if (m.magic != p->magic)
        return bl_oob_fail(err, n, BL_EPEER, "%s is not a floor peer: it sent \"%s\" where the floor's handshake starts "
                           "with \"%s\"", who, m.text, mine);
    if (m.version != p->version)
        return bl_oob_fail(err, n, BL_EABI, "%s speaks version %u of the floor's handshake, this side version %u; run "
                           "both sides from the same %s", who, m.version, p->version, p->distribution);
    if (m.type != type || m.body_bytes != len)
        return bl_oob_fail(err, n, BL_EPEER, "%s sent floor message type %u of %u bytes where type %u of %u was due", who,
                           m.type, m.body_bytes, type, len);
    rc = bl_oob_recv_all(fd, body, len, deadline, why, sizeof why);
    if (rc) return bl_oob_fail(err, n, rc, "%s sent a truncated floor message (%s)", who, why);
    return BL_OK;
}

/* Responder: refuse an initiator with status rc and the text in f->error, put into the
 * ACCEPT's last BL_FLOOR_TEXT_BYTES (best effort: it may have gone); returns rc. */
static inline int32_t bl_floor_refuse(const bl_floor_protocol *p, bl_floor *f, int fd, int32_t rc, uint8_t *accept_,
                                      uint32_t len, uint64_t deadline) {
    char text[BL_FLOOR_TEXT_BYTES];
    size_t cut = strnlen(f->error, sizeof text - 1); /* to the message's text field */
    memcpy(text, f->error, cut);
    text[cut] = 0;
    memset(accept_, 0, len);
    bl_oob_put32(accept_, (uint32_t)rc);
    memcpy(accept_ + len - BL_FLOOR_TEXT_BYTES, text, strlen(text));
    char ignored[64];
    bl_floor_send_msg(p, fd, BL_FLOOR_ACCEPT, accept_, len, deadline, ignored, sizeof ignored);
    BL_FLOOR_FAIL(f, 0, "refused an initiator: %s", text);
    return rc;
}

/* Initiator: send HELLO, take the ACCEPT (status first, the refusal text last); a refusal is
 * the error, with the status it gave. */
static inline int32_t bl_floor_exchange(const bl_floor_protocol *p, bl_floor *f, const uint8_t *hello,
                                        uint32_t hello_len, uint8_t *accept_, uint32_t accept_len, uint64_t deadline,
                                        char *err, size_t n) {
    char why[BL_FLOOR_ERROR_BYTES], who[300];
    snprintf(who, sizeof who, "the peer at %s:%d", f->host, f->port);
    int32_t rc = bl_floor_send_msg(p, f->fd, BL_FLOOR_HELLO, hello, hello_len, deadline, why, sizeof why);
    if (rc) return bl_oob_fail(err, n, rc, "%s did not take the floor's HELLO: %s", who, why);
    if ((rc = bl_floor_recv_msg(p, f->fd, BL_FLOOR_ACCEPT, accept_, accept_len, deadline, who, why, sizeof why))) {
        if (rc == BL_EPEER || rc == BL_ETIMEOUT)
            return bl_oob_fail(err, n, rc, "%s (is a floor responder listening there? a Backline %s coprocessor, or "
                               "another program, answers otherwise)", why, p->transport);
        return bl_oob_fail(err, n, rc, "%s", why);
    }
    int32_t status = (int32_t)bl_oob_get32(accept_);
    if (status == BL_OK) return BL_OK;
    char text[BL_FLOOR_TEXT_BYTES * 4 + 1], raw[BL_FLOOR_TEXT_BYTES + 1];
    memcpy(raw, accept_ + accept_len - BL_FLOOR_TEXT_BYTES, BL_FLOOR_TEXT_BYTES);
    raw[BL_FLOOR_TEXT_BYTES] = 0;
    bl_oob_printable((const uint8_t *)raw, strlen(raw), text, sizeof text);
    return bl_oob_fail(err, n, status < 0 && status >= BL_EAUTH ? status : BL_EPEER,
                       "the floor responder at %s:%d refused: %s", f->host, f->port, text);
}

static inline void bl_floor_close_sockets(bl_floor *f) {
    if (f->fd >= 0) close(f->fd);
    if (f->listen_fd >= 0) close(f->listen_fd);
    f->fd = f->listen_fd = -1;
}

/* Responder: listen on host:port; f->port is then the port taken. */
static inline int32_t bl_floor_listen(bl_floor *f, char *err, size_t n) {
    char why[512];
    int32_t rc = bl_oob_listen(f->host, f->port, &f->listen_fd, why, sizeof why);
    if (rc) return bl_oob_fail(err, n, rc, "the floor responder cannot listen: %s", why);
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    if (getsockname(f->listen_fd, (struct sockaddr *)&sa, &len) == 0)
        f->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                                 : ((struct sockaddr_in *)&sa)->sin_port);
    return BL_OK;
}

static inline int bl_floor_stopping(const bl_floor *f) { return __atomic_load_n(&f->stop, __ATOMIC_ACQUIRE); }
static inline void bl_floor_request_stop(bl_floor *f) { __atomic_store_n(&f->stop, 1, __ATOMIC_RELEASE); }

/* Responder: echo rounds until the initiator disconnects (BL_OK), a stop (BL_OK), or a failure. */
static inline int32_t bl_floor_echo(bl_floor *f, const bl_floor_ops *ops, void *ctx) {
    const uint64_t check = bl_pingpong_ticks_for_ns(BL_FLOOR_CHECK_NS, f->ns_per_tick);
    for (uint64_t next = 1;; ++next) {
        uint64_t want = bl_pingpong_le64(next), check_at = bl_pingpong_ticks() + check;
        for (uint32_t spins = 0; !ops->arrived(ctx, want);) {
            bl_pingpong_relax();
            if ((++spins & 255u) == 0) {
                if (bl_floor_stopping(f)) return BL_OK;
                uint64_t now = bl_pingpong_ticks();
                if (now >= check_at) {
                    check_at = now + check;
                    /* The initiator's closing first: it is the normal end, after which the
                     * path itself may fail (UCX's endpoint times out). */
                    if (bl_oob_peer_closed(f->fd)) return BL_OK; /* the initiator is done (or gone) */
                    int32_t rc = ops->check(ctx);
                    if (rc) return rc;
                }
            }
        }
        f->seq = next;
        int32_t rc = ops->reply(ctx, want);
        if (rc) return rc;
    }
}

/* Initiator: dial the responder (retrying refusals until `deadline`); `module` is the Python
 * module whose `serve` starts one, for the error of a dial nobody answered. */
static inline int32_t bl_floor_dial(bl_floor *f, const char *module, uint64_t deadline, char *err, size_t n) {
    char why[512];
    int32_t rc = bl_oob_dial(f->host, f->port, deadline, "floor", &f->fd, why, sizeof why);
    if (rc == BL_ETIMEOUT)
        return bl_oob_fail(err, n, rc, "no floor responder answered at %s:%d within %llu ms; start one with `python -m "
                           "%s serve --host %s --port %d`", f->host, f->port,
                           (unsigned long long)(f->connect_timeout_ns / 1000000ull), module, f->host, f->port);
    if (rc) return bl_oob_fail(err, n, rc, "cannot reach the floor responder at %s:%d: %s", f->host, f->port, why);
    return BL_OK;
}

static inline int32_t bl_floor_set_cadence(bl_floor *f, int32_t cadence, uint32_t lfsr, uint64_t gap_base_ns,
                                           uint64_t gap_span_mask) {
    if (f->responder) return BL_EINVAL;
    if (cadence != BL_CADENCE_B2B && cadence != BL_CADENCE_RANDOM_DELAYED)
        return BL_FLOOR_FAIL(f, BL_EINVAL, "cadence %d: 0 (back to back) or 1 (random-delayed)", cadence);
    if (cadence == BL_CADENCE_RANDOM_DELAYED && !lfsr)
        return BL_FLOOR_FAIL(f, BL_EINVAL, "an LFSR seeded with 0 stays 0; give any other seed");
    f->cadence = cadence;
    f->lfsr = lfsr;
    f->gap_base_ns = gap_base_ns;
    f->gap_span_mask = gap_span_mask;
    return BL_OK;
}

/* Initiator: `rounds` round trips from tx to rx and back (see the top). */
static inline int32_t bl_floor_rounds(bl_floor *f, const bl_floor_ops *ops, void *ctx, uint8_t *tx, const uint8_t *rx,
                                      uint64_t first_round, uint64_t rounds, uint64_t *rtt_ns, bl_bench_result *res) {
    if (!res) return BL_EINVAL;
    memset(res, 0, sizeof *res);
    if (!f || f->responder || (rounds && !rtt_ns)) {
        res->first_error = BL_EINVAL;
        if (f) BL_FLOOR_FAIL(f, BL_EINVAL, "a floor's rounds need an initiator handle and rtt_ns");
        return BL_EINVAL;
    }
    if (f->broken && rounds) {
        res->lost = 1;
        res->first_error = BL_ESTATE;
        char was[BL_FLOOR_ERROR_BYTES];
        snprintf(was, sizeof was, "%s", f->error);
        if (strncmp(was, "the floor is broken", 19))
            BL_FLOOR_FAIL(f, 0, "the floor is broken by an earlier failure: %s", was);
        return BL_ESTATE;
    }
    const uint64_t check = bl_pingpong_ticks_for_ns(BL_FLOOR_CHECK_NS, f->ns_per_tick);
    for (uint64_t k = 0; k < rounds; ++k) {
        uint64_t i = first_round + k, seq = f->seq + 1, want = bl_pingpong_le64(seq);
        bl_pingpong_fill(tx, f->payload_bytes, i);
        if (f->cadence == BL_CADENCE_RANDOM_DELAYED) bl_pingpong_wait_gap(&f->lfsr, f->gap_base_ns, f->gap_span_mask);
        uint64_t t0 = bl_pingpong_ticks(); /* after staging, like the framework's post timestamp */
        int32_t rc = ops->send(ctx, want);
        uint64_t deadline = 0, check_at = t0 + check;
        for (uint32_t spins = 0; !rc && !ops->arrived(ctx, want);) {
            bl_pingpong_relax();
            if ((++spins & 255u) == 0) {
                uint64_t now = bl_pingpong_ticks();
                if (now < check_at) continue;
                check_at = now + check;
                uint64_t wall = bl_oob_now_ns();
                if (!deadline) deadline = wall + f->timeout_ns - BL_FLOOR_CHECK_NS; /* the first check is ~1 ms in */
                if ((rc = ops->check(ctx))) break;
                if (bl_oob_peer_closed(f->fd)) {
                    rc = BL_FLOOR_FAIL(f, BL_EPEER, "the floor responder's connection from %s:%d closed in round %llu "
                                       "(it exited or was killed)", f->host, f->port, (unsigned long long)seq);
                    break;
                }
                if (wall > deadline && !ops->arrived(ctx, want)) {
                    rc = BL_FLOOR_FAIL(f, BL_ETIMEOUT, "the floor responder at %s:%d did not answer round %llu within "
                                       "%llu ms (is it stopped, or starved of its CPU?)", f->host, f->port,
                                       (unsigned long long)seq, (unsigned long long)(f->timeout_ns / 1000000ull));
                    break;
                }
            }
        }
        if (rc) {
            f->broken = 1;
            rtt_ns[k] = 0;
            res->lost = 1;
            res->first_error = rc;
            return rc;
        }
        rtt_ns[k] = bl_pingpong_ns_since(t0, f->ns_per_tick);
        f->seq = seq;
        if (memcmp(rx, tx, f->payload_bytes) != 0) res->mismatched++;
        res->done++;
    }
    return BL_OK;
}

/* ---- the floor of a transport record: listen, serve, open, rounds, close ---- */

/* A transport's floor. Its handle (handle_bytes, zeroed by the core) starts with a bl_floor.
 * Each hook writes its failure's text into err (n bytes) and returns its status. */
typedef struct bl_floor_transport {
    bl_floor_protocol protocol;
    const char *module;    /* the Python module whose `serve` starts a responder: for a dial nobody answered */
    uint32_t record_bytes; /* the peer record HELLO and ACCEPT carry */
    size_t handle_bytes;
    bl_floor_ops ops;
    /* What listen and open are given besides the common settings (a device, a tls choice), once. */
    int32_t (*setup)(void *h, const void *args, char *err, size_t n);
    /* The path for payload_bytes: buffers (f.tx, f.rx), queue pair. A responder's next initiator
     * may call it again after a refusal: it replaces what an earlier call made. */
    int32_t (*path)(void *h, uint32_t payload_bytes, char *err, size_t n);
    /* This side's peer record (record_bytes) into out. */
    int32_t (*record)(void *h, uint8_t *out, char *err, size_t n);
    /* Aim the path at the peer's record; same_host: the peer runs on this host. `who` names it. */
    int32_t (*aim)(void *h, const uint8_t *record, int same_host, const char *who, char *err, size_t n);
    /* Free what the handle holds (not the handle), whatever step it reached. */
    void (*release)(void *h);
} bl_floor_transport;

_Static_assert(4u + 4u + BL_FLOOR_TEXT_BYTES <= BL_OOB_MAX_BODY, "a floor message's fixed fields fit");

static inline int32_t bl_floor__check_record(const bl_floor_transport *t, char *err, size_t n) {
    if (t->record_bytes > BL_OOB_MAX_BODY - 4u - BL_FLOOR_TEXT_BYTES)
        return bl_oob_fail(err, n, BL_EINVAL, "the %s floor's peer record of %u bytes does not fit a handshake message",
                           t->protocol.transport, t->record_bytes);
    return BL_OK;
}

/* Free a handle: the sockets first (the peer takes their closing as the end, not a failure). */
static inline void bl_floor_free_handle(const bl_floor_transport *t, bl_floor *f) {
    if (!f) return;
    bl_floor_close_sockets(f);
    if (t->release) t->release(f);
    free(f);
}

/* A zeroed handle with the common settings and the transport's setup done, or NULL with rc. */
static inline bl_floor *bl_floor__new(const bl_floor_transport *t, int responder, const char *host, int32_t port,
                                      int32_t cpu, uint64_t timeout_ms, const void *args, int32_t *rc, char *err,
                                      size_t n) {
    if ((*rc = bl_floor__check_record(t, err, n))) return NULL;
    bl_floor *f = calloc(1, t->handle_bytes);
    if (!f) {
        *rc = bl_oob_fail(err, n, BL_ENOMEM, "out of memory");
        return NULL;
    }
    if ((*rc = bl_floor_init(f, responder, host, port, cpu, timeout_ms, err, n)) ||
        (t->setup && (*rc = t->setup(f, args, err, n)))) {
        bl_floor_free_handle(t, f);
        return NULL;
    }
    return f;
}

/* Responder: a handle listening on host:port (port 0: any free port) after the transport's
 * setup (args: its own). */
static inline int32_t bl_floor_responder(const bl_floor_transport *t, const char *host, int32_t port, int32_t cpu,
                                           uint64_t timeout_ms, const void *args, void **out, char *err, size_t n) {
    if (!out) return bl_oob_fail(err, n, BL_EINVAL, "the %s floor's listen: out is NULL", t->protocol.transport);
    *out = NULL;
    int32_t rc;
    bl_floor *f = bl_floor__new(t, 1, host, port, cpu, timeout_ms, args, &rc, err, n);
    if (!f) return rc;
    if ((rc = bl_floor_listen(f, err, n))) {
        bl_floor_free_handle(t, f);
        return rc;
    }
    *out = f;
    return BL_OK;
}

/* Responder: the handshake with one connection: 1 admitted, else refused (f->error says why). */
static inline int32_t bl_floor__admit(const bl_floor_transport *t, bl_floor *f, int fd) {
    char *err = f->error;
    size_t n = sizeof f->error;
    const uint32_t hello_len = 8u + t->record_bytes, accept_len = 4u + t->record_bytes + BL_FLOOR_TEXT_BYTES;
    uint64_t deadline = bl_oob_now_ns() + f->connect_timeout_ns;
    memset(f->accept_, 0, accept_len);
    int32_t rc = bl_floor_recv_msg(&t->protocol, fd, BL_FLOOR_HELLO, f->hello, hello_len, deadline, "a peer", err, n);
    if (rc) return 0;
    uint32_t payload = bl_oob_get32(f->hello);
    if (bl_floor_check_payload(payload, err, n))
        return bl_floor_refuse(&t->protocol, f, fd, BL_EINVAL, f->accept_, accept_len, deadline);
    f->payload_bytes = payload;
    if ((rc = t->path(f, payload, err, n)) ||
        (rc = t->aim(f, f->hello + 8, bl_remote_same_host(fd), "the initiator", err, n)) ||
        (rc = t->record(f, f->accept_ + 4, err, n)))
        return bl_floor_refuse(&t->protocol, f, fd, rc, f->accept_, accept_len, deadline);
    char why[256];
    if ((rc = bl_floor_send_msg(&t->protocol, fd, BL_FLOOR_ACCEPT, f->accept_, accept_len, deadline, why, sizeof why)))
        return BL_FLOOR_FAIL(f, BL_EPEER, "the initiator went away during the handshake: %s", why);
    return 1;
}

/* Responder: pin this thread, take ONE initiator within wait_ms (0: the connect timeout; refused
 * peers do not end the wait: the next may be the right one), then echo its rounds until it
 * disconnects (BL_OK), a stop (BL_OK), or a failure. */
static inline int32_t bl_floor_serve(const bl_floor_transport *t, bl_floor *f, uint64_t wait_ms) {
    if (!f || !f->responder) return BL_EINVAL;
    if (f->fd >= 0) return BL_FLOOR_FAIL(f, BL_ESTATE, "this floor responder has served its initiator already");
    if (wait_ms > BL_MAX_TIMEOUT_MS)
        return BL_FLOOR_FAIL(f, BL_EINVAL, "wait_ms %llu: give 1 to %u, or 0 for the connect timeout",
                             (unsigned long long)wait_ms, BL_MAX_TIMEOUT_MS);
    uint64_t wait_ns = wait_ms ? wait_ms * 1000000ull : f->connect_timeout_ns;
    if (f->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(f->cpu, &set);
        int e = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
        if (e) return BL_FLOOR_FAIL(f, BL_EINVAL, "cannot pin the floor responder to CPU %d: %s", f->cpu, strerror(e));
    }
    uint64_t deadline = bl_oob_now_ns() + wait_ns;
    char refused[BL_FLOOR_ERROR_BYTES] = "";
    while (f->fd < 0) {
        if (bl_floor_stopping(f)) return BL_OK;
        uint64_t now = bl_oob_now_ns();
        if (now >= deadline)
            return BL_FLOOR_FAIL(f, BL_ETIMEOUT, "no floor initiator connected to %s:%d within %llu ms%s%s", f->host,
                                 f->port, (unsigned long long)(wait_ns / 1000000ull), *refused ? "; " : "", refused);
        struct pollfd p = {.fd = f->listen_fd, .events = POLLIN};
        uint64_t left_ms = (deadline - now + 999999) / 1000000;
        int r = poll(&p, 1, left_ms > 100 ? 100 : (int)left_ms); /* short steps: a stop is seen soon */
        if (r < 0 && errno != EINTR) return BL_FLOOR_FAIL(f, BL_EBACKEND, "poll on the floor's socket: %s", strerror(errno));
        int fd;
        if (r <= 0 || bl_oob_accept(f->listen_fd, &fd) != 1) continue;
        int32_t rc = bl_floor__admit(t, f, fd);
        if (rc == 1) {
            f->fd = fd;
            break;
        }
        snprintf(refused, sizeof refused, "%s", f->error);
        close(fd);
        if (rc < 0 && rc != BL_EINVAL && rc != BL_EPEER) return BL_FLOOR_FAIL(f, rc, "%s", refused);
    }
    close(f->listen_fd); /* one initiator per serve */
    f->listen_fd = -1;
    f->error[0] = 0;
    return bl_floor_echo(f, &t->ops, f);
}

/* Initiator: a handle after the transport's setup (args: its own), dialled to the responder at
 * host:port (retrying refusals), handshaken and aimed. */
static inline int32_t bl_floor_open(const bl_floor_transport *t, const char *host, int32_t port,
                                         uint32_t payload_bytes, uint64_t timeout_ms, const void *args, void **out,
                                         char *err, size_t n) {
    if (!out) return bl_oob_fail(err, n, BL_EINVAL, "the %s floor's open: out is NULL", t->protocol.transport);
    *out = NULL;
    int32_t rc = bl_floor_check_payload(payload_bytes, err, n);
    if (rc) return rc;
    bl_floor *f = bl_floor__new(t, 0, host, port, -1, timeout_ms, args, &rc, err, n);
    if (!f) return rc;
    const uint32_t hello_len = 8u + t->record_bytes, accept_len = 4u + t->record_bytes + BL_FLOOR_TEXT_BYTES;
    f->payload_bytes = payload_bytes;
    bl_oob_put32(f->hello, payload_bytes); /* then flags 0 */
    uint64_t deadline = bl_oob_now_ns() + f->connect_timeout_ns;
    char who[300];
    snprintf(who, sizeof who, "the peer at %s:%d", f->host, f->port);
    if ((rc = t->path(f, payload_bytes, err, n)) || (rc = t->record(f, f->hello + 8, err, n)) ||
        (rc = bl_floor_dial(f, t->module, deadline, err, n)) ||
        (rc = bl_floor_exchange(&t->protocol, f, f->hello, hello_len, f->accept_, accept_len, deadline, err, n)) ||
        (rc = t->aim(f, f->accept_ + 4, bl_remote_same_host(f->fd), who, err, n))) {
        bl_floor_free_handle(t, f);
        return rc;
    }
    *out = f;
    return BL_OK;
}

/* The library functions of a floor whose handle type is P (`typedef struct P P;` in its header,
 * the struct starting with its bl_floor) and whose record is T: P_port, P_serve, P_stop, P_free,
 * P_cadence, P_rounds, P_close, P_ns_per_tick, P_error -- what backline_core._bench_floor calls.
 * The transport writes P_listen and P_open (bl_floor_responder, bl_floor_open, with its
 * own arguments) and P_describe. */
#define BL_FLOOR_EXPORTS(P, T)                                                                                       \
    BL_API int32_t P##_port(const P *h) { return h ? ((const bl_floor *)h)->port : -1; }                           \
    BL_API int32_t P##_serve(P *h, uint64_t wait_ms) {                                                              \
        return h ? bl_floor_serve(&(T), (bl_floor *)h, wait_ms) : BL_EINVAL;                                 \
    }                                                                                                               \
    BL_API void P##_stop(P *h) {                                                                                    \
        if (h) bl_floor_request_stop((bl_floor *)h);                                                                \
    }                                                                                                               \
    BL_API void P##_free(P *h) { bl_floor_free_handle(&(T), (bl_floor *)h); }                                      \
    BL_API int32_t P##_cadence(P *h, int32_t cadence, uint32_t lfsr, uint64_t gap_base_ns, uint64_t gap_span_mask) { \
        return h ? bl_floor_set_cadence((bl_floor *)h, cadence, lfsr, gap_base_ns, gap_span_mask) : BL_EINVAL;     \
    }                                                                                                               \
    BL_API int32_t P##_rounds(P *h, uint64_t first_round, uint64_t rounds, uint64_t *rtt_ns, bl_bench_result *res) { \
        bl_floor *f = (bl_floor *)h;                                                                                \
        return bl_floor_rounds(f, &(T).ops, f, f ? f->tx : NULL, f ? f->rx : NULL, first_round, rounds, rtt_ns, res); \
    }                                                                                                               \
    BL_API void P##_close(P *h) { bl_floor_free_handle(&(T), (bl_floor *)h); }                                     \
    BL_API double P##_ns_per_tick(void) { return bl_floor_ns_per_tick(); }                                         \
    BL_API const char *P##_error(const P *h) { return h ? ((const bl_floor *)h)->error : "no floor handle"; }

#endif
