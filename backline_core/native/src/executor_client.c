/*
 * The executor client (executor.h): TCP connections to `backline executor serve`, the
 * wire protocol of docs/executor-protocol.md, and the marshalling of launches.
 *
 * One connection per address, shared by the sessions opened on it (a reference count in
 * the registry below). A connection's mutex serializes its requests: each request is
 * sent and its one reply read while the mutex is held, so replies pair with requests by
 * order alone. A request that times out or breaks leaves the byte stream in an unknown
 * state, so it ends the connection ("poisons" it): the socket is closed, the reason kept
 * for later calls, and the connection leaves the registry so a new open connects afresh.
 *
 * HMAC-SHA256 and random nonces come from libcrypto, dlopened at first use, so
 * libbackline has no build-time or load-time dependency on OpenSSL.
 */
#define _GNU_SOURCE
#include "backline/executor.h"
#include "internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define SESSION_MAGIC 0x424c455853455353ull /* "BLEXSESS" */
#define ADDRESS_MAX 1024                    /* longer "host:port" strings are refused */
#define LOST_MAX 640
#define SIG_DEPTH_MAX 64 /* nesting of arrays/structs in a signature */
#define NS_PER_MS 1000000ull
#define HMAC_BYTES 32
#define LABEL_BYTES (sizeof BL_EXECUTOR_CLIENT_LABEL - 1)
_Static_assert(sizeof BL_EXECUTOR_CLIENT_LABEL == sizeof BL_EXECUTOR_SERVER_LABEL, "labels of one length");
/* An AWAIT asks the executor to wait this much less than the call's deadline (at most half
 * of it), so that its "not finished" answer arrives before the client gives up. */
#define AWAIT_GRACE_MS 1000ull

/* ---- libcrypto, loaded at first use ------------------------------------------------------- */

typedef const void *(*evp_md_fn)(void);
typedef unsigned char *(*hmac_fn)(const void *md, const void *key, int key_len, const unsigned char *data,
                                  size_t n, unsigned char *out, unsigned int *out_len);
typedef int (*rand_bytes_fn)(unsigned char *buf, int num);
typedef int (*crypto_memcmp_fn)(const void *a, const void *b, size_t n);

static struct {
    hmac_fn hmac;
    evp_md_fn sha256;
    rand_bytes_fn rand_bytes;
    crypto_memcmp_fn memcmp;
    char err[512];
} crypto;
static pthread_once_t crypto_once = PTHREAD_ONCE_INIT;

static void crypto_load(void) {
    void *dl = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
    if (!dl) dl = dlopen("libcrypto.so", RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *why = dlerror();
        snprintf(crypto.err, sizeof crypto.err,
                 "the executor client needs OpenSSL's libcrypto (libcrypto.so.3 or libcrypto.so) for "
                 "authentication and could not load it: %s (install OpenSSL 3, e.g. the libssl3 package)",
                 why ? why : "not found");
        return;
    }
    static const char *const names[] = {"HMAC", "EVP_sha256", "RAND_bytes", "CRYPTO_memcmp"};
    void *fns[4];
    for (int i = 0; i < 4; ++i) {
        fns[i] = dlsym(dl, names[i]);
        if (!fns[i]) {
            snprintf(crypto.err, sizeof crypto.err,
                     "the loaded libcrypto does not export %s, which the executor client needs "
                     "(install OpenSSL 3, e.g. the libssl3 package)", names[i]);
            return; /* dl stays loaded: harmless, and dlclose could unload a copy others use */
        }
    }
    crypto.sha256 = (evp_md_fn)fns[1];
    crypto.rand_bytes = (rand_bytes_fn)fns[2];
    crypto.memcmp = (crypto_memcmp_fn)fns[3];
    __atomic_store_n(&crypto.hmac, (hmac_fn)fns[0], __ATOMIC_RELEASE);
}

static int32_t crypto_ready(void) {
    pthread_once(&crypto_once, crypto_load);
    if (!__atomic_load_n(&crypto.hmac, __ATOMIC_ACQUIRE)) return bl__fail(BL_EBACKEND, "%s", crypto.err);
    return BL_OK;
}

/* HMAC-SHA256(key, label || a || b), each of a and b BL_EXECUTOR_NONCE_BYTES long. */
static int32_t hmac_tag(const uint8_t *key, size_t klen, const char *label, const uint8_t *a, const uint8_t *b,
                        uint8_t out[HMAC_BYTES]) {
    uint8_t msg[LABEL_BYTES + 2 * BL_EXECUTOR_NONCE_BYTES];
    memcpy(msg, label, LABEL_BYTES);
    memcpy(msg + LABEL_BYTES, a, BL_EXECUTOR_NONCE_BYTES);
    memcpy(msg + LABEL_BYTES + BL_EXECUTOR_NONCE_BYTES, b, BL_EXECUTOR_NONCE_BYTES);
    unsigned int n = 0;
    const unsigned char *r = crypto.hmac(crypto.sha256(), key, (int)klen, msg, sizeof msg, out, &n);
    explicit_bzero(msg, sizeof msg);
    if (!r || n != HMAC_BYTES) return bl__fail(BL_EBACKEND, "libcrypto's HMAC-SHA256 failed");
    return BL_OK;
}

/* ---- byte order ------------------------------------------------------------------------------ */

static void put_u16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8), p[1] = (uint8_t)v; }
static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (24 - 8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; ++i) p[i] = (uint8_t)(v >> (56 - 8 * i));
}
static uint16_t get_u16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static uint64_t get_u64(const uint8_t *p) { return (uint64_t)get_u32(p) << 32 | get_u32(p + 4); }

static void put_header(uint8_t *h, uint16_t type, uint32_t len) {
    put_u32(h, BL_EXECUTOR_MAGIC);
    put_u16(h + 4, BL_EXECUTOR_PROTOCOL_VERSION);
    put_u16(h + 6, type);
    put_u32(h + 8, len);
}

/* ---- socket I/O with deadlines ----------------------------------------------------------------- */

enum { IO_OK, IO_TIMEOUT, IO_EOF, IO_ERR };

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

