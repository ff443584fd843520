/* Shipping object files to the executor (SEND_BINARY). */
#define _GNU_SOURCE
#include "executor_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

BL_API int32_t bl_executor_send_binary(bl_executor_session *s, const char *object_path) {
    static const char fn[] = "bl_executor_send_binary";
    CHECK_SESSION(s, "bl_executor_send_binary");
    size_t nlen = 0;
    int32_t rc = ex_check_name(fn, "object_path", object_path, &nlen);
    if (rc) return rc;
    struct conn *c = s->c;
    int64_t t = __atomic_load_n(&c->timeout_ms, __ATOMIC_RELAXED);
    uint64_t deadline = ex_deadline_after(t);
    if ((rc = ex_conn_enter(c, deadline, fn))) return rc;
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
    if (!rc) rc = ex_reserve(c, head + size + 1);
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
    ex_put_header(b, BL_EXEC_SEND_BINARY, (uint32_t)(head - BL_EXECUTOR_HEADER_BYTES + size));
    b[BL_EXECUTOR_HEADER_BYTES] = BL_EXEC_KIND_OBJECT;
    ex_put_str(b + BL_EXECUTOR_HEADER_BYTES + 1, object_path, nlen);
    uint16_t type;
    uint32_t n;
    char what[96];
    snprintf(what, sizeof what, "SEND_BINARY of '%.60s'", object_path);
    if ((rc = ex_round_trip(c, head + size, what, deadline, &type, &n))) goto out;
    if (type != BL_EXEC_OK || n != 0) {
        rc = ex_unexpected_reply(c, type, n, what);
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
