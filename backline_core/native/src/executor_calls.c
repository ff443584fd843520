/* Calls into the executor: LAUNCH, CALL, LAUNCH_ASYNC and AWAIT, with their marshalling. */
#define _GNU_SOURCE
#include "executor_internal.h"

#include <stdio.h>
#include <string.h>

/* An AWAIT asks the executor to wait this much less than the call's deadline (at most half
 * of it), so that its "not finished" answer arrives before the client gives up. */
#define AWAIT_GRACE_MS 1000ull

/* LAUNCH and CALL: marshal, send, and unmarshal the results and buffers. `library` is the
 * object (LAUNCH) or the library (CALL); num_input_args < 0 for LAUNCH. */
static int32_t invoke(const char *fn, bl_executor_session *s, const char *symbol, const char *where,
                      const char *signature, void *const *args, int64_t nargs, int64_t num_input_args,
                      void *const *results, int64_t nresults) {
    int is_call = num_input_args >= 0;
    size_t slen = 0, wlen = 0;
    int32_t rc = ex_check_name(fn, "symbol", symbol, &slen);
    if (!rc) rc = ex_check_name(fn, is_call ? "library" : "object_path", where, &wlen);
    struct sig g;
    if (!rc) rc = ex_parse_signature(fn, signature, &g);
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
        ex_next_type(&p, &size, &is_ptr);
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
    uint64_t deadline = ex_deadline_after(t);
    if ((rc = ex_conn_enter(c, deadline, fn))) return rc;
    size_t glen = strlen(signature);
    size_t body = 2 + slen + 2 + wlen + 2 + glen + 4 + (is_call ? 4 : 0) + blob;
    if ((rc = ex_reserve(c, BL_EXECUTOR_HEADER_BYTES + body))) goto out;
    uint8_t *w = c->buf;
    ex_put_header(w, is_call ? BL_EXEC_CALL : BL_EXEC_LAUNCH, (uint32_t)body);
    w += BL_EXECUTOR_HEADER_BYTES;
    w = ex_put_str(w, symbol, slen);
    w = ex_put_str(w, where, wlen);
    w = ex_put_str(w, signature, glen);
    bl_be_put32(w, (uint32_t)nargs), w += 4;
    if (is_call) bl_be_put32(w, (uint32_t)num_input_args), w += 4;
    p = g.params;
    for (int64_t i = 0; i < nargs; ++i) {
        uint64_t size;
        int is_ptr;
        ex_next_type(&p, &size, &is_ptr);
        if (!is_ptr) {
            memcpy(w, args[i], size), w += size;
            continue;
        }
        bl_executor_buffer *b;
        memcpy(&b, args[i], sizeof b);
        bl_be_put64(w, b->bytes), w += 8;
        if (b->bytes) memcpy(w, b->data, b->bytes), w += b->bytes;
    }

    char what[96];
    snprintf(what, sizeof what, "%s of '%.60s'", is_call ? "CALL" : "LAUNCH", symbol);
    uint16_t type;
    uint32_t n;
    if ((rc = ex_round_trip(c, BL_EXECUTOR_HEADER_BYTES + body, what, deadline, &type, &n))) goto out;
    if (type != BL_EXEC_RESULT) {
        rc = ex_unexpected_reply(c, type, n, what);
        goto out;
    }
    /* Check the whole reply before writing anything into the caller's memory. */
    const uint8_t *r = c->buf;
    uint64_t off = g.result_bytes;
    p = g.params;
    for (int64_t i = 0; i < nargs; ++i) {
        uint64_t size;
        int is_ptr;
        ex_next_type(&p, &size, &is_ptr);
        if (!is_ptr) continue;
        bl_executor_buffer *b;
        memcpy(&b, args[i], sizeof b);
        uint64_t count = off + 8 <= n ? bl_be_get64(r + off) : UINT64_MAX;
        if (count != b->bytes) {
            rc = off + 8 <= n
                     ? ex_conn_break(c, BL_EPEER, "executor %s answered %s with %llu bytes for the buffer of argument "
                                  "%lld, which had %llu", c->address, what, (unsigned long long)count, (long long)i,
                                  (unsigned long long)b->bytes)
                     : ex_conn_break(c, BL_EPEER, "executor %s answered %s with a RESULT of %u bytes, too short for "
                                  "signature '%s'", c->address, what, n, signature);
            goto out;
        }
        off += 8 + count;
    }
    if (off != n) {
        rc = ex_conn_break(c, BL_EPEER, "executor %s answered %s with a RESULT of %u bytes; signature '%s' with these "
                        "buffers gives %llu", c->address, what, n, signature, (unsigned long long)off);
        goto out;
    }
    off = 0;
    if (g.fields) {
        const char *q = g.fields;
        for (int64_t j = 0; j < nresults; ++j) {
            uint64_t size;
            int is_ptr;
            ex_next_type(&q, &size, &is_ptr);
            memcpy(results[j], r + off, size), off += size;
        }
    } else if (nresults) {
        memcpy(results[0], r, g.result_bytes), off = g.result_bytes;
    }
    p = g.params;
    for (int64_t i = 0; i < nargs; ++i) {
        uint64_t size;
        int is_ptr;
        ex_next_type(&p, &size, &is_ptr);
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
    int32_t rc = ex_check_name(fn, "symbol", symbol, &slen);
    if (!rc) rc = ex_check_name(fn, "object_path", object_path, &olen);
    if (rc) return rc;
    struct conn *c = s->c;
    uint64_t deadline = ex_deadline_after(__atomic_load_n(&c->timeout_ms, __ATOMIC_RELAXED));
    if ((rc = ex_conn_enter(c, deadline, fn))) return rc;
    size_t body = 2 + slen + 2 + olen;
    if ((rc = ex_reserve(c, BL_EXECUTOR_HEADER_BYTES + body))) goto out;
    ex_put_header(c->buf, BL_EXEC_LAUNCH_ASYNC, (uint32_t)body);
    ex_put_str(ex_put_str(c->buf + BL_EXECUTOR_HEADER_BYTES, symbol, slen), object_path, olen);
    char what[96];
    snprintf(what, sizeof what, "LAUNCH_ASYNC of '%.60s'", symbol);
    uint16_t type;
    uint32_t n;
    if ((rc = ex_round_trip(c, BL_EXECUTOR_HEADER_BYTES + body, what, deadline, &type, &n))) goto out;
    uint64_t v = type == BL_EXEC_TOKEN && n == 8 ? bl_be_get64(c->buf) : 0;
    if (v < 1 || v > INT64_MAX) {
        rc = type == BL_EXEC_TOKEN && n == 8
                 ? ex_conn_break(c, BL_EPEER, "executor %s answered %s with token %llu, not in 1..2^63-1", c->address, what,
                              (unsigned long long)v)
                 : ex_unexpected_reply(c, type, n, what);
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
    uint64_t deadline = ex_deadline_after(t);
    int32_t rc = ex_conn_enter(c, deadline, fn);
    if (rc) return rc;
    if ((rc = ex_reserve(c, BL_EXECUTOR_HEADER_BYTES + 12))) goto out;
    /* The executor waits a little less than we do, so its "not yet" arrives in time. */
    uint64_t now = bl__now(), left = deadline > now ? (deadline - now) / NS_PER_MS : 0;
    uint64_t grace = left / 2 < AWAIT_GRACE_MS ? left / 2 : AWAIT_GRACE_MS;
    ex_put_header(c->buf, BL_EXEC_AWAIT, 12);
    bl_be_put64(c->buf + BL_EXECUTOR_HEADER_BYTES, (uint64_t)token);
    bl_be_put32(c->buf + BL_EXECUTOR_HEADER_BYTES + 8, (uint32_t)(left - grace));
    char what[64];
    snprintf(what, sizeof what, "AWAIT of token %lld", (long long)token);
    uint16_t type;
    uint32_t n;
    if ((rc = ex_round_trip(c, BL_EXECUTOR_HEADER_BYTES + 12, what, deadline, &type, &n))) goto out;
    if (type != BL_EXEC_OK || n != 0) rc = ex_unexpected_reply(c, type, n, what);
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}
