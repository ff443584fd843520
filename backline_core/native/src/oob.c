/* The out-of-band TCP side of networked transports (see backline/sdk/oob.h). */
#define _GNU_SOURCE
#include <backline/backline.h>
#include <backline/sdk/oob.h>
#include <backline/sdk/stream_frame.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
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
        if (bind(s, a->ai_addr, a->ai_addrlen) == 0 && listen(s, 128) == 0) break;
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


/* ---- the trust kit ---- */

typedef const void *(*evp_md_fn)(void);
typedef unsigned char *(*hmac_fn)(const void *md, const void *key, int key_len, const unsigned char *data, size_t n,
                                  unsigned char *out, unsigned int *out_len);
typedef int (*rand_bytes_fn)(unsigned char *buf, int num);
typedef int (*crypto_memcmp_fn)(const void *a, const void *b, size_t n);

static struct {
    hmac_fn hmac;
    evp_md_fn sha256;
    rand_bytes_fn rand_bytes;
    crypto_memcmp_fn memcmp;
    char err[400];
} crypto;
static pthread_once_t crypto_once = PTHREAD_ONCE_INIT;

static void crypto_load(void) {
    void *dl = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
    if (!dl) dl = dlopen("libcrypto.so", RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *why = dlerror();
        snprintf(crypto.err, sizeof crypto.err,
                 "authentication needs OpenSSL's libcrypto (libcrypto.so.3 or libcrypto.so) and could not load it: "
                 "%s (install OpenSSL 3, e.g. the libssl3 package)", why ? why : "not found");
        return;
    }
    static const char *const names[] = {"HMAC", "EVP_sha256", "RAND_bytes", "CRYPTO_memcmp"};
    void *fns[4];
    for (int i = 0; i < 4; ++i)
        if (!(fns[i] = dlsym(dl, names[i]))) {
            snprintf(crypto.err, sizeof crypto.err, "the loaded libcrypto does not export %s (install OpenSSL 3, "
                     "e.g. the libssl3 package)", names[i]);
            return; /* dl stays loaded: dlclose could unload a copy others use */
        }
    crypto.sha256 = (evp_md_fn)fns[1];
    crypto.rand_bytes = (rand_bytes_fn)fns[2];
    crypto.memcmp = (crypto_memcmp_fn)fns[3];
    __atomic_store_n(&crypto.hmac, (hmac_fn)fns[0], __ATOMIC_RELEASE);
}

static int32_t crypto_ready(char *err, size_t n) {
    pthread_once(&crypto_once, crypto_load);
    if (!__atomic_load_n(&crypto.hmac, __ATOMIC_ACQUIRE)) return bl_oob_fail(err, n, BL_EBACKEND, "%s", crypto.err);
    return BL_OK;
}

void bl_oob_secret_clear(bl_oob_secret *s) { explicit_bzero(s, sizeof *s); }

int32_t bl_oob_secret_read(const char *path, const char *what, bl_oob_secret *s, char *err, size_t n) {
    bl_oob_secret_clear(s);
    if (!path || !*path)
        return bl_oob_fail(err, n, BL_EINVAL, "no secret file %s: give secret_file=PATH, a file only you can read "
                           "(`backline secret new PATH` makes one)", what);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW); /* a FIFO must not block us */
    if (fd < 0)
        return bl_oob_fail(err, n, BL_EINVAL, "cannot open the secret file '%s' %s: %s%s", path, what, strerror(errno),
                           errno == ELOOP ? " (it must not be a symbolic link)" : "");
    struct stat st;
    int32_t rc = BL_OK;
    if (fstat(fd, &st) < 0)
        rc = bl_oob_fail(err, n, BL_EINVAL, "cannot stat the secret file '%s' %s: %s", path, what, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = bl_oob_fail(err, n, BL_EINVAL, "the secret file '%s' %s is not a regular file", path, what);
    else if (st.st_uid != geteuid())
        rc = bl_oob_fail(err, n, BL_EINVAL, "the secret file '%s' %s belongs to uid %u, not to this user (uid %u): use "
                         "a copy of your own (chmod 600 it)", path, what, (unsigned)st.st_uid, (unsigned)geteuid());
    else if (st.st_mode & 077)
        rc = bl_oob_fail(err, n, BL_EINVAL, "the secret file '%s' %s is open to group/other (mode %04o): chmod 600 %s",
                         path, what, (unsigned)(st.st_mode & 07777), path);
    size_t got = 0, cap = sizeof s->bytes; /* room to see one byte too many */
    while (!rc && got < cap) {
        ssize_t k = read(fd, s->bytes + got, cap - got);
        if (k == 0) break;
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) rc = bl_oob_fail(err, n, BL_EINVAL, "cannot read the secret file '%s' %s: %s", path, what, strerror(errno));
        else got += (size_t)k;
    }
    close(fd);
    if (!rc && got && s->bytes[got - 1] == '\n') --got; /* the one newline an editor or `echo` adds */
    if (!rc && (got < BL_TRUST_MIN_SECRET_BYTES || got > BL_TRUST_MAX_SECRET_BYTES))
        rc = bl_oob_fail(err, n, BL_EINVAL, "the secret file '%s' %s holds %s%zu bytes; a secret has %u..%u bytes", path,
                         what, got > BL_TRUST_MAX_SECRET_BYTES ? "more than " : "",
                         got > BL_TRUST_MAX_SECRET_BYTES ? (size_t)BL_TRUST_MAX_SECRET_BYTES : got,
                         BL_TRUST_MIN_SECRET_BYTES, BL_TRUST_MAX_SECRET_BYTES);
    if (rc) bl_oob_secret_clear(s);
    else s->len = got;
    return rc;
}

