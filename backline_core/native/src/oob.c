/* The out-of-band TCP side of networked transports (see backline/sdk/oob.h). */
#define _GNU_SOURCE
#include <backline/backline.h>
#include <backline/sdk/oob.h>
#include <backline/sdk/stream_frame.h>

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int32_t bl_oob_fail(char *err, size_t n, int32_t rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return rc;
}

uint64_t bl_oob_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- byte order: oob.h's names for backline/sdk/stream_frame.h's ---- */

void bl_oob_put32(uint8_t *p, uint32_t v) { bl_be_put32(p, v); }
void bl_oob_put64(uint8_t *p, uint64_t v) { bl_be_put64(p, v); }
uint32_t bl_oob_get32(const uint8_t *p) { return bl_be_get32(p); }
uint64_t bl_oob_get64(const uint8_t *p) { return bl_be_get64(p); }

void bl_oob_printable(const uint8_t *p, size_t len, char *out, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < len && o + 5 < n; ++i)
        o += (size_t)snprintf(out + o, n - o, p[i] >= 32 && p[i] < 127 && p[i] != '\\' ? "%c" : "\\x%02x", p[i]);
    out[o < n ? o : n - 1] = 0;
}

/* ---- TCP with deadlines ---- */

static int32_t resolve(const char *host, int port, struct addrinfo **out, int passive, char *err, size_t n) {
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    int rc = getaddrinfo(host, service, &hints, out);
    if (rc) return bl_oob_fail(err, n, BL_EINVAL, "cannot resolve host '%s': %s", host, gai_strerror(rc));
    return BL_OK;
}

int32_t bl_oob_listen(const char *host, int port, int *fd, char *err, size_t n) {
    struct addrinfo *ai = NULL;
    int32_t rc = resolve(host, port, &ai, 1, err, n);
    if (rc) return rc;
    int e = 0, s = -1;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (s < 0) {
            e = errno;
            continue;
        }
        int one = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(s, a->ai_addr, a->ai_addrlen) == 0 && listen(s, 8) == 0) break;
        e = errno;
        close(s);
        s = -1;
    }
    freeaddrinfo(ai);
    if (s < 0) {
        if (e == EADDRINUSE)
            return bl_oob_fail(err, n, BL_EBUSY, "port %d on %s is in use (another coprocessor, or another program, listens "
                        "there); give this coprocessor another Endpoint port", port, host);
        if (e == EADDRNOTAVAIL)
            return bl_oob_fail(err, n, BL_EINVAL, "cannot listen on %s:%d: %s is not an address of this machine", host, port, host);
        return bl_oob_fail(err, n, BL_EBACKEND, "cannot listen on %s:%d: %s", host, port, strerror(e));
    }
    *fd = s;
    return BL_OK;
}

static int wait_fd(int fd, short events, uint64_t deadline) {
    for (;;) {
        uint64_t now = bl_oob_now_ns();
        if (now >= deadline) return 0;
        uint64_t left_ms = (deadline - now + 999999) / 1000000;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, left_ms > 100 ? 100 : (int)left_ms);
        if (r > 0) return 1;
        if (r < 0 && errno != EINTR) return -1;
    }
}

int32_t bl_oob_dial(const char *host, int port, uint64_t deadline, const char *transport, int *fd, char *err,
                    size_t n) {
    struct addrinfo *ai = NULL;
    int32_t rc = resolve(host, port, &ai, 0, err, n);
    if (rc) return rc;
    int last = ECONNREFUSED;
    for (;;) {
        for (struct addrinfo *a = ai; a; a = a->ai_next) {
            int s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
            if (s < 0) {
                last = errno;
                continue;
            }
            int r = connect(s, a->ai_addr, a->ai_addrlen);
            if (r != 0 && errno == EINPROGRESS) {
                r = wait_fd(s, POLLOUT, deadline) == 1 ? 0 : -1;
                int so = ETIMEDOUT;
                socklen_t len = sizeof so;
                if (r == 0 && (getsockopt(s, SOL_SOCKET, SO_ERROR, &so, &len) != 0 || so != 0)) r = -1;
                errno = so;
            }
            if (r == 0) {
                int one = 1;
                setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                freeaddrinfo(ai);
                *fd = s;
                return BL_OK;
            }
            last = errno;
            close(s);
        }
        if (bl_oob_now_ns() + 20000000ull >= deadline) break;
        struct timespec ts = {0, 20 * 1000 * 1000}; /* the coprocessor may not be listening yet */
        nanosleep(&ts, NULL);
    }
    freeaddrinfo(ai);
    return bl_oob_fail(err, n, BL_ETIMEOUT, "no %s coprocessor answered at %s:%d before connect_timeout_ms (last: %s); "
                       "start it first, e.g. `backline coprocessor serve --transport %s --config 'host=%s;port=%d' ...`",
                       transport, host, port, strerror(last), transport, host, port);
}

