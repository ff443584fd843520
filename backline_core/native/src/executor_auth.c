/*
 * The executor client's authentication: the shared secret's file, HMAC-SHA256 and nonces
 * from libcrypto, and the HELLO / AUTH / WELCOME handshake of docs/executor-protocol.md.
 *
 * libcrypto is dlopened at first use, so libbackline has no build-time or load-time
 * dependency on OpenSSL.
 */
#define _GNU_SOURCE
#include "executor_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HMAC_BYTES 32
#define LABEL_BYTES (sizeof BL_EXECUTOR_CLIENT_LABEL - 1)
_Static_assert(sizeof BL_EXECUTOR_CLIENT_LABEL == sizeof BL_EXECUTOR_SERVER_LABEL, "labels of one length");

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

/* ---- the secret --------------------------------------------------------------------------------- */

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

/* ---- the handshake ------------------------------------------------------------------------------ */

int32_t ex_connect_authenticated(const char *address, const char *secret_file, int64_t timeout_ms, int *out) {
    uint8_t key[BL_EXECUTOR_MAX_SECRET_BYTES + 2];
    size_t klen = 0;
    int32_t rc = read_secret(secret_file, address, key, &klen);
    if (!rc) rc = crypto_ready();
    if (rc) {
        explicit_bzero(key, sizeof key);
        return rc;
    }

    /* The whole bring-up (connect + handshake) has one deadline. */
    int64_t budget = timeout_ms < (int64_t)BL_EXECUTOR_HANDSHAKE_TIMEOUT_MS ? timeout_ms
                                                                              : (int64_t)BL_EXECUTOR_HANDSHAKE_TIMEOUT_MS;
    uint64_t deadline = ex_deadline_after(budget);
    int fd = -1, err = 0, io = IO_OK;
    const char *stage = "HELLO";
    uint8_t h[BL_EXECUTOR_HEADER_BYTES], ns[BL_EXECUTOR_NONCE_BYTES];
    uint8_t auth[BL_EXECUTOR_HEADER_BYTES + BL_EXECUTOR_NONCE_BYTES + HMAC_BYTES];
    uint8_t *nc = auth + BL_EXECUTOR_HEADER_BYTES, tag[HMAC_BYTES], want[HMAC_BYTES];
    rc = ex_dial(address, deadline, budget, &fd);
    if (rc) goto done;

    /* HELLO: the server's nonce. */
    if ((io = ex_recv_all(fd, h, sizeof h, deadline, &err)) != IO_OK) goto io_failed;
    bl_stream_header f = bl_stream_header_get(h);
    if (f.magic != BL_EXECUTOR_MAGIC) {
        rc = bl__fail(BL_EPEER, "the peer at %s is not a Backline executor (its first bytes are not the executor magic 0x424C4558, \"BLEX\")",
                      address);
        goto done;
    }
    if (f.version != BL_EXECUTOR_PROTOCOL_VERSION) {
        rc = bl__fail(BL_EABI, "executor speaks protocol version %u, this client speaks %u (executor at %s: install "
                      "matching versions of backline-core and backline-executor-orc)", f.version,
                      BL_EXECUTOR_PROTOCOL_VERSION, address);
        goto done;
    }
    if (f.type != BL_EXEC_HELLO || f.body_bytes != BL_EXECUTOR_NONCE_BYTES) {
        rc = bl__fail(BL_EPEER, "executor %s began with %s of %u bytes, not a HELLO of %u", address,
                      ex_type_name(f.type), f.body_bytes, BL_EXECUTOR_NONCE_BYTES);
        goto done;
    }
    if ((io = ex_recv_all(fd, ns, sizeof ns, deadline, &err)) != IO_OK) goto io_failed;

    /* AUTH: our nonce and our proof. */
    if (crypto.rand_bytes(nc, BL_EXECUTOR_NONCE_BYTES) != 1) {
        rc = bl__fail(BL_EBACKEND, "libcrypto's RAND_bytes failed to make a nonce");
        goto done;
    }
    ex_put_header(auth, BL_EXEC_AUTH, BL_EXECUTOR_NONCE_BYTES + HMAC_BYTES);
    if ((rc = hmac_tag(key, klen, BL_EXECUTOR_CLIENT_LABEL, ns, nc, auth + BL_EXECUTOR_HEADER_BYTES +
                                                                        BL_EXECUTOR_NONCE_BYTES)))
        goto done;
    stage = "AUTH";
    if ((io = ex_send_all(fd, auth, sizeof auth, deadline, &err)) != IO_OK) goto io_failed;

    /* WELCOME: the server's proof, or REFUSED. */
    stage = "WELCOME";
    if ((io = ex_recv_all(fd, h, sizeof h, deadline, &err)) != IO_OK) goto io_failed;
    f = bl_stream_header_get(h);
    if (f.magic != BL_EXECUTOR_MAGIC || f.version != BL_EXECUTOR_PROTOCOL_VERSION) {
        rc = bl__fail(BL_EPEER, "executor %s answered AUTH with a frame that is not protocol version %u", address,
                      BL_EXECUTOR_PROTOCOL_VERSION);
        goto done;
    }
    if (f.type == BL_EXEC_REFUSED) {
        rc = bl__fail(BL_EAUTH, "the executor at %s refused authentication: check the secret", address);
        goto done;
    }
    if (f.type != BL_EXEC_WELCOME || f.body_bytes != HMAC_BYTES) {
        rc = bl__fail(BL_EPEER, "executor %s answered AUTH with %s of %u bytes, not a WELCOME of %u", address,
                      ex_type_name(f.type), f.body_bytes, HMAC_BYTES);
        goto done;
    }
    if ((io = ex_recv_all(fd, tag, sizeof tag, deadline, &err)) != IO_OK) goto io_failed;
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
    *out = fd;
    return BL_OK;
}
