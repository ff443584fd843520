/* Kernel signatures (LLVM IR function types): checked once, then walked to marshal. */
#define _GNU_SOURCE
#include "executor_internal.h"

#include <string.h>

#define SIG_DEPTH_MAX 64 /* nesting of arrays/structs in a signature */

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

/* The next type of a checked list at *p (and past the ',' after it). */
void ex_next_type(const char **p, uint64_t *size, int *is_ptr) {
    uint64_t a;
    parse_type(p, "", NULL, 0, size, &a, is_ptr);
    skip_ws(p);
    if (**p == ',') ++*p;
}

int32_t ex_parse_signature(const char *fn, const char *text, struct sig *g) {
    size_t len = 0;
    int32_t rc = ex_check_name(fn, "signature", text, &len);
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
            ex_next_type(&q, &size, &is_ptr);
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
