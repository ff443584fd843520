/* The executor client's sockets: I/O with deadlines, "host:port" addresses, and dialing. */
#define _GNU_SOURCE
#include "executor_internal.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- I/O with deadlines ---- */

/* Wait until fd is ready for `events` or the deadline (bl__now() ns) passes. */
static int wait_fd(int fd, short events, uint64_t deadline, int *err) {
    for (;;) {
        uint64_t now = bl__now();
        if (now >= deadline) return IO_TIMEOUT;
        uint64_t ms = (deadline - now + NS_PER_MS - 1) / NS_PER_MS;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, ms > INT_MAX ? INT_MAX : (int)ms);
        if (r > 0) return IO_OK; /* readable, writable, or an error the next call reports */
        if (r < 0 && errno != EINTR) return *err = errno, IO_ERR;
    }
}

int ex_send_all(int fd, const void *buf, size_t n, uint64_t deadline, int *err) {
    const uint8_t *p = buf;
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k > 0) {
            p += k, n -= (size_t)k;
        } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int rc = wait_fd(fd, POLLOUT, deadline, err);
            if (rc != IO_OK) return rc;
        } else if (k < 0 && errno != EINTR) {
            return *err = errno, IO_ERR;
        }
    }
    return IO_OK;
}

int ex_recv_all(int fd, void *buf, size_t n, uint64_t deadline, int *err) {
    uint8_t *p = buf;
    while (n) {
        ssize_t k = recv(fd, p, n, 0);
        if (k > 0) {
            p += k, n -= (size_t)k;
        } else if (k == 0) {
            return IO_EOF;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int rc = wait_fd(fd, POLLIN, deadline, err);
            if (rc != IO_OK) return rc;
        } else if (errno != EINTR) {
            return *err = errno, IO_ERR;
        }
    }
    return IO_OK;
}

/* ---- addresses ---- */

/* Split "host:port" / "[v6]:port" into host and port (checked, not resolved). */
int32_t ex_parse_address(const char *address, char *host, size_t hostcap, char *port, size_t portcap) {
    static const char *const form = "give \"host:port\" (an IPv6 host in brackets: \"[::1]:9000\")";
    if (!address || !*address) return bl__fail(BL_EINVAL, "the executor address is empty: %s", form);
    size_t len = strlen(address);
    if (len >= ADDRESS_MAX)
        return bl__fail(BL_EINVAL, "the executor address is %zu bytes long; at most %d are accepted", len,
                        ADDRESS_MAX - 1);
    const char *h, *colon;
    size_t hlen;
    if (address[0] == '[') {
        const char *close = strchr(address, ']');
        if (!close) return bl__fail(BL_EINVAL, "executor address '%s' has no closing ']': %s", address, form);
        h = address + 1, hlen = (size_t)(close - h), colon = close + 1;
        if (*colon != ':')
            return bl__fail(BL_EINVAL, "executor address '%s' has no ':port' after ']': %s", address, form);
    } else {
        colon = strrchr(address, ':');
        if (!colon) return bl__fail(BL_EINVAL, "executor address '%s' has no port: %s", address, form);
        h = address, hlen = (size_t)(colon - h);
        if (memchr(h, ':', hlen))
            return bl__fail(BL_EINVAL, "executor address '%s' is ambiguous: %s", address, form);
    }
    if (hlen == 0) return bl__fail(BL_EINVAL, "executor address '%s' has no host: %s", address, form);
    if (hlen >= hostcap) return bl__fail(BL_EINVAL, "the host of executor address '%s' is too long", address);
    const char *p = colon + 1;
    size_t plen = strlen(p);
    unsigned long v = 0;
    int ok = plen >= 1 && plen <= 5 && plen < portcap;
    for (size_t i = 0; ok && i < plen; ++i) {
        if (p[i] < '0' || p[i] > '9') ok = 0;
        else v = v * 10 + (unsigned long)(p[i] - '0');
    }
    if (!ok || v < 1 || v > 65535)
        return bl__fail(BL_EINVAL, "the port '%s' of executor address '%s' is not a number in 1..65535", p, address);
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    memcpy(port, p, plen + 1);
    return BL_OK;
}

/* Resolve and connect (non-blocking, by the deadline); TCP_NODELAY and SO_KEEPALIVE on. */
int32_t ex_dial(const char *address, uint64_t deadline, int64_t budget_ms, int *out) {
    char host[ADDRESS_MAX], port[8];
    int32_t rc = ex_parse_address(address, host, sizeof host, port, sizeof port);
    if (rc) return rc;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int g = getaddrinfo(host, port, &hints, &ai);
    if (g) {
        int transient = g == EAI_AGAIN || g == EAI_SYSTEM || g == EAI_MEMORY;
        return bl__fail(transient ? BL_EPEER : BL_EINVAL, "cannot resolve the host '%s' of executor address '%s': %s",
                        host, address, g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
    }
    int last_err = 0;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            last_err = errno;
            continue;
        }
        int err = 0;
        if (connect(fd, a->ai_addr, a->ai_addrlen) < 0) {
            if (errno != EINPROGRESS) {
                err = errno;
            } else {
                int w = wait_fd(fd, POLLOUT, deadline, &err);
                if (w == IO_TIMEOUT) {
                    close(fd);
                    freeaddrinfo(ai);
                    return bl__fail(BL_ETIMEOUT, "cannot connect to executor at %s: no answer within %lld ms",
                                    address, (long long)budget_ms);
                }
                socklen_t sl = sizeof err;
                if (w == IO_OK && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) < 0) err = errno;
            }
        }
        if (err) {
            last_err = err;
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* requests are small and latency-bound */
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
        freeaddrinfo(ai);
        *out = fd;
        return BL_OK;
    }
    freeaddrinfo(ai);
    return bl__fail(BL_EPEER, "cannot connect to executor at %s: %s (is `backline executor serve` running there?)",
                    address, strerror(last_err ? last_err : ECONNREFUSED));
}
