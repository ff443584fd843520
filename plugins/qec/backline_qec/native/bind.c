/* Binding inner coprocessor functions from their description (bind.h). */
#define _GNU_SOURCE
#include "bind.h"

#include <dlfcn.h>
#include <backline/backline.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int32_t (*init_fn)(const void *, size_t, void **);

int qb_take_u32(const uint8_t **p, const uint8_t *end, uint32_t *v) {
    if (end - *p < 4) return -1;
    *v = (uint32_t)(*p)[0] | (uint32_t)(*p)[1] << 8 | (uint32_t)(*p)[2] << 16 | (uint32_t)(*p)[3] << 24;
    *p += 4;
    return 0;
}

/* a length-prefixed field, copied NUL-terminated into a fresh allocation */
static char *take_text(const uint8_t **p, const uint8_t *end, uint32_t *n) {
    if (qb_take_u32(p, end, n) || (size_t)(end - *p) < *n) return NULL;
    char *out = malloc((size_t)*n + 1u);
    if (!out) return NULL;
    memcpy(out, *p, *n);
    out[*n] = 0;
    *p += *n;
    return out;
}

int qb_bind(const uint8_t **p, const uint8_t *end, qb_bound *out, char *err, size_t err_len) {
    uint32_t n[5] = {0};
    char *f[5] = {0};
    int ok = 1;
    memset(out, 0, sizeof *out);
    for (int i = 0; i < 5 && ok; i++) ok = (f[i] = take_text(p, end, &n[i])) != NULL;
    if (!ok) snprintf(err, err_len, "the description is truncated");
    else if (!n[0] || !n[1]) ok = 0, snprintf(err, err_len, "the description names no library or symbol");
    if (ok && !(out->lib = dlopen(f[0], RTLD_NOW | RTLD_LOCAL))) ok = 0, snprintf(err, err_len, "%s", dlerror());
    if (ok && !(out->fn = (qb_fn)dlsym(out->lib, f[1]))) ok = 0, snprintf(err, err_len, "no symbol %s", f[1]);
    if (ok && n[2]) {
        init_fn init = (init_fn)dlsym(out->lib, f[2]);
        if (!init || init(n[4] ? f[4] : NULL, n[4], &out->ctx) != 0)
            ok = 0, out->ctx = NULL, snprintf(err, err_len, "its init %s failed", f[2]);
        /* resolved after a successful init: a missing fini still finalises nothing it built */
        if (ok && n[3] && !(out->fini = (void (*)(void *))dlsym(out->lib, f[3]))) {
            snprintf(err, err_len, "no symbol %s", f[3]);
            ok = 0;
        }
    }
    for (int i = 0; i < 5; i++) free(f[i]);
    if (!ok) {
        qb_unbind(out);
        return -1;
    }
    return 0;
}

qb_bound *qb_bind_list(const uint8_t **p, const uint8_t *end, uint32_t max_n, uint32_t *n, char *err,
                       size_t err_len) {
    uint32_t count = 0;
    if (qb_take_u32(p, end, &count) || !count || count > max_n) {
        snprintf(err, err_len, "the context names no inner functions, or more than %u", max_n);
        return NULL;
    }
    qb_bound *list = calloc(count, sizeof *list);
    if (!list) return snprintf(err, err_len, "out of memory"), NULL;
    for (uint32_t i = 0; i < count; i++) {
        char why[400];
        if (qb_bind(p, end, &list[i], why, sizeof why)) {
            snprintf(err, err_len, "inner function %u: %s", i, why);
            qb_unbind_list(list, i);
            return NULL;
        }
    }
    *n = count;
    return list;
}

void qb_unbind(qb_bound *b) {
    if (!b) return;
    if (b->lib) {
        if (b->fini && b->ctx) b->fini(b->ctx);
        dlclose(b->lib);
    }
    memset(b, 0, sizeof *b);
}

void qb_unbind_list(qb_bound *list, uint32_t n) {
    for (uint32_t i = 0; list && i < n; i++) qb_unbind(&list[i]);
    free(list);
}

/* a u32 length and that many bytes at *p, advancing it past their padding to 4 bytes */
static int take_padded(const uint8_t **p, const uint8_t *end, const uint8_t **bytes, uint32_t *len) {
    if (qb_take_u32(p, end, len)) return -1;
    size_t padded = ((size_t)*len + 3u) & ~(size_t)3u;
    if ((size_t)(end - *p) < padded) return -1;
    *bytes = *p;
    *p += padded;
    return 0;
}

int32_t qb_owner_init(const qb_owner_kind *kind, const void *params, size_t len, void **ctx) {
    const uint8_t *p = params, *end = p + len, *blob = NULL;
    uint32_t blob_len = 0, n = 0;
    if (!p || !ctx || (kind->has_blob && take_padded(&p, end, &blob, &blob_len)))
        return kind->set_err("%s", kind->truncated), BL_EINVAL;
    char why[480];
    qb_bound *list = qb_bind_list(&p, end, kind->max_n, &n, why, sizeof why);
    if (!list) return kind->set_err("%s: %s", kind->list, why), BL_EINVAL;
    qb_fn fns[QB_MAX_LIST] = {0};
    void *ctxs[QB_MAX_LIST] = {0};
    for (uint32_t i = 0; i < n; i++) fns[i] = list[i].fn, ctxs[i] = list[i].ctx;
    void *owner = kind->build(blob, blob_len, fns, ctxs, n, list);
    if (!owner) { /* the builder said why */
        qb_unbind_list(list, n);
        return BL_EINVAL;
    }
    *ctx = owner;
    return 0;
}

int qb_core_open(qb_core *core, const char *libbackline, char *err, size_t err_len) {
    memset(core, 0, sizeof *core);
    /* RTLD_NOLOAD: the runtime the Python side loaded, whose sessions are registered by key */
    core->handle = dlopen(libbackline, RTLD_NOW | RTLD_NOLOAD);
    if (core->handle) {
        *(void **)&core->session_get = dlsym(core->handle, "bl_session_get");
        *(void **)&core->round = dlsym(core->handle, "bl_round");
        *(void **)&core->last_error = dlsym(core->handle, "bl_last_error");
    }
    if (!core->session_get || !core->round || !core->last_error) {
        const char *why = dlerror();
        snprintf(err, err_len, "cannot use the runtime %s: %s", libbackline, why ? why : "not loaded");
        qb_core_close(core);
        return -1;
    }
    return 0;
}

void qb_core_close(qb_core *core) {
    if (core->handle) dlclose(core->handle);
    memset(core, 0, sizeof *core);
}