int bl_oob_accept(int listen_fd, int *fd) {
    int s = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (s < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED ? 0 : -1;
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    *fd = s;
    return 1;
}

int32_t bl_oob_send_all(int fd, const void *buf, size_t len, uint64_t deadline, char *err, size_t n) {
    const uint8_t *p = buf;
    while (len) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            len -= (size_t)w;
            continue;
        }
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            int r = wait_fd(fd, POLLOUT, deadline);
            if (r == 0) return bl_oob_fail(err, n, BL_ETIMEOUT, "the peer did not take the handshake before the deadline");
            if (r < 0) return bl_oob_fail(err, n, BL_EPEER, "poll: %s", strerror(errno));
            continue;
        }
        return bl_oob_fail(err, n, BL_EPEER, "the connection broke: %s", strerror(errno));
    }
    return BL_OK;
}

int32_t bl_oob_recv_all(int fd, void *buf, size_t len, uint64_t deadline, char *err, size_t n) {
    uint8_t *p = buf;
    size_t want = len;
    while (len) {
        ssize_t r = recv(fd, p, len, 0);
        if (r > 0) {
            p += r;
            len -= (size_t)r;
            continue;
        }
        if (r == 0)
            return bl_oob_fail(err, n, BL_EPEER, "the peer closed the connection after %zu of %zu bytes", want - len, want);
        if (errno == EAGAIN || errno == EINTR) {
            int w = wait_fd(fd, POLLIN, deadline);
            if (w == 0)
                return bl_oob_fail(err, n, BL_ETIMEOUT, "the peer sent %zu of %zu bytes before the deadline", want - len, want);
            if (w < 0) return bl_oob_fail(err, n, BL_EPEER, "poll: %s", strerror(errno));
            continue;
        }
        return bl_oob_fail(err, n, BL_EPEER, "the connection broke: %s", strerror(errno));
    }
    return BL_OK;
}

int bl_oob_peer_closed(int fd) {
    uint8_t b;
    ssize_t r = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0) return 1;
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return 1;
    return 0;
}

/* ---- handshake messages ---- */

_Static_assert(BL_OOB_HEADER_BYTES == BL_STREAM_HEADER_BYTES, "a handshake message starts with a stream frame header");

int32_t bl_oob_send_msg(int fd, uint32_t magic, uint16_t version, uint16_t type, const uint8_t *body, uint32_t len,
                    uint64_t deadline, char *err, size_t n) {
    uint8_t msg[BL_OOB_HEADER_BYTES + BL_OOB_MAX_BODY];
    if (len > BL_OOB_MAX_BODY)
        return bl_oob_fail(err, n, BL_EINVAL, "a handshake body of %u bytes is over the %u allowed", len, BL_OOB_MAX_BODY);
    bl_stream_header_put(msg, magic, version, type, len);
    memcpy(msg + BL_OOB_HEADER_BYTES, body, len);
    return bl_oob_send_all(fd, msg, BL_OOB_HEADER_BYTES + len, deadline, err, n);
}

int32_t bl_oob_recv_header(int fd, bl_oob_header *h, uint64_t deadline, char *err, size_t n) {
    uint8_t b[BL_OOB_HEADER_BYTES];
    int32_t rc = bl_oob_recv_all(fd, b, sizeof b, deadline, err, n);
    if (rc) return rc;
    bl_stream_header f = bl_stream_header_get(b);
    h->magic = f.magic, h->version = f.version, h->type = f.type, h->body_bytes = f.body_bytes;
    bl_oob_printable(b, sizeof b, h->text, sizeof h->text);
    return BL_OK;
}