int32_t bl_oob_nonce(uint8_t out[BL_TRUST_NONCE_BYTES], char *err, size_t n) {
    int32_t rc = crypto_ready(err, n);
    if (rc) return rc;
    if (crypto.rand_bytes(out, BL_TRUST_NONCE_BYTES) != 1)
        return bl_oob_fail(err, n, BL_EBACKEND, "libcrypto's RAND_bytes failed to make a nonce");
    return BL_OK;
}

/* A socket address as the transcript has it: the IPv6 form (IPv4 mapped) and the port. */
static int put_address(const struct sockaddr_storage *a, uint8_t out[BL_TRUST_ADDRESS_BYTES]) {
    memset(out, 0, BL_TRUST_ADDRESS_BYTES);
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)a;
        out[10] = out[11] = 0xff;
        memcpy(out + 12, &v4->sin_addr, 4);
        memcpy(out + 16, &v4->sin_port, 2); /* already big-endian */
        return 1;
    }
    if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)a;
        memcpy(out, &v6->sin6_addr, 16);
        memcpy(out + 16, &v6->sin6_port, 2);
        return 1;
    }
    return 0;
}

int32_t bl_oob_addresses(int fd, int server_side, bl_oob_transcript *t, char *err, size_t n) {
    struct sockaddr_storage mine, theirs;
    socklen_t a = sizeof mine, b = sizeof theirs;
    if (getsockname(fd, (struct sockaddr *)&mine, &a) || getpeername(fd, (struct sockaddr *)&theirs, &b))
        return bl_oob_fail(err, n, BL_EPEER, "the connection has no peer address: %s", strerror(errno));
    if (!put_address(server_side ? &theirs : &mine, t->client) || !put_address(server_side ? &mine : &theirs, t->server))
        return bl_oob_fail(err, n, BL_EINVAL, "the connection is not over IP; the handshake binds to IP addresses");
    return BL_OK;
}

