/*
 * backline/bench_floor.h -- the C side of a networked transport's bench floor (the Python
 * side is backline_core._bench_floor): what every bare ping-pong floor does the same way,
 * whatever carries its messages. A transport's floor embeds a bl_floor in its handle and
 * gives a bl_floor_ops of its own data path (an RDMA WRITE, a UCX active message).
 *
 * Rounds: the initiator stages round i's echo payload (backline/pingpong.h) and the next
 * counter (1, 2, 3, ..., little-endian), waits out the cadence's gap, reads the clock, has
 * ops->send send it, and spins on ops->arrived until the reply's counter is the round's;
 * about once a millisecond it calls ops->check (the path's own failure signs), looks at
 * the out-of-band connection (a killed peer's kernel closes it at once) and the deadline.
 * Then it compares every payload byte. The responder spins the same way and has ops->reply
 * send back what came. A failure breaks the handle: the peer's state is unknown.
 *
 * Header-only, static inline, so that a floor's own callbacks inline into these loops (a
 * constant ops table): the floor stays bare. Needs backline/oob.h's functions (a plugin
 * compiles oob.c in: plain_library(..., oob=True)).
 */
#ifndef BACKLINE_BENCH_FLOOR_H
#define BACKLINE_BENCH_FLOOR_H

#include <backline/backline.h>
#include <backline/bench.h>
#include <backline/oob.h>
#include <backline/pingpong.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
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
    char error[BL_FLOOR_ERROR_BYTES];
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

/* Responder: pin this thread, then take ONE initiator within wait_ms (0: the connect timeout).
 * admit(ctx, fd) handshakes: 1 admitted, 0 or BL_EINVAL/BL_EPEER refused (f->error says why;
 * the next peer may be the right one), another status a local failure that ends the wait.
 * BL_OK with f->fd set, BL_OK with f->fd < 0 on a stop, or a failure. */
static inline int32_t bl_floor_accept(bl_floor *f, uint64_t wait_ms, int32_t (*admit)(void *ctx, int fd), void *ctx) {
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
        int32_t rc = admit(ctx, fd);
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
    return BL_OK;
}

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

/* Responder: take one initiator (bl_floor_accept), then echo its rounds (bl_floor_echo). */
static inline int32_t bl_floor_serve(bl_floor *f, uint64_t wait_ms, int32_t (*admit)(void *ctx, int fd),
                                     const bl_floor_ops *ops, void *ctx) {
    if (!f || !f->responder) return BL_EINVAL;
    int32_t rc = bl_floor_accept(f, wait_ms, admit, ctx);
    if (rc || f->fd < 0) return rc;
    return bl_floor_echo(f, ops, ctx);
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

#endif