static int send_all(int fd, const void *buf, size_t n, uint64_t deadline, int *err) {
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

static int recv_all(int fd, void *buf, size_t n, uint64_t deadline, int *err) {
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

static uint64_t deadline_after(int64_t ms) { return bl__now() + (uint64_t)ms * NS_PER_MS; }

/* ---- addresses --------------------------------------------------------------------------------- */

/* Split "host:port" / "[v6]:port" into host and port (checked, not resolved). */
static int32_t parse_address(const char *address, char *host, size_t hostcap, char *port, size_t portcap) {
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
static int32_t dial(const char *address, uint64_t deadline, int64_t budget_ms, int *out) {
    char host[ADDRESS_MAX], port[8];
    int32_t rc = parse_address(address, host, sizeof host, port, sizeof port);
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

/* ---- configuration and secrets ------------------------------------------------------------------- */

struct config {
    char *address;
    char *secret_file; /* NULL: env BACKLINE_EXECUTOR_SECRET_FILE */
    int64_t timeout_ms; /* 0: env BACKLINE_EXECUTOR_TIMEOUT_MS or the default */
    struct config *next;
};

static int32_t env_timeout(int64_t *out) {
    const char *v = getenv("BACKLINE_EXECUTOR_TIMEOUT_MS");
    if (!v || !*v) {
        *out = BL_EXECUTOR_DEFAULT_TIMEOUT_MS;
        return BL_OK;
    }
    char *end;
    errno = 0;
    long long t = strtoll(v, &end, 10);
    if (errno || *end || end == v || t < 1 || t > (long long)BL_MAX_TIMEOUT_MS)
        return bl__fail(BL_EINVAL, "BACKLINE_EXECUTOR_TIMEOUT_MS='%s' is not a whole number of milliseconds in 1..%u",
                        v, BL_MAX_TIMEOUT_MS);
    *out = t;
    return BL_OK;
}

/* Read the secret from `path` into key (capacity BL_EXECUTOR_MAX_SECRET_BYTES + 2), checking
 * the file as the server does: a regular file of this user, no group/other bits. */
static int32_t read_secret(const char *path, const char *address, uint8_t *key, size_t *klen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK); /* a FIFO must not block us */
    if (fd < 0) {
        int e = errno;
        return bl__fail(BL_EINVAL, "cannot open the secret file '%s' for executor %s: %s", path, address,
                        strerror(e));
    }
    struct stat st;
    int32_t rc = BL_OK;
    if (fstat(fd, &st) < 0) {
        rc = bl__fail(BL_EINVAL, "cannot stat the secret file '%s' for executor %s: %s", path, address,
                      strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        rc = bl__fail(BL_EINVAL, "the secret file '%s' for executor %s is not a regular file", path, address);
    } else if (st.st_uid != geteuid()) {
        rc = bl__fail(BL_EINVAL, "the secret file '%s' for executor %s belongs to uid %u, not to this user (uid %u): "
                      "use a copy of your own (chmod 600 it)", path, address, (unsigned)st.st_uid,
                      (unsigned)geteuid());
    } else if (st.st_mode & 077) {
        rc = bl__fail(BL_EINVAL, "the secret file '%s' for executor %s is open to group/other (mode %04o): chmod 600 %s",
                      path, address, (unsigned)(st.st_mode & 07777), path);
    }
    size_t n = 0, cap = BL_EXECUTOR_MAX_SECRET_BYTES + 2; /* room to see one byte too many */
    while (!rc && n < cap) {
        ssize_t k = read(fd, key + n, cap - n);
        if (k == 0) break;
        if (k < 0 && errno == EINTR) continue;
        if (k < 0)
            rc = bl__fail(BL_EINVAL, "cannot read the secret file '%s' for executor %s: %s", path, address,
                          strerror(errno));
        else n += (size_t)k;
    }
    close(fd);
    if (rc) {
        explicit_bzero(key, cap);
        return rc;
    }
    if (n && key[n - 1] == '\n') --n; /* the one trailing newline an editor or `echo` adds */
    if (n < BL_EXECUTOR_MIN_SECRET_BYTES || n > BL_EXECUTOR_MAX_SECRET_BYTES) {
        explicit_bzero(key, cap);
        if (n > BL_EXECUTOR_MAX_SECRET_BYTES)
            return bl__fail(BL_EINVAL, "the secret file '%s' for executor %s holds more than %u bytes; a secret has "
                            "%u..%u bytes", path, address, BL_EXECUTOR_MAX_SECRET_BYTES, BL_EXECUTOR_MIN_SECRET_BYTES,
                            BL_EXECUTOR_MAX_SECRET_BYTES);
        return bl__fail(BL_EINVAL, "the secret file '%s' for executor %s holds %zu bytes; a secret has %u..%u bytes",
                        path, address, n, BL_EXECUTOR_MIN_SECRET_BYTES, BL_EXECUTOR_MAX_SECRET_BYTES);
    }
    *klen = n;
    return BL_OK;
}

/* ---- connections and sessions ------------------------------------------------------------------- */

struct conn {
    char *address;
    int refs;           /* registry_mu: sessions using it */
    int linked;         /* registry_mu: in the registry (found by open) */
    int64_t timeout_ms; /* atomic: the per-call deadline */
    struct conn *next;  /* registry_mu */
    pthread_mutex_t mu; /* one request at a time; guards the fields below */
    int fd;             /* -1 once lost or closed */
    char lost[LOST_MAX]; /* why the connection ended */
    char **sent;        /* object names sent on this connection */
    size_t nsent, capsent;
    uint8_t *buf; /* request, then reply, of the request in progress */
    size_t cap;
};

struct bl_executor_session {
    uint64_t magic;
    struct conn *c;
};

/* Lock order: a connection's mu before registry_mu. */
static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static struct conn *conns;
static struct config *configs;

static struct config *find_config(const char *address) { /* under registry_mu */
    for (struct config *k = configs; k; k = k->next)
        if (!strcmp(k->address, address)) return k;
    return NULL;
}

static void unlink_conn(struct conn *c) { /* under registry_mu */
    if (!c->linked) return;
    for (struct conn **pp = &conns; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    c->linked = 0;
}

static void free_conn(struct conn *c) {
    if (c->fd >= 0) close(c->fd);
    for (size_t i = 0; i < c->nsent; ++i) free(c->sent[i]);
    free(c->sent);
    free(c->buf);
    free(c->address);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* End the connection (with c->mu held): keep the reason for later calls, and fail with it. */
static int32_t conn_break(struct conn *c, int32_t code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int32_t conn_break(struct conn *c, int32_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->lost, sizeof c->lost, fmt, ap);
    va_end(ap);
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    pthread_mutex_lock(&registry_mu);
    unlink_conn(c);
    pthread_mutex_unlock(&registry_mu);
    return bl__fail(code, "%s", c->lost);
}

/* The failure of a socket step of request `what`, which ends the connection. */
static int32_t conn_io_fail(struct conn *c, int io, int err, const char *what, int sending, int64_t timeout_ms) {
    if (io == IO_TIMEOUT)
        return conn_break(c, BL_ETIMEOUT, "executor %s did not %s %s within %lld ms", c->address,
                          sending ? "take" : "answer", what, (long long)timeout_ms);
    if (io == IO_EOF)
        return conn_break(c, BL_EPEER, "executor %s closed the connection before answering %s", c->address, what);
    return conn_break(c, BL_EPEER, "the connection to executor %s failed during %s: %s", c->address, what,
                      strerror(err));
}

/* Take the connection for one request (waiting for another request at most until the
 * deadline) and check it is still usable. */
static int32_t conn_enter(struct conn *c, uint64_t deadline, const char *fn) {
    struct timespec ts = {.tv_sec = (time_t)(deadline / 1000000000ull), .tv_nsec = (long)(deadline % 1000000000ull)};
    int r = pthread_mutex_clocklock(&c->mu, CLOCK_MONOTONIC, &ts);
    if (r == ETIMEDOUT)
        return bl__fail(BL_ETIMEOUT, "%s: executor %s stayed busy with another request for the whole deadline "
                        "(%lld ms)", fn, c->address, (long long)__atomic_load_n(&c->timeout_ms, __ATOMIC_RELAXED));
    if (r) return bl__fail(BL_EBACKEND, "%s: cannot lock the connection to executor %s: %s", fn, c->address, strerror(r));
    if (c->fd < 0) {
        pthread_mutex_unlock(&c->mu);
        return bl__fail(BL_EPEER, "connection to executor %s was lost: %s", c->address, c->lost);
    }
    return BL_OK;
}

static int32_t reserve(struct conn *c, size_t n) {
    if (n <= c->cap) return BL_OK;
    size_t cap = c->cap ? c->cap : 4096;
    while (cap < n) cap *= 2;
    uint8_t *b = realloc(c->buf, cap);
    if (!b) return bl__fail(BL_ENOMEM, "out of memory for a %zu-byte executor message", n);
    c->buf = b, c->cap = cap;
    return BL_OK;
}

static const char *type_name(uint16_t t) {
    switch (t) {
    case BL_EXEC_HELLO: return "HELLO";
    case BL_EXEC_AUTH: return "AUTH";
    case BL_EXEC_WELCOME: return "WELCOME";
    case BL_EXEC_REFUSED: return "REFUSED";
    case BL_EXEC_SEND_BINARY: return "SEND_BINARY";
    case BL_EXEC_LAUNCH: return "LAUNCH";
    case BL_EXEC_LAUNCH_ASYNC: return "LAUNCH_ASYNC";
    case BL_EXEC_AWAIT: return "AWAIT";
    case BL_EXEC_CALL: return "CALL";
    case BL_EXEC_CLOSE: return "CLOSE";
    case BL_EXEC_OK: return "OK";
    case BL_EXEC_RESULT: return "RESULT";
    case BL_EXEC_TOKEN: return "TOKEN";
    case BL_EXEC_ERROR: return "ERROR";
    case BL_EXEC_CRASHED: return "CRASHED";
    default: return "an unknown type";
    }
}

/* Send the request in c->buf[0..len) (header included) and read its reply into c->buf.
 * Replies the protocol allows at all are checked against their size limits here; what
 * each request accepts is its caller's to check. */
static int32_t round_trip(struct conn *c, size_t len, const char *what, uint64_t deadline, uint16_t *type,
                          uint32_t *blen) {
    int64_t t = __atomic_load_n(&c->timeout_ms, __ATOMIC_RELAXED);
    int err = 0, io = send_all(c->fd, c->buf, len, deadline, &err);
    if (io != IO_OK) return conn_io_fail(c, io, err, what, 1, t);
    uint8_t h[BL_EXECUTOR_HEADER_BYTES];
    io = recv_all(c->fd, h, sizeof h, deadline, &err);
    if (io != IO_OK) return conn_io_fail(c, io, err, what, 0, t);
    if (get_u32(h) != BL_EXECUTOR_MAGIC || get_u16(h + 4) != BL_EXECUTOR_PROTOCOL_VERSION)
        return conn_break(c, BL_EPEER, "executor %s answered %s with a frame that is not protocol version %u "
                          "(magic 0x%08x, version %u)", c->address, what, BL_EXECUTOR_PROTOCOL_VERSION,
                          get_u32(h), get_u16(h + 4));
    uint16_t ty = get_u16(h + 6);
    uint32_t n = get_u32(h + 8), limit;
    switch (ty) {
    case BL_EXEC_RESULT: limit = BL_EXECUTOR_MAX_ARGS_BYTES; break;
    case BL_EXEC_OK:
    case BL_EXEC_TOKEN:
    case BL_EXEC_ERROR:
    case BL_EXEC_CRASHED: limit = BL_EXECUTOR_MAX_SMALL_BYTES; break;
    default:
        return conn_break(c, BL_EPEER, "executor %s answered %s with a frame of type %u (%s), which is not a reply",
                          c->address, what, ty, type_name(ty));
    }
    if (n > limit)
        return conn_break(c, BL_EPEER, "executor %s answered %s with a %s of %u bytes, over the limit of %u",
                          c->address, what, type_name(ty), n, limit);
    int32_t rc = reserve(c, n);
    if (rc) return conn_break(c, rc, "%s", bl_last_error());
    io = recv_all(c->fd, c->buf, n, deadline, &err);
    if (io != IO_OK) return conn_io_fail(c, io, err, what, 0, t);
    *type = ty, *blen = n;
    return BL_OK;
}

/* An ERROR or CRASHED reply in c->buf: its status, with the executor's message as the text. */
static int32_t failure_reply(struct conn *c, uint16_t type, uint32_t n, const char *what) {
    if (n < 6 || 6u + get_u16(c->buf + 4) != n)
        return conn_break(c, BL_EPEER, "executor %s answered %s with a malformed %s (%u bytes)", c->address, what,
                          type_name(type), n);
    int32_t code = (int32_t)get_u32(c->buf);
    int mlen = (int)get_u16(c->buf + 4);
    const char *msg = (const char *)c->buf + 6;
    if (type == BL_EXEC_CRASHED)
        return conn_break(c, BL_EPEER, "executor session at %s crashed: %.*s", c->address, mlen, msg);
    if (code >= 0)
        return conn_break(c, BL_EPEER, "executor %s answered %s with an ERROR of status %d, not a BL_E* failure",
                          c->address, what, code);
    return bl__fail(code, "executor %s: %.*s", c->address, mlen, msg);
}

/* A reply of the wrong type or shape for `what`. */
static int32_t unexpected_reply(struct conn *c, uint16_t type, uint32_t n, const char *what) {
    if (type == BL_EXEC_ERROR || type == BL_EXEC_CRASHED) return failure_reply(c, type, n, what);
    return conn_break(c, BL_EPEER, "executor %s answered %s with %s (%u bytes), which it does not expect",
                      c->address, what, type_name(type), n);
}

#define CHECK_SESSION(s, fn)                                                                                 \
    do {                                                                                                     \
        if (!(s)) return bl__fail(BL_ESTATE, fn ": no session (NULL: its bl_executor_open failed)");        \
        if ((s)->magic != SESSION_MAGIC) return bl__fail(BL_ESTATE, fn ": not an open bl_executor_session"); \
    } while (0)

static int32_t check_name(const char *fn, const char *what, const char *v, size_t *len) {
    if (!v) return bl__fail(BL_EINVAL, "%s: %s is NULL", fn, what);
    *len = strlen(v);
    if (*len == 0) return bl__fail(BL_EINVAL, "%s: %s is empty", fn, what);
    if (*len > BL_EXECUTOR_MAX_NAME_BYTES)
        return bl__fail(BL_EINVAL, "%s: %s is %zu bytes long, over the limit of %u (BL_EXECUTOR_MAX_NAME_BYTES)", fn,
                        what, *len, BL_EXECUTOR_MAX_NAME_BYTES);
    return BL_OK;
}

static uint8_t *put_str(uint8_t *p, const char *s, size_t n) {
    put_u16(p, (uint16_t)n);
    memcpy(p + 2, s, n);
    return p + 2 + n;
}

/* ---- bl_executor_configure / open / close ------------------------------------------------------------ */

BL_API int32_t bl_executor_configure(const char *address, const char *secret_file, int64_t timeout_ms) {
    char host[ADDRESS_MAX], port[8];
    int32_t rc = parse_address(address, host, sizeof host, port, sizeof port);
    if (rc) return rc;
    if (timeout_ms < 0 || timeout_ms > (int64_t)BL_MAX_TIMEOUT_MS)
        return bl__fail(BL_EINVAL, "bl_executor_configure: timeout_ms %lld is not in 0..%u (0: the default)",
                        (long long)timeout_ms, BL_MAX_TIMEOUT_MS);
    if (secret_file && !*secret_file)
        return bl__fail(BL_EINVAL, "bl_executor_configure: secret_file is empty (NULL: use "
                        "BACKLINE_EXECUTOR_SECRET_FILE)");
    char *file = secret_file ? strdup(secret_file) : NULL;
    if (secret_file && !file) return bl__fail(BL_ENOMEM, "bl_executor_configure: out of memory");
    int64_t effective = timeout_ms;
    if (!effective && env_timeout(&effective)) effective = 0; /* a bad env value is reported at open */
    pthread_mutex_lock(&registry_mu);
    struct config *k = find_config(address);
    if (!k) {
        if ((k = calloc(1, sizeof *k)) && !(k->address = strdup(address))) {
            free(k);
            k = NULL;
        }
        if (!k) {
            pthread_mutex_unlock(&registry_mu);
            free(file);
            return bl__fail(BL_ENOMEM, "bl_executor_configure: out of memory");
        }
        k->next = configs, configs = k;
    }
    free(k->secret_file);
    k->secret_file = file;
    k->timeout_ms = timeout_ms;
    if (effective)
        for (struct conn *c = conns; c; c = c->next)
            if (!strcmp(c->address, address)) __atomic_store_n(&c->timeout_ms, effective, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&registry_mu);
    return BL_OK;
}

/* Connect to `address` and authenticate with the secret; a new connection in *out. */
static int32_t connect_and_authenticate(const char *address, struct conn **out) {
    char *file = NULL;
    int64_t timeout_ms = 0;
    pthread_mutex_lock(&registry_mu);
    struct config *k = find_config(address);
    if (k) {
        timeout_ms = k->timeout_ms;
        file = k->secret_file ? strdup(k->secret_file) : NULL;
        if (k->secret_file && !file) {
            pthread_mutex_unlock(&registry_mu);
            return bl__fail(BL_ENOMEM, "bl_executor_open: out of memory");
        }
    }
    pthread_mutex_unlock(&registry_mu);
    int32_t rc = BL_OK;
    if (!timeout_ms) rc = env_timeout(&timeout_ms);
    if (!rc && !file) {
        const char *env = getenv("BACKLINE_EXECUTOR_SECRET_FILE");
        if (env && *env && !(file = strdup(env))) rc = bl__fail(BL_ENOMEM, "bl_executor_open: out of memory");
        else if (!file)
            rc = bl__fail(BL_EINVAL, "no secret for executor %s: call bl_executor_configure or set "
                          "BACKLINE_EXECUTOR_SECRET_FILE", address);
    }
    uint8_t key[BL_EXECUTOR_MAX_SECRET_BYTES + 2];
    size_t klen = 0;
    if (!rc) rc = read_secret(file, address, key, &klen);
    free(file);
    if (!rc) rc = crypto_ready();
    if (rc) {
        explicit_bzero(key, sizeof key);
        return rc;
    }

    /* The whole bring-up (connect + handshake) has one deadline. */
    int64_t budget = timeout_ms < (int64_t)BL_EXECUTOR_HANDSHAKE_TIMEOUT_MS ? timeout_ms
                                                                              : (int64_t)BL_EXECUTOR_HANDSHAKE_TIMEOUT_MS;
    uint64_t deadline = deadline_after(budget);
    int fd = -1, err = 0, io = IO_OK;
    const char *stage = "HELLO";
    uint8_t h[BL_EXECUTOR_HEADER_BYTES], ns[BL_EXECUTOR_NONCE_BYTES];
    uint8_t auth[BL_EXECUTOR_HEADER_BYTES + BL_EXECUTOR_NONCE_BYTES + HMAC_BYTES];
    uint8_t *nc = auth + BL_EXECUTOR_HEADER_BYTES, tag[HMAC_BYTES], want[HMAC_BYTES];
    rc = dial(address, deadline, budget, &fd);
    if (rc) goto done;

    /* HELLO: the server's nonce. */
    if ((io = recv_all(fd, h, sizeof h, deadline, &err)) != IO_OK) goto io_failed;
    if (get_u32(h) != BL_EXECUTOR_MAGIC) {
        rc = bl__fail(BL_EPEER, "the peer at %s is not a Backline executor (its first bytes are not the executor magic 0x424C4558, \"BLEX\")",
                      address);
        goto done;
    }
    if (get_u16(h + 4) != BL_EXECUTOR_PROTOCOL_VERSION) {
        rc = bl__fail(BL_EABI, "executor speaks protocol version %u, this client speaks %u (executor at %s: install "
                      "matching versions of backline-core and backline-executor-orc)", get_u16(h + 4),
                      BL_EXECUTOR_PROTOCOL_VERSION, address);
        goto done;
    }
    if (get_u16(h + 6) != BL_EXEC_HELLO || get_u32(h + 8) != BL_EXECUTOR_NONCE_BYTES) {
        rc = bl__fail(BL_EPEER, "executor %s began with %s of %u bytes, not a HELLO of %u", address,
                      type_name(get_u16(h + 6)), get_u32(h + 8), BL_EXECUTOR_NONCE_BYTES);
        goto done;
    }
    if ((io = recv_all(fd, ns, sizeof ns, deadline, &err)) != IO_OK) goto io_failed;

    /* AUTH: our nonce and our proof. */
    if (crypto.rand_bytes(nc, BL_EXECUTOR_NONCE_BYTES) != 1) {
        rc = bl__fail(BL_EBACKEND, "libcrypto's RAND_bytes failed to make a nonce");
        goto done;
    }
    put_header(auth, BL_EXEC_AUTH, BL_EXECUTOR_NONCE_BYTES + HMAC_BYTES);
    if ((rc = hmac_tag(key, klen, BL_EXECUTOR_CLIENT_LABEL, ns, nc, auth + BL_EXECUTOR_HEADER_BYTES +
                                                                        BL_EXECUTOR_NONCE_BYTES)))
        goto done;
    stage = "AUTH";
    if ((io = send_all(fd, auth, sizeof auth, deadline, &err)) != IO_OK) goto io_failed;

    /* WELCOME: the server's proof, or REFUSED. */
    stage = "WELCOME";
    if ((io = recv_all(fd, h, sizeof h, deadline, &err)) != IO_OK) goto io_failed;
    if (get_u32(h) != BL_EXECUTOR_MAGIC || get_u16(h + 4) != BL_EXECUTOR_PROTOCOL_VERSION) {
        rc = bl__fail(BL_EPEER, "executor %s answered AUTH with a frame that is not protocol version %u", address,
                      BL_EXECUTOR_PROTOCOL_VERSION);
        goto done;
    }
    if (get_u16(h + 6) == BL_EXEC_REFUSED) {
        rc = bl__fail(BL_EAUTH, "the executor at %s refused authentication: check the secret", address);
        goto done;
    }
    if (get_u16(h + 6) != BL_EXEC_WELCOME || get_u32(h + 8) != HMAC_BYTES) {
        rc = bl__fail(BL_EPEER, "executor %s answered AUTH with %s of %u bytes, not a WELCOME of %u", address,
                      type_name(get_u16(h + 6)), get_u32(h + 8), HMAC_BYTES);
        goto done;
    }
    if ((io = recv_all(fd, tag, sizeof tag, deadline, &err)) != IO_OK) goto io_failed;
    if ((rc = hmac_tag(key, klen, BL_EXECUTOR_SERVER_LABEL, nc, ns, want))) goto done;
    if (crypto.memcmp(tag, want, HMAC_BYTES) != 0) {
        rc = bl__fail(BL_EAUTH, "the executor at %s did not prove it holds the secret (a wrong WELCOME tag): "
                      "check that both sides use the same secret, and that %s is the executor you meant",
                      address, address);
        goto done;
    }
    goto done;

io_failed:
    if (io == IO_TIMEOUT)
        rc = bl__fail(BL_ETIMEOUT, "executor at %s did not complete the handshake within %lld ms (waiting for %s)",
                      address, (long long)budget, stage);
    else if (io == IO_EOF)
        rc = bl__fail(BL_EPEER, "executor at %s closed the connection during the handshake (waiting for %s)",
                      address, stage);
    else
        rc = bl__fail(BL_EPEER, "the connection to executor at %s failed during the handshake (%s): %s", address,
                      stage, strerror(err));

done:
    explicit_bzero(key, sizeof key);
    explicit_bzero(auth, sizeof auth);
    explicit_bzero(want, sizeof want);
    if (rc) {
        if (fd >= 0) close(fd);
        return rc;
    }
    struct conn *c = calloc(1, sizeof *c);
    if (!c || !(c->address = strdup(address))) {
        free(c);
        close(fd);
        return bl__fail(BL_ENOMEM, "bl_executor_open: out of memory");
    }
    c->fd = fd;
    c->refs = 1;
    c->timeout_ms = timeout_ms;
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return BL_OK;
}

static bl_executor_session *open_failed(int32_t rc) {
    bl_status_record(rc); /* documented: open records its own failure */
    return NULL;
}

BL_API bl_executor_session *bl_executor_open(const char *address) {
    char host[ADDRESS_MAX], port[8];
    int32_t rc = parse_address(address, host, sizeof host, port, sizeof port);
    if (rc) return open_failed(rc);
    bl_executor_session *s = calloc(1, sizeof *s);
    if (!s) return open_failed(bl__fail(BL_ENOMEM, "bl_executor_open: out of memory"));
    s->magic = SESSION_MAGIC;

    pthread_mutex_lock(&registry_mu);
    for (struct conn *c = conns; c; c = c->next)
        if (!strcmp(c->address, address)) {
            c->refs++;
            s->c = c;
            break;
        }
    pthread_mutex_unlock(&registry_mu);
    if (s->c) return s;

    /* Connect without the registry lock (a handshake takes a while); another thread may
     * have connected to the same address meanwhile: then share its connection. */
    struct conn *mine = NULL;
    if ((rc = connect_and_authenticate(address, &mine))) {
        free(s);
        return open_failed(rc);
    }
    pthread_mutex_lock(&registry_mu);
    for (struct conn *c = conns; c; c = c->next)
        if (!strcmp(c->address, address)) {
            c->refs++;
            s->c = c;
            break;
        }
    if (!s->c) {
        mine->linked = 1;
        mine->next = conns, conns = mine;
        s->c = mine, mine = NULL;
    }
    pthread_mutex_unlock(&registry_mu);
    if (mine) free_conn(mine); /* the executor's session for it ends at EOF */
    return s;
}

BL_API int32_t bl_executor_close(bl_executor_session *s) {
    if (!s) return BL_OK;
    CHECK_SESSION(s, "bl_executor_close");
    struct conn *c = s->c;
    s->magic = 0;
    free(s);
    pthread_mutex_lock(&registry_mu);
    int last = --c->refs == 0;
    if (last) unlink_conn(c);
    pthread_mutex_unlock(&registry_mu);
    if (!last) return BL_OK;

    /* The last session: end the executor's session (it waits for outstanding launches). */
    int32_t rc = BL_OK;
    pthread_mutex_lock(&c->mu);
    if (c->fd >= 0 && !(rc = reserve(c, BL_EXECUTOR_HEADER_BYTES))) {
        int64_t t = __atomic_load_n(&c->timeout_ms, __ATOMIC_RELAXED);
        put_header(c->buf, BL_EXEC_CLOSE, 0);
        uint16_t type;
        uint32_t n;
        rc = round_trip(c, BL_EXECUTOR_HEADER_BYTES, "CLOSE", deadline_after(t + BL_EXECUTOR_CLOSE_TIMEOUT_MS),
                        &type, &n);
        if (!rc && (type != BL_EXEC_OK || n != 0)) rc = unexpected_reply(c, type, n, "CLOSE");
    }
    pthread_mutex_unlock(&c->mu);
    free_conn(c);
    return rc;
}

/* ---- signatures ------------------------------------------------------------------------------------ */

static void skip_ws(const char **p) {
    while (**p == ' ' || **p == '\t' || **p == '\n' || **p == '\r') ++*p;
}

static int word_char(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
           ch == '.';
}

static int keyword(const char **p, const char *kw) {
    size_t n = strlen(kw);
    if (strncmp(*p, kw, n) || word_char((*p)[n])) return 0;
    *p += n;
    return 1;
}

/* The text of the unsupported type at p: a <...> group or a word. */
static int token_len(const char *p) {
    if (*p == '<') {
        int depth = 0;
        for (const char *q = p; *q; ++q) {
            if (*q == '<') ++depth;
            else if (*q == '>' && --depth == 0) return (int)(q - p + 1);
        }
        return (int)strlen(p);
    }
    int n = 0;
    while (word_char(p[n])) ++n;
    return n ? n : (*p ? 1 : 0);
}

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

static const char *const SUPPORTED =
    "the executor passes iN (N 1..64 or 128), half, float, double, [N x type], literal structs, and ptr buffers "
    "as top-level parameters";

/* Parse one type at *p: its ABI size and alignment, and whether it is `ptr`. `ptr_where`
 * is NULL where ptr is allowed (a top-level parameter), else where it stands. */
static int32_t parse_type(const char **p, const char *sig, const char *ptr_where, int depth, uint64_t *size,
                          uint64_t *align, int *is_ptr) {
    skip_ws(p);
    *is_ptr = 0;
    const char *at = *p;
    if (depth > SIG_DEPTH_MAX)
        return bl__fail(BL_EINVAL, "signature '%s' nests types more than %d deep", sig, SIG_DEPTH_MAX);
    if (*at == 'i' && at[1] >= '0' && at[1] <= '9') {
        const char *q = at + 1;
        unsigned long bits = 0;
        while (*q >= '0' && *q <= '9' && bits < 100000) bits = bits * 10 + (unsigned long)(*q++ - '0');
        if (word_char(*q) || bits < 1 || (bits > 64 && bits != 128))
            return bl__fail(BL_EINVAL, "signature '%s': type '%.*s' is not supported (%s)", sig, token_len(at), at,
                            SUPPORTED);
        *size = bits <= 8 ? 1 : bits <= 16 ? 2 : bits <= 32 ? 4 : bits <= 64 ? 8 : 16;
        *align = *size;
        *p = q;
        return BL_OK;
    }
    if (keyword(p, "half")) return *size = *align = 2, BL_OK;
    if (keyword(p, "float")) return *size = *align = 4, BL_OK;
    if (keyword(p, "double")) return *size = *align = 8, BL_OK;
    if (keyword(p, "ptr")) {
        const char *q = *p;
        skip_ws(&q);
        if (keyword(&q, "addrspace"))
            return bl__fail(BL_EINVAL, "signature '%s': type 'ptr addrspace(...)' is not supported (%s)", sig,
                            SUPPORTED);
        if (ptr_where)
            return bl__fail(BL_EINVAL, "signature '%s': ptr %s is not supported (%s)", sig, ptr_where, SUPPORTED);
        *is_ptr = 1;
        return *size = *align = 8, BL_OK;
    }
    if (*at == '[') {
        const char *q = at + 1;
        skip_ws(&q);
        uint64_t count = 0;
        int digits = 0;
        while (*q >= '0' && *q <= '9') {
            if (count > BL_EXECUTOR_MAX_ARGS_BYTES) break;
            count = count * 10 + (uint64_t)(*q++ - '0'), ++digits;
        }
        skip_ws(&q);
        if (!digits || !keyword(&q, "x"))
            return bl__fail(BL_EINVAL, "signature '%s': malformed array type at '%s' (expected '[N x type]')", sig, at);
        uint64_t es, ea;
        int ep;
        int32_t rc = parse_type(&q, sig, "inside an array", depth + 1, &es, &ea, &ep);
        if (rc) return rc;
        skip_ws(&q);
        if (*q != ']')
            return bl__fail(BL_EINVAL, "signature '%s': malformed array type at '%s' (expected ']')", sig, q);
        if (es && count > BL_EXECUTOR_MAX_ARGS_BYTES / es)
            return bl__fail(BL_EINVAL, "signature '%s': type '%.*s' is larger than the executor's argument limit of "
                            "%u bytes", sig, (int)(q + 1 - at), at, BL_EXECUTOR_MAX_ARGS_BYTES);
        *size = count * es, *align = ea;
        *p = q + 1;
        return BL_OK;
    }
    if (*at == '{') {
        const char *q = at + 1;
        uint64_t off = 0, maxa = 1;
        skip_ws(&q);
        if (*q != '}')
            for (;;) {
                uint64_t fs, fa;
                int fp;
                int32_t rc = parse_type(&q, sig, "inside a struct", depth + 1, &fs, &fa, &fp);
                if (rc) return rc;
                off = align_up(off, fa) + fs;
                if (fa > maxa) maxa = fa;
                if (off > BL_EXECUTOR_MAX_ARGS_BYTES)
                    return bl__fail(BL_EINVAL, "signature '%s': a struct is larger than the executor's argument "
                                    "limit of %u bytes", sig, BL_EXECUTOR_MAX_ARGS_BYTES);
                skip_ws(&q);
                if (*q == '}') break;
                if (*q != ',')
                    return bl__fail(BL_EINVAL, "signature '%s': malformed struct type at '%s' (expected ',' or '}')",
                                    sig, q);
                ++q;
            }
        *size = align_up(off, maxa), *align = maxa;
        *p = q + 1;
        return BL_OK;
    }
    if (!*at) return bl__fail(BL_EINVAL, "signature '%s' ends where a type was expected", sig);
    return bl__fail(BL_EINVAL, "signature '%s': type '%.*s' is not supported (%s)", sig, token_len(at), at, SUPPORTED);
}

/* A checked signature: where its parts start, so marshalling can walk them again. */
struct sig {
    const char *text;
    const char *fields;   /* first field of a struct return; NULL for a single result or void */
    const char *params;   /* just after '(' */
    int64_t nparams, nresults;
    uint64_t result_bytes; /* the results' part of the results blob */
    uint64_t fixed_bytes;  /* the non-ptr parameters' part of the args blob */
};

/* The next type of a checked list at *p (and past the ',' after it). */
static void next_type(const char **p, uint64_t *size, int *is_ptr) {
    uint64_t a;
    parse_type(p, "", NULL, 0, size, &a, is_ptr);
    skip_ws(p);
    if (**p == ',') ++*p;
}

static int32_t parse_signature(const char *fn, const char *text, struct sig *g) {
    size_t len = 0;
    int32_t rc = check_name(fn, "signature", text, &len);
    if (rc) return rc;
    memset(g, 0, sizeof *g);
    g->text = text;
    const char *p = text;
    uint64_t size, align;
    int is_ptr;
    skip_ws(&p);
    if (keyword(&p, "void")) {
        g->nresults = 0;
    } else if (*p == '{') {
        g->fields = p + 1;
        if ((rc = parse_type(&p, text, "in a result", 0, &size, &align, &is_ptr))) return rc;
        const char *q = g->fields;
        skip_ws(&q);
        if (*q == '}') g->fields = NULL; /* {}: no results */
        while (g->fields && *q != '}') {
            next_type(&q, &size, &is_ptr);
            g->result_bytes += size;
            g->nresults++;
            skip_ws(&q);
        }
    } else {
        if ((rc = parse_type(&p, text, "as a result", 0, &size, &align, &is_ptr))) return rc;
        g->result_bytes = size;
        g->nresults = 1;
    }
    skip_ws(&p);
    if (*p != '(')
        return bl__fail(BL_EINVAL, "%s: malformed signature '%s' (expected '(' after the result type; the form is "
                        "\"ret (param, ...)\", e.g. \"i64 (i64, ptr)\")", fn, text);
    g->params = ++p;
    skip_ws(&p);
    if (*p != ')')
        for (;;) {
            if ((rc = parse_type(&p, text, NULL, 0, &size, &align, &is_ptr))) return rc;
            if (!is_ptr) g->fixed_bytes += size;
            g->nparams++;
            skip_ws(&p);
            if (*p == ')') break;
            if (*p != ',')
                return bl__fail(BL_EINVAL, "%s: malformed signature '%s' at '%s' (expected ',' or ')')", fn, text, p);
            ++p;
        }
    ++p;
    skip_ws(&p);
    if (*p) return bl__fail(BL_EINVAL, "%s: malformed signature '%s': '%s' after the parameter list", fn, text, p);
    return BL_OK;
}

/* ---- requests ---------------------------------------------------------------------------------------- */

BL_API int32_t bl_executor_send_binary(bl_executor_session *s, const char *object_path) {
    static const char fn[] = "bl_executor_send_binary";
    CHECK_SESSION(s, "bl_executor_send_binary");
    size_t nlen = 0;
    int32_t rc = check_name(fn, "object_path", object_path, &nlen);
    if (rc) return rc;
    struct conn *c = s->c;
    int64_t t = __atomic_load_n(&c->timeout_ms, __ATOMIC_RELAXED);
    uint64_t deadline = deadline_after(t);
    if ((rc = conn_enter(c, deadline, fn))) return rc;
    for (size_t i = 0; i < c->nsent; ++i)
        if (!strcmp(c->sent[i], object_path)) goto out; /* the executor holds it already */

    int fd = open(object_path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block us */
    if (fd < 0) {
        int e = errno;
        rc = bl__fail(e == ENOENT ? BL_ENOTFOUND : BL_EINVAL, "%s: cannot open the object file '%s': %s", fn,
                      object_path, strerror(e));
        goto out;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        rc = bl__fail(BL_EINVAL, "%s: '%s' is not a regular file", fn, object_path);
    } else if ((uint64_t)st.st_size > BL_EXECUTOR_MAX_OBJECT_BYTES) {
        rc = bl__fail(BL_ETOOBIG, "%s: the object file '%s' is %lld bytes, over the executor's limit of %u "
                      "(BL_EXECUTOR_MAX_OBJECT_BYTES)", fn, object_path, (long long)st.st_size,
                      BL_EXECUTOR_MAX_OBJECT_BYTES);
    }
    size_t size = rc ? 0 : (size_t)st.st_size, head = BL_EXECUTOR_HEADER_BYTES + 1 + 2 + nlen, got = 0;
    if (!rc) rc = reserve(c, head + size + 1);
    while (!rc && got <= size) { /* one byte past the size tells a file that grew */
        ssize_t k = read(fd, c->buf + head + got, size + 1 - got);
        if (k == 0) break;
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) rc = bl__fail(BL_EINVAL, "%s: cannot read the object file '%s': %s", fn, object_path, strerror(errno));
        else got += (size_t)k;
    }
    close(fd);
    if (!rc && got != size)
        rc = bl__fail(BL_EINVAL, "%s: the object file '%s' changed size while it was read", fn, object_path);
    if (rc) goto out;

    uint8_t *b = c->buf;
    put_header(b, BL_EXEC_SEND_BINARY, (uint32_t)(head - BL_EXECUTOR_HEADER_BYTES + size));
    b[BL_EXECUTOR_HEADER_BYTES] = BL_EXEC_KIND_OBJECT;
    put_str(b + BL_EXECUTOR_HEADER_BYTES + 1, object_path, nlen);
    uint16_t type;
    uint32_t n;
    char what[96];
    snprintf(what, sizeof what, "SEND_BINARY of '%.60s'", object_path);
    if ((rc = round_trip(c, head + size, what, deadline, &type, &n))) goto out;
    if (type != BL_EXEC_OK || n != 0) {
        rc = unexpected_reply(c, type, n, what);
        goto out;
    }
    if (c->nsent == c->capsent) { /* remembering is an optimisation: without memory, send again next time */
        size_t cap = c->capsent ? 2 * c->capsent : 8;
        char **v = realloc(c->sent, cap * sizeof *v);
        if (v) c->sent = v, c->capsent = cap;
    }
    if (c->nsent < c->capsent && (c->sent[c->nsent] = strdup(object_path))) c->nsent++;
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* LAUNCH and CALL: marshal, send, and unmarshal the results and buffers. `library` is the
 * object (LAUNCH) or the library (CALL); num_input_args < 0 for LAUNCH. */
static int32_t invoke(const char *fn, bl_executor_session *s, const char *symbol, const char *where,
                      const char *signature, void *const *args, int64_t nargs, int64_t num_input_args,
                      void *const *results, int64_t nresults) {
    int is_call = num_input_args >= 0;
    size_t slen = 0, wlen = 0;
    int32_t rc = check_name(fn, "symbol", symbol, &slen);
    if (!rc) rc = check_name(fn, is_call ? "library" : "object_path", where, &wlen);
    struct sig g;
    if (!rc) rc = parse_signature(fn, signature, &g);
    if (rc) return rc;
    if (nargs != g.nparams)
        return bl__fail(BL_EINVAL, "%s of '%s': signature '%s' has %lld parameter%s, but nargs is %lld", fn, symbol,
                        signature, (long long)g.nparams, g.nparams == 1 ? "" : "s", (long long)nargs);
    if (nresults != g.nresults)
        return bl__fail(BL_EINVAL, "%s of '%s': signature '%s' has %lld result%s, but nresults is %lld", fn, symbol,
                        signature, (long long)g.nresults, g.nresults == 1 ? "" : "s", (long long)nresults);
    if (is_call && num_input_args > nargs)
        return bl__fail(BL_EINVAL, "%s of '%s': num_input_args %lld is not in 0..nargs (%lld)", fn, symbol,
                        (long long)num_input_args, (long long)nargs);
    if (nargs && !args) return bl__fail(BL_EINVAL, "%s of '%s': args is NULL but nargs is %lld", fn, symbol, (long long)nargs);
    if (nresults && !results)
        return bl__fail(BL_EINVAL, "%s of '%s': results is NULL but nresults is %lld", fn, symbol, (long long)nresults);
    for (int64_t j = 0; j < nresults; ++j)
        if (!results[j]) return bl__fail(BL_EINVAL, "%s of '%s': results[%lld] is NULL", fn, symbol, (long long)j);

    /* The args blob's size: fixed parameters plus each buffer's count and bytes. */
    uint64_t blob = g.fixed_bytes, back = g.result_bytes;
    const char *p = g.params;
    for (int64_t i = 0; i < nargs; ++i) {
        uint64_t size;
        int is_ptr;
        next_type(&p, &size, &is_ptr);
        if (!args[i]) return bl__fail(BL_EINVAL, "%s of '%s': args[%lld] is NULL", fn, symbol, (long long)i);
        if (!is_ptr) continue;
        bl_executor_buffer *b;
        memcpy(&b, args[i], sizeof b);
        if (!b)
            return bl__fail(BL_EINVAL, "%s of '%s': argument %lld is a ptr, so args[%lld] must point to a "
                            "bl_executor_buffer *, which is NULL", fn, symbol, (long long)i, (long long)i);
        if (!b->data && b->bytes)
            return bl__fail(BL_EINVAL, "%s of '%s': the buffer of argument %lld has %llu bytes at NULL", fn, symbol,
                            (long long)i, (unsigned long long)b->bytes);
        if (b->bytes > BL_EXECUTOR_MAX_ARGS_BYTES) blob = back = UINT64_MAX;
        else blob += 8 + b->bytes, back += 8 + b->bytes;
        if (blob > BL_EXECUTOR_MAX_ARGS_BYTES || back > BL_EXECUTOR_MAX_ARGS_BYTES)
            return bl__fail(BL_ETOOBIG, "%s of '%s': the arguments (or the results and buffers coming back) are "
                            "over the executor's limit of %u bytes (BL_EXECUTOR_MAX_ARGS_BYTES)", fn, symbol,
                            BL_EXECUTOR_MAX_ARGS_BYTES);
    }

    struct conn *c = s->c;
    int64_t t = __atomic_load_n(&c->timeout_ms, __ATOMIC_RELAXED);
    uint64_t deadline = deadline_after(t);
    if ((rc = conn_enter(c, deadline, fn))) return rc;
    size_t glen = strlen(signature);
    size_t body = 2 + slen + 2 + wlen + 2 + glen + 4 + (is_call ? 4 : 0) + blob;
    if ((rc = reserve(c, BL_EXECUTOR_HEADER_BYTES + body))) goto out;
    uint8_t *w = c->buf;
    put_header(w, is_call ? BL_EXEC_CALL : BL_EXEC_LAUNCH, (uint32_t)body);
    w += BL_EXECUTOR_HEADER_BYTES;
    w = put_str(w, symbol, slen);
    w = put_str(w, where, wlen);
    w = put_str(w, signature, glen);
    put_u32(w, (uint32_t)nargs), w += 4;
    if (is_call) put_u32(w, (uint32_t)num_input_args), w += 4;
    p = g.params;
    for (int64_t i = 0; i < nargs; ++i) {
        uint64_t size;
        int is_ptr;
        next_type(&p, &size, &is_ptr);
        if (!is_ptr) {
            memcpy(w, args[i], size), w += size;
            continue;
        }
        bl_executor_buffer *b;
        memcpy(&b, args[i], sizeof b);
        put_u64(w, b->bytes), w += 8;
        if (b->bytes) memcpy(w, b->data, b->bytes), w += b->bytes;
    }

    char what[96];
    snprintf(what, sizeof what, "%s of '%.60s'", is_call ? "CALL" : "LAUNCH", symbol);
    uint16_t type;
    uint32_t n;
    if ((rc = round_trip(c, BL_EXECUTOR_HEADER_BYTES + body, what, deadline, &type, &n))) goto out;
    if (type != BL_EXEC_RESULT) {
        rc = unexpected_reply(c, type, n, what);
        goto out;
    }
    /* Check the whole reply before writing anything into the caller's memory. */
    const uint8_t *r = c->buf;
    uint64_t off = g.result_bytes;
    p = g.params;
    for (int64_t i = 0; i < nargs; ++i) {
        uint64_t size;
        int is_ptr;
        next_type(&p, &size, &is_ptr);
        if (!is_ptr) continue;
        bl_executor_buffer *b;
        memcpy(&b, args[i], sizeof b);
        uint64_t count = off + 8 <= n ? get_u64(r + off) : UINT64_MAX;
        if (count != b->bytes) {
            rc = off + 8 <= n
                     ? conn_break(c, BL_EPEER, "executor %s answered %s with %llu bytes for the buffer of argument "
                                  "%lld, which had %llu", c->address, what, (unsigned long long)count, (long long)i,
                                  (unsigned long long)b->bytes)
                     : conn_break(c, BL_EPEER, "executor %s answered %s with a RESULT of %u bytes, too short for "
                                  "signature '%s'", c->address, what, n, signature);
            goto out;
        }
        off += 8 + count;
    }
    if (off != n) {
        rc = conn_break(c, BL_EPEER, "executor %s answered %s with a RESULT of %u bytes; signature '%s' with these "
                        "buffers gives %llu", c->address, what, n, signature, (unsigned long long)off);
        goto out;
    }
    off = 0;
    if (g.fields) {
        const char *q = g.fields;
        for (int64_t j = 0; j < nresults; ++j) {
            uint64_t size;
            int is_ptr;
            next_type(&q, &size, &is_ptr);
            memcpy(results[j], r + off, size), off += size;
        }
    } else if (nresults) {
        memcpy(results[0], r, g.result_bytes), off = g.result_bytes;
    }
    p = g.params;
    for (int64_t i = 0; i < nargs; ++i) {
        uint64_t size;
        int is_ptr;
        next_type(&p, &size, &is_ptr);
        if (!is_ptr) continue;
        bl_executor_buffer *b;
        memcpy(&b, args[i], sizeof b);
        if (b->bytes) memcpy(b->data, r + off + 8, b->bytes);
        off += 8 + b->bytes;
    }
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

BL_API int32_t bl_executor_launch(bl_executor_session *s, const char *symbol, const char *object_path,
                                  const char *signature, void *const *args, int64_t nargs, void *const *results,
                                  int64_t nresults) {
    CHECK_SESSION(s, "bl_executor_launch");
    return invoke("bl_executor_launch", s, symbol, object_path, signature, args, nargs, -1, results, nresults);
}

BL_API int32_t bl_executor_call(bl_executor_session *s, const char *symbol, const char *library,
                                const char *signature, void *const *args, int64_t nargs, int64_t num_input_args,
                                void *const *results, int64_t nresults) {
    CHECK_SESSION(s, "bl_executor_call");
    if (num_input_args < 0)
        return bl__fail(BL_EINVAL, "bl_executor_call: num_input_args %lld is not in 0..nargs (%lld)",
                        (long long)num_input_args, (long long)nargs);
    return invoke("bl_executor_call", s, symbol, library, signature, args, nargs, num_input_args, results, nresults);
}

BL_API int32_t bl_executor_launch_async(bl_executor_session *s, const char *symbol, const char *object_path,
                                        int64_t *token) {
    static const char fn[] = "bl_executor_launch_async";
    if (token) *token = 0;
    CHECK_SESSION(s, "bl_executor_launch_async");
    if (!token) return bl__fail(BL_EINVAL, "%s: token is NULL", fn);
    size_t slen = 0, olen = 0;
    int32_t rc = check_name(fn, "symbol", symbol, &slen);
    if (!rc) rc = check_name(fn, "object_path", object_path, &olen);
    if (rc) return rc;
    struct conn *c = s->c;
    uint64_t deadline = deadline_after(__atomic_load_n(&c->timeout_ms, __ATOMIC_RELAXED));
    if ((rc = conn_enter(c, deadline, fn))) return rc;
    size_t body = 2 + slen + 2 + olen;
    if ((rc = reserve(c, BL_EXECUTOR_HEADER_BYTES + body))) goto out;
    put_header(c->buf, BL_EXEC_LAUNCH_ASYNC, (uint32_t)body);
    put_str(put_str(c->buf + BL_EXECUTOR_HEADER_BYTES, symbol, slen), object_path, olen);
    char what[96];
    snprintf(what, sizeof what, "LAUNCH_ASYNC of '%.60s'", symbol);
    uint16_t type;
    uint32_t n;
    if ((rc = round_trip(c, BL_EXECUTOR_HEADER_BYTES + body, what, deadline, &type, &n))) goto out;
    uint64_t v = type == BL_EXEC_TOKEN && n == 8 ? get_u64(c->buf) : 0;
    if (v < 1 || v > INT64_MAX) {
        rc = type == BL_EXEC_TOKEN && n == 8
                 ? conn_break(c, BL_EPEER, "executor %s answered %s with token %llu, not in 1..2^63-1", c->address, what,
                              (unsigned long long)v)
                 : unexpected_reply(c, type, n, what);
        goto out;
    }
    *token = (int64_t)v;
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

BL_API int32_t bl_executor_await(bl_executor_session *s, int64_t token) {
    static const char fn[] = "bl_executor_await";
    CHECK_SESSION(s, "bl_executor_await");
    if (token <= 0)
        return bl__fail(BL_ESTATE, "%s: token %lld names no launch (0: its bl_executor_launch_async failed)", fn,
                        (long long)token);
    struct conn *c = s->c;
    int64_t t = __atomic_load_n(&c->timeout_ms, __ATOMIC_RELAXED);
    uint64_t deadline = deadline_after(t);
    int32_t rc = conn_enter(c, deadline, fn);
    if (rc) return rc;
    if ((rc = reserve(c, BL_EXECUTOR_HEADER_BYTES + 12))) goto out;
    /* The executor waits a little less than we do, so its "not yet" arrives in time. */
    uint64_t now = bl__now(), left = deadline > now ? (deadline - now) / NS_PER_MS : 0;
    uint64_t grace = left / 2 < AWAIT_GRACE_MS ? left / 2 : AWAIT_GRACE_MS;
    put_header(c->buf, BL_EXEC_AWAIT, 12);
    put_u64(c->buf + BL_EXECUTOR_HEADER_BYTES, (uint64_t)token);
    put_u32(c->buf + BL_EXECUTOR_HEADER_BYTES + 8, (uint32_t)(left - grace));
    char what[64];
    snprintf(what, sizeof what, "AWAIT of token %lld", (long long)token);
    uint16_t type;
    uint32_t n;
    if ((rc = round_trip(c, BL_EXECUTOR_HEADER_BYTES + 12, what, deadline, &type, &n))) goto out;
    if (type != BL_EXEC_OK || n != 0) rc = unexpected_reply(c, type, n, what);
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}
