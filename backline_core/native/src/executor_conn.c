/*
 * The executor client's connections: per-address settings, the registry of connections
 * shared by sessions (executor_internal.h), one request's round trip and its reply, and
 * bl_executor_configure / open / close.
 */
#define _GNU_SOURCE
#include "executor_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- configuration ---------------------------------------------------------------------------------- */

struct config {
    char *address;
    char *secret_file; /* NULL: env BACKLINE_EXECUTOR_SECRET_FILE */
    int64_t timeout_ms; /* 0: env BACKLINE_EXECUTOR_TIMEOUT_MS or the default */
    int forwarded;      /* bl_executor_configure_forwarded: tags cover no addresses */
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

/* ---- connections --------------------------------------------------------------------------------- */

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

int32_t ex_conn_break(struct conn *c, int32_t code, const char *fmt, ...) {
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
        return ex_conn_break(c, BL_ETIMEOUT, "executor %s did not %s %s within %lld ms", c->address,
                          sending ? "take" : "answer", what, (long long)timeout_ms);
    if (io == IO_EOF)
        return ex_conn_break(c, BL_EPEER, "executor %s closed the connection before answering %s", c->address, what);
    return ex_conn_break(c, BL_EPEER, "the connection to executor %s failed during %s: %s", c->address, what,
                      strerror(err));
}

/* Take the connection for one request (waiting for another request at most until the
 * deadline) and check it is still usable. */
int32_t ex_conn_enter(struct conn *c, uint64_t deadline, const char *fn) {
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

int32_t ex_reserve(struct conn *c, size_t n) {
    if (n <= c->cap) return BL_OK;
    size_t cap = c->cap ? c->cap : 4096;
    while (cap < n) cap *= 2;
    uint8_t *b = realloc(c->buf, cap);
    if (!b) return bl__fail(BL_ENOMEM, "out of memory for a %zu-byte executor message", n);
    c->buf = b, c->cap = cap;
    return BL_OK;
}

/* Send the request in c->buf[0..len) (header included) and read its reply into c->buf.
 * Replies the protocol allows at all are checked against their size limits here; what
 * each request accepts is its caller's to check. */
int32_t ex_round_trip(struct conn *c, size_t len, const char *what, uint64_t deadline, uint16_t *type,
                          uint32_t *blen) {
    int64_t t = __atomic_load_n(&c->timeout_ms, __ATOMIC_RELAXED);
    int err = 0, io = ex_send_all(c->fd, c->buf, len, deadline, &err);
    if (io != IO_OK) return conn_io_fail(c, io, err, what, 1, t);
    uint8_t h[BL_EXECUTOR_HEADER_BYTES];
    io = ex_recv_all(c->fd, h, sizeof h, deadline, &err);
    if (io != IO_OK) return conn_io_fail(c, io, err, what, 0, t);
    bl_stream_header f = bl_stream_header_get(h);
    if (f.magic != BL_EXECUTOR_MAGIC || f.version != BL_EXECUTOR_PROTOCOL_VERSION)
        return ex_conn_break(c, BL_EPEER, "executor %s answered %s with a frame that is not protocol version %u "
                             "(magic 0x%08x, version %u)", c->address, what, BL_EXECUTOR_PROTOCOL_VERSION, f.magic,
                             f.version);
    uint16_t ty = f.type;
    uint32_t n = f.body_bytes, limit;
    switch (ty) {
    case BL_EXEC_RESULT: limit = BL_EXECUTOR_MAX_ARGS_BYTES; break;
    case BL_EXEC_OK:
    case BL_EXEC_TOKEN:
    case BL_EXEC_ERROR:
    case BL_EXEC_CRASHED: limit = BL_EXECUTOR_MAX_SMALL_BYTES; break;
    default:
        return ex_conn_break(c, BL_EPEER, "executor %s answered %s with a frame of type %u (%s), which is not a reply",
                          c->address, what, ty, ex_type_name(ty));
    }
    if (n > limit)
        return ex_conn_break(c, BL_EPEER, "executor %s answered %s with a %s of %u bytes, over the limit of %u",
                          c->address, what, ex_type_name(ty), n, limit);
    int32_t rc = ex_reserve(c, n);
    if (rc) return ex_conn_break(c, rc, "%s", bl_last_error());
    io = ex_recv_all(c->fd, c->buf, n, deadline, &err);
    if (io != IO_OK) return conn_io_fail(c, io, err, what, 0, t);
    *type = ty, *blen = n;
    return BL_OK;
}

/* An ERROR or CRASHED reply in c->buf: its status, with the executor's message as the text. */
static int32_t failure_reply(struct conn *c, uint16_t type, uint32_t n, const char *what) {
    if (n < 6 || 6u + bl_be_get16(c->buf + 4) != n)
        return ex_conn_break(c, BL_EPEER, "executor %s answered %s with a malformed %s (%u bytes)", c->address, what,
                          ex_type_name(type), n);
    int32_t code = (int32_t)bl_be_get32(c->buf);
    int mlen = (int)bl_be_get16(c->buf + 4);
    const char *msg = (const char *)c->buf + 6;
    if (type == BL_EXEC_CRASHED)
        return ex_conn_break(c, BL_EPEER, "executor session at %s crashed: %.*s", c->address, mlen, msg);
    if (code >= 0)
        return ex_conn_break(c, BL_EPEER, "executor %s answered %s with an ERROR of status %d, not a BL_E* failure",
                          c->address, what, code);
    return bl__fail(code, "executor %s: %.*s", c->address, mlen, msg);
}

/* A reply of the wrong type or shape for `what`. */
int32_t ex_unexpected_reply(struct conn *c, uint16_t type, uint32_t n, const char *what) {
    if (type == BL_EXEC_ERROR || type == BL_EXEC_CRASHED) return failure_reply(c, type, n, what);
    return ex_conn_break(c, BL_EPEER, "executor %s answered %s with %s (%u bytes), which it does not expect",
                      c->address, what, ex_type_name(type), n);
}

/* ---- bl_executor_configure / open / close ------------------------------------------------------------ */

BL_API int32_t bl_executor_configure(const char *address, const char *secret_file, int64_t timeout_ms) {
    char host[ADDRESS_MAX], port[8];
    int32_t rc = ex_parse_address(address, host, sizeof host, port, sizeof port);
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

BL_API int32_t bl_executor_configure_forwarded(const char *address, int32_t forwarded) {
    char host[ADDRESS_MAX], port[8];
    int32_t rc = ex_parse_address(address, host, sizeof host, port, sizeof port);
    if (rc) return rc;
    pthread_mutex_lock(&registry_mu);
    struct config *k = find_config(address);
    if (!k) {
        if ((k = calloc(1, sizeof *k)) && !(k->address = strdup(address))) {
            free(k);
            k = NULL;
        }
        if (!k) {
            pthread_mutex_unlock(&registry_mu);
            return bl__fail(BL_ENOMEM, "bl_executor_configure_forwarded: out of memory");
        }
        k->next = configs, configs = k;
    }
    k->forwarded = forwarded != 0;
    pthread_mutex_unlock(&registry_mu);
    return BL_OK;
}

/* Connect to `address` and authenticate with the secret; a new connection in *out. */
static int32_t connect_and_authenticate(const char *address, struct conn **out) {
    char *file = NULL;
    int64_t timeout_ms = 0;
    int forwarded = 0;
    pthread_mutex_lock(&registry_mu);
    struct config *k = find_config(address);
    if (k) {
        timeout_ms = k->timeout_ms;
        forwarded = k->forwarded;
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
    int fd = -1;
    if (!rc) rc = ex_connect_authenticated(address, file, timeout_ms, forwarded, &fd);
    free(file);
    if (rc) return rc;
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
    int32_t rc = ex_parse_address(address, host, sizeof host, port, sizeof port);
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
    if (c->fd >= 0 && !(rc = ex_reserve(c, BL_EXECUTOR_HEADER_BYTES))) {
        int64_t t = __atomic_load_n(&c->timeout_ms, __ATOMIC_RELAXED);
        ex_put_header(c->buf, BL_EXEC_CLOSE, 0);
        uint16_t type;
        uint32_t n;
        rc = ex_round_trip(c, BL_EXECUTOR_HEADER_BYTES, "CLOSE", ex_deadline_after(t + BL_EXECUTOR_CLOSE_TIMEOUT_MS),
                        &type, &n);
        if (!rc && (type != BL_EXEC_OK || n != 0)) rc = ex_unexpected_reply(c, type, n, "CLOSE");
    }
    pthread_mutex_unlock(&c->mu);
    free_conn(c);
    return rc;
}
