/* The executor protocol's frames (docs/executor-protocol.md): headers, str fields, names. */
#define _GNU_SOURCE
#include "executor_internal.h"

#include <string.h>

void ex_put_header(uint8_t *h, uint16_t type, uint32_t len) {
    bl_stream_header_put(h, BL_EXECUTOR_MAGIC, BL_EXECUTOR_PROTOCOL_VERSION, type, len);
}

const char *ex_type_name(uint16_t t) {
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

int32_t ex_check_name(const char *fn, const char *what, const char *v, size_t *len) {
    if (!v) return bl__fail(BL_EINVAL, "%s: %s is NULL", fn, what);
    *len = strlen(v);
    if (*len == 0) return bl__fail(BL_EINVAL, "%s: %s is empty", fn, what);
    if (*len > BL_EXECUTOR_MAX_NAME_BYTES)
        return bl__fail(BL_EINVAL, "%s: %s is %zu bytes long, over the limit of %u (BL_EXECUTOR_MAX_NAME_BYTES)", fn,
                        what, *len, BL_EXECUTOR_MAX_NAME_BYTES);
    return BL_OK;
}

uint8_t *ex_put_str(uint8_t *p, const char *s, size_t n) {
    bl_be_put16(p, (uint16_t)n);
    memcpy(p + 2, s, n);
    return p + 2 + n;
}