int32_t bl_oob_tag(const bl_oob_secret *s, const char *side, const bl_oob_transcript *t, uint8_t out[BL_TRUST_TAG_BYTES],
                   char *err, size_t n) {
    static const char prefix[] = "backline-trust/1 ";
    size_t plen = strlen(t->protocol), slen = strlen(side);
    if (!plen || plen > 255 || t->context_len > BL_TRUST_MAX_CONTEXT_BYTES || s->len < BL_TRUST_MIN_SECRET_BYTES)
        return bl_oob_fail(err, n, BL_EINVAL, "bl_oob_tag: a protocol of 1..255 bytes, a context of at most %u bytes and "
                           "a secret are needed", BL_TRUST_MAX_CONTEXT_BYTES);
    int32_t rc = crypto_ready(err, n);
    if (rc) return rc;
    uint8_t m[sizeof prefix + 8 + 256 + 2 * BL_TRUST_NONCE_BYTES + 2 * BL_TRUST_ADDRESS_BYTES + 2 + BL_TRUST_MAX_CONTEXT_BYTES];
    size_t o = 0;
    memcpy(m + o, prefix, sizeof prefix - 1), o += sizeof prefix - 1;
    memcpy(m + o, side, slen), o += slen;
    m[o++] = (uint8_t)plen;
    memcpy(m + o, t->protocol, plen), o += plen;
    memcpy(m + o, t->server_nonce, BL_TRUST_NONCE_BYTES), o += BL_TRUST_NONCE_BYTES;
    memcpy(m + o, t->client_nonce, BL_TRUST_NONCE_BYTES), o += BL_TRUST_NONCE_BYTES;
    memcpy(m + o, t->client, BL_TRUST_ADDRESS_BYTES), o += BL_TRUST_ADDRESS_BYTES;
    memcpy(m + o, t->server, BL_TRUST_ADDRESS_BYTES), o += BL_TRUST_ADDRESS_BYTES;
    m[o++] = (uint8_t)(t->context_len >> 8);
    m[o++] = (uint8_t)t->context_len;
    if (t->context_len) memcpy(m + o, t->context, t->context_len), o += t->context_len;
    unsigned int len = 0;
    const unsigned char *r = crypto.hmac(crypto.sha256(), s->bytes, (int)s->len, m, o, out, &len);
    explicit_bzero(m, sizeof m);
    if (!r || len != BL_TRUST_TAG_BYTES) return bl_oob_fail(err, n, BL_EBACKEND, "libcrypto's HMAC-SHA256 failed");
    return BL_OK;
}

int bl_oob_tags_equal(const uint8_t *a, const uint8_t *b) {
    if (!__atomic_load_n(&crypto.hmac, __ATOMIC_ACQUIRE)) { /* no tag was made: compare without libcrypto */
        uint8_t d = 0;
        for (size_t i = 0; i < BL_TRUST_TAG_BYTES; ++i) d |= (uint8_t)(a[i] ^ b[i]);
        return d == 0;
    }
    return crypto.memcmp(a, b, BL_TRUST_TAG_BYTES) == 0;
}

/* ---- handshakes in progress ---- */

void bl_oob_gate_init(bl_oob_gate *g) {
    memset(g, 0, sizeof *g);
    for (size_t i = 0; i < BL_TRUST_MAX_PENDING; ++i) g->entry[i].fd = -1;
}

void bl_oob_gate_drop(bl_oob_gate *g, bl_oob_pending *p, int close_fd) {
    (void)g;
    if (p->fd >= 0 && close_fd) close(p->fd);
    explicit_bzero(p, sizeof *p);
    p->fd = -1;
}

void bl_oob_gate_clear(bl_oob_gate *g) {
    for (size_t i = 0; i < BL_TRUST_MAX_PENDING; ++i)
        if (g->entry[i].fd >= 0) bl_oob_gate_drop(g, &g->entry[i], 1);
}

bl_oob_pending *bl_oob_gate_admit(bl_oob_gate *g, int fd, uint64_t deadline) {
    struct sockaddr_storage a;
    socklen_t len = sizeof a;
    uint8_t peer[BL_TRUST_ADDRESS_BYTES] = {0};
    if (getpeername(fd, (struct sockaddr *)&a, &len) == 0) put_address(&a, peer);
    bl_oob_pending *free_one = NULL, *oldest = NULL, *oldest_same = NULL;
    unsigned same = 0;
    for (size_t i = 0; i < BL_TRUST_MAX_PENDING; ++i) {
        bl_oob_pending *p = &g->entry[i];
        if (p->fd < 0) {
            if (!free_one) free_one = p;
            continue;
        }
        if (!oldest || p->since < oldest->since) oldest = p;
        if (!memcmp(p->peer, peer, 16)) {
            ++same;
            if (!oldest_same || p->since < oldest_same->since) oldest_same = p;
        }
    }
    bl_oob_pending *p = same >= BL_TRUST_MAX_PENDING_PER_PEER ? oldest_same : free_one ? free_one : oldest;
    if (p->fd >= 0) bl_oob_gate_drop(g, p, 1);
    uint64_t now = bl_oob_now_ns(), by = now + (uint64_t)BL_TRUST_HANDSHAKE_TIMEOUT_MS * 1000000ull;
    p->fd = fd;
    memcpy(p->peer, peer, 16);
    p->since = now;
    p->deadline = deadline && deadline < by ? deadline : by;
    p->got = 0;
    return p;
}
