/*
 * The executor client's authentication: the HELLO / AUTH / WELCOME handshake of
 * docs/executor-protocol.md (protocol 2), over backline/trust.h's transcript: both tags
 * cover the two nonces and the connection's two addresses, so a relay that forwards the
 * bytes of one connection onto another cannot authenticate with them.
 *
 * The secret file, the nonce, HMAC-SHA256 and the constant-time comparison are the core's
 * trust kit (backline/sdk/oob.h, compiled into libbackline with hidden visibility), so the
 * executor checks secrets and tags exactly as rdma and ucx do.
 */
#define _GNU_SOURCE
#include "executor_internal.h"

#include <backline/sdk/oob.h>
#include <backline/trust.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* executor.h restates these numbers (cffi reads the numeric defines of executor.h): they must agree. */
_Static_assert(BL_EXECUTOR_NONCE_BYTES == BL_TRUST_NONCE_BYTES, "executor nonce = trust nonce");
_Static_assert(BL_EXECUTOR_TAG_BYTES == BL_TRUST_TAG_BYTES, "executor tag = trust tag");
_Static_assert(BL_EXECUTOR_MIN_SECRET_BYTES == BL_TRUST_MIN_SECRET_BYTES, "executor secret minimum = trust's");
_Static_assert(BL_EXECUTOR_MAX_SECRET_BYTES == BL_TRUST_MAX_SECRET_BYTES, "executor secret maximum = trust's");

#define PROTOCOL "executor" /* the transcript's protocol name; the context is empty */

int32_t ex_connect_authenticated(const char *address, const char *secret_file, int64_t timeout_ms, int forwarded,
                                 int *out) {
    char err[512], what[300];
    bl_oob_secret secret;
    snprintf(what, sizeof what, "for executor %s", address);
    int32_t rc = bl_oob_secret_read(secret_file, what, &secret, err, sizeof err);
    if (rc) return bl__fail(rc, "%s", err);

    /* The whole bring-up (connect + handshake) has one deadline. */
    int64_t budget = timeout_ms < (int64_t)BL_EXECUTOR_HANDSHAKE_TIMEOUT_MS ? timeout_ms
                                                                              : (int64_t)BL_EXECUTOR_HANDSHAKE_TIMEOUT_MS;
    uint64_t deadline = ex_deadline_after(budget);
    int fd = -1, ioerr = 0, io = IO_OK;
    const char *stage = "HELLO";
    uint8_t h[BL_EXECUTOR_HEADER_BYTES];
    uint8_t auth[BL_EXECUTOR_HEADER_BYTES + BL_TRUST_NONCE_BYTES + BL_TRUST_TAG_BYTES];
    uint8_t tag[BL_TRUST_TAG_BYTES], want[BL_TRUST_TAG_BYTES];
    bl_oob_transcript t = {.protocol = PROTOCOL, .context = NULL, .context_len = 0};
    rc = ex_dial(address, deadline, budget, &fd);
    if (rc) goto done;
    /* Through a trusted forward (an SSH -L port) the two ends see different connections: the
     * tags then cover no addresses (all zero), as the executor started behind it expects. */
    if (!forwarded && (rc = bl_oob_addresses(fd, 0, &t, err, sizeof err))) {
        rc = bl__fail(rc, "executor at %s: %s", address, err);
        goto done;
    }

    /* HELLO: the server's nonce. */
    if ((io = ex_recv_all(fd, h, sizeof h, deadline, &ioerr)) != IO_OK) goto io_failed;
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
    if (f.type != BL_EXEC_HELLO || f.body_bytes != BL_TRUST_NONCE_BYTES) {
        rc = bl__fail(BL_EPEER, "executor %s began with %s of %u bytes, not a HELLO of %u", address,
                      ex_type_name(f.type), f.body_bytes, BL_TRUST_NONCE_BYTES);
        goto done;
    }
    if ((io = ex_recv_all(fd, t.server_nonce, sizeof t.server_nonce, deadline, &ioerr)) != IO_OK) goto io_failed;

    /* AUTH: our nonce and our proof, bound to this connection's addresses. */
    if ((rc = bl_oob_nonce(t.client_nonce, err, sizeof err))) {
        rc = bl__fail(rc, "executor at %s: %s", address, err);
        goto done;
    }
    ex_put_header(auth, BL_EXEC_AUTH, BL_TRUST_NONCE_BYTES + BL_TRUST_TAG_BYTES);
    memcpy(auth + BL_EXECUTOR_HEADER_BYTES, t.client_nonce, BL_TRUST_NONCE_BYTES);
    if ((rc = bl_oob_tag(&secret, "client", &t, auth + BL_EXECUTOR_HEADER_BYTES + BL_TRUST_NONCE_BYTES, err,
                         sizeof err))) {
        rc = bl__fail(rc, "executor at %s: %s", address, err);
        goto done;
    }
    stage = "AUTH";
    if ((io = ex_send_all(fd, auth, sizeof auth, deadline, &ioerr)) != IO_OK) goto io_failed;

    /* WELCOME: the server's proof, or REFUSED. */
    stage = "WELCOME";
    if ((io = ex_recv_all(fd, h, sizeof h, deadline, &ioerr)) != IO_OK) goto io_failed;
    f = bl_stream_header_get(h);
    if (f.magic != BL_EXECUTOR_MAGIC || f.version != BL_EXECUTOR_PROTOCOL_VERSION) {
        rc = bl__fail(BL_EPEER, "executor %s answered AUTH with a frame that is not protocol version %u", address,
                      BL_EXECUTOR_PROTOCOL_VERSION);
        goto done;
    }
    if (f.type == BL_EXEC_REFUSED) {
        rc = bl__fail(BL_EAUTH, "the executor at %s refused authentication: check the secret (both sides must use "
                      "the same one), and that nothing relays the connection (the proof is bound to the "
                      "addresses of the connection the executor sees)", address);
        goto done;
    }
    if (f.type != BL_EXEC_WELCOME || f.body_bytes != BL_TRUST_TAG_BYTES) {
        rc = bl__fail(BL_EPEER, "executor %s answered AUTH with %s of %u bytes, not a WELCOME of %u", address,
                      ex_type_name(f.type), f.body_bytes, BL_TRUST_TAG_BYTES);
        goto done;
    }
    if ((io = ex_recv_all(fd, tag, sizeof tag, deadline, &ioerr)) != IO_OK) goto io_failed;
    if ((rc = bl_oob_tag(&secret, "server", &t, want, err, sizeof err))) {
        rc = bl__fail(rc, "executor at %s: %s", address, err);
        goto done;
    }
    if (!bl_oob_tags_equal(tag, want)) {
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
                      stage, strerror(ioerr));

done:
    bl_oob_secret_clear(&secret);
    explicit_bzero(auth, sizeof auth);
    explicit_bzero(want, sizeof want);
    explicit_bzero(&t, sizeof t);
    if (rc) {
        if (fd >= 0) close(fd);
        return rc;
    }
    *out = fd;
    return BL_OK;
}
