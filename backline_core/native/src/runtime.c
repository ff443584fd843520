/*
 * The Backline session runtime: registry by (role, key), lifecycle enforcement,
 * ring protocol (wire format), deadlines and error text. Transport backends supply
 * the memory and any data movement; this file owns everything the two roles agree on.
 */
#define _GNU_SOURCE
#include "backline/backline.h"
#include "internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define KEY_MAX (BL_KEY_MAX_LEN + 1)
#define ERR_MAX 1024
#define SESSION_MAGIC 0x42414b4c494e4531ull /* "BAKLINE1" */

enum state {
    ST_CREATED,
    ST_CONNECTED,
    ST_ALLOCATED,
    ST_KEYS,
    ST_CHANNEL,
    ST_CONFIGURED,
    ST_STARTED,
    ST_STOPPED,
};

static const char *const state_names[] = {
    "created", "connected", "memory allocated", "keys exchanged", "channel established",
    "configured", "started", "stopped",
};

struct fn_binding {
    bl_coprocessor_fn fn;
    void *ctx;
};

/* Contexts built by bl_set_coprocessor_fn_by_name, freed at destroy. */
struct owned_ctx {
    bl_fn_fini fini;
    void *ctx;
    void *dl;
    struct owned_ctx *next;
};

struct bl_session {
    uint64_t magic;
    /* Round-path fields first (one or two cache lines). */
    uint8_t *tx_ring; /* controller: request ring; coprocessor: reply ring */
    uint8_t *rx_ring; /* controller: reply ring; coprocessor: request ring */
    uint32_t mask, slot_bytes;
    uint32_t in_bytes, out_bytes, max_payload;
    int32_t state;
    uint64_t staged, posted, collected; /* controller sequence numbers */
    /* Controller: the thread whose calls or rounds in flight hold the session (pthread_self), 0 when
     * none. One CAS when a thread starts using it, one store when nothing is left in flight, so a
     * second thread is refused (BL_EBUSY) rather than handed the first one's replies. */
    uintptr_t owner;
    uint64_t served;                    /* coprocessor: last answered seq */
    uint64_t timeout_ns;
    uint64_t last_rtt;
    uint64_t *rtt_log; /* bl_record_rtt: caller-owned, NULL when not recording */
    uint64_t rtt_cap, rtt_count;
    uint64_t *post_time;
    bl_channel ch;
    volatile int stop_flag;
    int stop_done; /* bl_stop has finished, backend included (bl_park waits for this, not the state) */
    int64_t idle_spin_ns;
    struct fn_binding *fns;

    int32_t role;
    int32_t runs_in;
    char key[KEY_MAX];
    char *config;
    char *cfg_buf;                              /* config with items split in place */
    const char *cfg_key[BL_MAX_CONFIG_ITEMS];   /* parsed once; backends read via host api */
    const char *cfg_val[BL_MAX_CONFIG_ITEMS];
    uint32_t cfg_n;
    uint64_t connect_timeout_ns;
    uint32_t cfg_slots, cfg_slot_bytes;
    int slots_explicit, slot_bytes_explicit;
    void *dl;
    const bl_backend *be;
    void *impl;
    struct owned_ctx *owned;
    int busy;                /* an asynchronous bring-up step runs on this session */
    struct bl_session *next; /* registry list */
};

/* ---- error text ------------------------------------------------------------------------- */

static __thread char tl_error[ERR_MAX];

BL_API const char *bl_last_error(void) { return tl_error; }

static __thread int32_t tl_first_status;
static __thread char tl_first_error[ERR_MAX];

BL_API int32_t bl_status_record(int32_t status) {
    if (BL_UNLIKELY(status < 0) && tl_first_status == 0) {
        tl_first_status = status;
        memcpy(tl_first_error, tl_error, sizeof tl_error);
    }
    return status;
}

BL_API int32_t bl_status_take(void) {
    int32_t status = tl_first_status;
    if (status) memcpy(tl_error, tl_first_error, sizeof tl_error);
    tl_first_status = 0;
    return status;
}

static int32_t vfail(int32_t code, const char *fmt, va_list ap) {
    vsnprintf(tl_error, sizeof tl_error, fmt, ap);
    return code;
}

static int32_t fail(int32_t code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int32_t fail(int32_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(code, fmt, ap);
    va_end(ap);
    return code;
}

/* The same for the runtime's other C files (declared in internal.h). */
int32_t bl__fail(int32_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(code, fmt, ap);
    va_end(ap);
    return code;
}

BL_API const char *bl_status_name(int32_t status) {
    switch (status) {
    case BL_OK: return "BL_OK";
    case BL_EINVAL: return "BL_EINVAL";
    case BL_ESTATE: return "BL_ESTATE";
    case BL_ETIMEOUT: return "BL_ETIMEOUT";
    case BL_ETOOBIG: return "BL_ETOOBIG";
    case BL_EDECODER: return "BL_EDECODER";
    case BL_EPEER: return "BL_EPEER";
    case BL_EBUSY: return "BL_EBUSY";
    case BL_EBACKEND: return "BL_EBACKEND";
    case BL_EFULL: return "BL_EFULL";
    case BL_EEMPTY: return "BL_EEMPTY";
    case BL_EFN: return "BL_EFN";
    case BL_ENOMEM: return "BL_ENOMEM";
    case BL_EABI: return "BL_EABI";
    case BL_ENOTFOUND: return "BL_ENOTFOUND";
    case BL_EAUTH: return "BL_EAUTH";
    default: return "BL_E?";
    }
}

BL_API int32_t bl_abi_version(void) { return BACKLINE_ABI_VERSION; }

double bl__ns_per_tick = 1.0;
static pthread_once_t ticks_once = PTHREAD_ONCE_INIT;

static void calibrate(void) { bl__ns_per_tick = bl_pingpong_measure_ns_per_tick(); }

void bl__calibrate_ticks(void) { pthread_once(&ticks_once, calibrate); }
BL_API uint64_t bl_now_ns(void) { return bl__now(); }

static const char *role_name(int32_t role) {
    return role == BL_CONTROLLER ? "controller" : "coprocessor";
}

/* ---- registry ---------------------------------------------------------------------------- */

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static bl_session *registry_head;

static bl_session *registry_find(int32_t role, const char *key) {
    for (bl_session *s = registry_head; s; s = s->next)
        if (s->role == role && strcmp(s->key, key) == 0) return s;
    return NULL;
}

static int registry_contains(const bl_session *p) {
    for (bl_session *s = registry_head; s; s = s->next)
        if (s == p) return 1;
    return 0;
}

static void registry_remove(bl_session *p) {
    for (bl_session **pp = &registry_head; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            return;
        }
}

BL_API bl_session *bl_session_get(int32_t role, const char *key) {
    if (!key || (role != BL_CONTROLLER && role != BL_COPROCESSOR)) {
        fail(BL_EINVAL, "bl_session_get: role must be 0 (controller) or 1 (coprocessor) and key non-NULL");
        return NULL;
    }
    pthread_mutex_lock(&registry_lock);
    bl_session *s = registry_find(role, key);
    pthread_mutex_unlock(&registry_lock);
    if (!s)
        fail(BL_ENOTFOUND, "no %s session is registered under key '%s' (create it first)",
             role_name(role), key);
    return s;
}

/* ---- configuration ---------------------------------------------------------------------- */

static const char *const core_keys[] = {"slots", "slot_bytes", "timeout_ms", "connect_timeout_ms",
                                        "idle_spin_us", NULL};

static int key_in(const char *key, const char *const *list) {
    for (; list && *list; ++list)
        if (strcmp(*list, key) == 0) return 1;
    return 0;
}

static int parse_u64(const char *v, uint64_t *out) {
    size_t n = strlen(v);
    if (n == 0 || n > 19) return 0;
    uint64_t x = 0;
    for (size_t i = 0; i < n; ++i) {
        if (v[i] < '0' || v[i] > '9') return 0;
        x = x * 10 + (uint64_t)(v[i] - '0');
    }
    *out = x;
    return 1;
}

static const char *cfg_lookup(const bl_session *s, const char *key) {
    if (!s || !key) return NULL;
    for (uint32_t i = 0; i < s->cfg_n; ++i)
        if (strcmp(s->cfg_key[i], key) == 0) return s->cfg_val[i];
    return NULL;
}

static const char *host_config_str(const bl_session *s, const char *key) { return cfg_lookup(s, key); }

static int32_t host_config_int(const bl_session *s, const char *key, int64_t min, int64_t max, int64_t dflt,
                               int64_t *out, char *err, size_t errlen) {
    const char *v = cfg_lookup(s, key);
    if (!v) {
        *out = dflt;
        return BL_OK;
    }
    const char *digits = *v == '-' ? v + 1 : v;
    uint64_t x = 0;
    if (!parse_u64(digits, &x) || x > (uint64_t)INT64_MAX || (*v == '-' ? -(int64_t)x : (int64_t)x) < min ||
        (*v == '-' ? -(int64_t)x : (int64_t)x) > max) {
        snprintf(err, errlen, "%s=%s: must be an integer from %lld to %lld", key, v, (long long)min, (long long)max);
        return BL_EINVAL;
    }
    *out = *v == '-' ? -(int64_t)x : (int64_t)x;
    return BL_OK;
}

static void known_keys(const bl_session *s, char *out, size_t n) {
    out[0] = 0;
    for (int pass = 0; pass < 2; ++pass)
        for (const char *const *k = pass ? s->be->config_keys : core_keys; k && *k; ++k) {
            size_t used = strlen(out);
            snprintf(out + used, n - used, "%s%s", used ? ", " : "", *k);
        }
}

/* Split the configuration once (syntax, repeats, known keys) and read the core's keys. */
static int32_t parse_config(bl_session *s, const char *config) {
    s->cfg_slots = BL_DEFAULT_SLOTS;
    s->cfg_slot_bytes = BL_DEFAULT_SLOT_BYTES;
    s->timeout_ns = (uint64_t)BL_DEFAULT_TIMEOUT_MS * 1000000ull;
    s->connect_timeout_ns = (uint64_t)BL_DEFAULT_CONNECT_TIMEOUT_MS * 1000000ull;
    s->idle_spin_ns = (int64_t)BL_DEFAULT_IDLE_SPIN_US * 1000;
    s->cfg_n = 0;
    s->cfg_buf = strdup(config);
    if (!s->cfg_buf) return fail(BL_ENOMEM, "configuration: out of memory");
    if (!*config) return BL_OK;
    size_t total = strlen(config);
    if (config[total - 1] == ';')
        return fail(BL_EINVAL, "malformed configuration '%s': it ends with ';' (drop it)", config);
    for (char *p = s->cfg_buf; p;) {
        char *end = strchr(p, ';');
        if (end) *end = 0;
        char *eq = strchr(p, '=');
        if (!eq || eq == p || !eq[1])
            return fail(BL_EINVAL, "malformed configuration item '%s' in '%s': expected key=value pairs separated by ';'",
                        p, config);
        *eq = 0;
        const char *key = p, *v = eq + 1;
        if (strchr(v, '='))
            return fail(BL_EINVAL, "malformed configuration item '%s=%s' in '%s': a value may not contain '='", key, v, config);
        if (cfg_lookup(s, key))
            return fail(BL_EINVAL, "configuration key '%s' is given twice in '%s'", key, config);
        if (!key_in(key, core_keys) && !key_in(key, s->be->config_keys)) {
            char known[512];
            known_keys(s, known, sizeof known);
            return fail(BL_EINVAL, "unknown configuration key '%s' for transport '%s' (known keys: %s)", key,
                        s->be->name, known);
        }
        if (s->cfg_n == BL_MAX_CONFIG_ITEMS)
            return fail(BL_EINVAL, "configuration '%s' has more than %u items", config, BL_MAX_CONFIG_ITEMS);
        s->cfg_key[s->cfg_n] = key;
        s->cfg_val[s->cfg_n++] = v;
        uint64_t x = 0;
        int numeric = parse_u64(v, &x);
        if (!strcmp(key, "slots")) {
            if (!numeric || x < 1 || x > BL_MAX_SLOTS || (x & (x - 1)))
                return fail(BL_EINVAL, "slots=%s: must be a power of two from 1 to %u", v, BL_MAX_SLOTS);
            s->cfg_slots = (uint32_t)x;
            s->slots_explicit = 1;
        } else if (!strcmp(key, "slot_bytes")) {
            if (!numeric || x < BL_SLOT_ALIGN || x % BL_SLOT_ALIGN || x > BL_MAX_SLOT_BYTES)
                return fail(BL_EINVAL, "slot_bytes=%s: must be a multiple of %u from %u to %u (it includes the %u-byte frame header)",
                            v, BL_SLOT_ALIGN, BL_SLOT_ALIGN, BL_MAX_SLOT_BYTES, BL_FRAME_HEADER_BYTES);
            s->cfg_slot_bytes = (uint32_t)x;
            s->slot_bytes_explicit = 1;
        } else if (!strcmp(key, "timeout_ms")) {
            if (!numeric || x < 1 || x > BL_MAX_TIMEOUT_MS)
                return fail(BL_EINVAL, "timeout_ms=%s: must be an integer from 1 to %u", v, BL_MAX_TIMEOUT_MS);
            s->timeout_ns = x * 1000000ull;
        } else if (!strcmp(key, "connect_timeout_ms")) {
            if (!numeric || x < 1 || x > BL_MAX_TIMEOUT_MS)
                return fail(BL_EINVAL, "connect_timeout_ms=%s: must be an integer from 1 to %u", v, BL_MAX_TIMEOUT_MS);
            s->connect_timeout_ns = x * 1000000ull;
        } else if (!strcmp(key, "idle_spin_us")) {
            if (!strcmp(v, "-1"))
                s->idle_spin_ns = -1;
            else if (numeric && x <= BL_MAX_IDLE_SPIN_US)
                s->idle_spin_ns = (int64_t)x * 1000;
            else
                return fail(BL_EINVAL, "idle_spin_us=%s: must be -1 (never sleep) or microseconds from 0 to %llu", v,
                            (unsigned long long)BL_MAX_IDLE_SPIN_US);
        }
        p = end ? end + 1 : NULL;
    }
    return BL_OK;
}

/* ---- session creation ------------------------------------------------------------------- */

static void host_error_text(const char *text) {
    snprintf(tl_error, sizeof tl_error, "%s", text ? text : "");
}

static const bl_host_api host_api = {
    .abi_version = BACKLINE_ABI_VERSION,
    .serve = bl_serve,
    .serve_pending = bl_serve_pending,
    .now_ns = bl_now_ns,
    .config_str = host_config_str,
    .config_int = host_config_int,
    .error_text = host_error_text,
};

static int key_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
}

static int32_t check_key(const char *key) {
    if (!key || !*key || strlen(key) > BL_KEY_MAX_LEN)
        return fail(BL_EINVAL, "session key must be 1 to %u characters", BL_KEY_MAX_LEN);
    if (key[0] == '_' || key[0] == '-' || key[0] == '.')
        return fail(BL_EINVAL, "session key '%s' must start with a letter or a digit", key);
    for (const char *c = key; *c; ++c)
        if (!key_char(*c))
            return fail(BL_EINVAL, "session key '%s' may only contain letters, digits, '_', '-' and '.'", key);
    return BL_OK;
}

static void free_session(bl_session *s) {
    free(s->cfg_buf);
    free(s->config);
    free(s);
}

/* Load the backend, check the arguments, parse the configuration: a session that is not
 * registered and has no backend instance yet. */
static int32_t new_session(const char *backend_lib, int32_t role, const char *key, const char *config,
                           int32_t runs_in, bl_session **out) {
    *out = NULL;
    if (!backend_lib || !*backend_lib) return fail(BL_EINVAL, "bl_session_create: backend_lib is empty");
    if (role != BL_CONTROLLER && role != BL_COPROCESSOR)
        return fail(BL_EINVAL, "bl_session_create: role %d is neither 0 (controller) nor 1 (coprocessor)", role);
    if (runs_in < BL_RUNS_ANY || runs_in > BL_RUNS_PROCESS || (role == BL_COPROCESSOR && runs_in == BL_RUNS_ANY))
        return fail(BL_EINVAL, "bl_session_create: runs_in %d is not a bl_runs_in%s", runs_in,
                    role == BL_COPROCESSOR ? " a coprocessor can run in (0, 1 or 2)" : " (-1 to 2)");
    int32_t rc = check_key(key);
    if (rc) return rc;

    void *dl = dlopen(backend_lib, RTLD_NOW | RTLD_LOCAL);
    if (!dl) return fail(BL_EBACKEND, "cannot load transport backend '%s': %s", backend_lib, dlerror());
    bl_backend_entry_fn entry = (bl_backend_entry_fn)dlsym(dl, BL_BACKEND_ENTRY);
    if (!entry) {
        dlclose(dl);
        return fail(BL_EABI, "'%s' is not a Backline transport backend: it does not export %s",
                    backend_lib, BL_BACKEND_ENTRY);
    }
    const bl_backend *be = entry();
    if (!be || be->abi_version != BACKLINE_ABI_VERSION) {
        uint32_t v = be ? be->abi_version : 0;
        dlclose(dl);
        return fail(BL_EABI, "backend '%s' was built for Backline ABI %u, this runtime is ABI %d; rebuild the plugin "
                    "against this backline-core (pip install --no-build-isolation --force-reinstall <plugin>)",
                    backend_lib, v, BACKLINE_ABI_VERSION);
    }
    if (!be->open || !be->connect || !be->alloc_memory || !be->exchange_keys ||
        !be->establish_channel || !be->start || !be->stop || !be->close) {
        dlclose(dl);
        return fail(BL_EABI, "backend '%s' leaves a required hook NULL", backend_lib);
    }
    bl_session *s = calloc(1, sizeof *s);
    if (!s) {
        dlclose(dl);
        return fail(BL_ENOMEM, "bl_session_create: out of memory");
    }
    s->magic = SESSION_MAGIC;
    s->role = role;
    s->runs_in = runs_in;
    s->be = be;
    s->dl = dl;
    snprintf(s->key, sizeof s->key, "%s", key);
    s->config = strdup(config ? config : "");
    rc = s->config ? parse_config(s, s->config) : fail(BL_ENOMEM, "bl_session_create: out of memory");
    if (rc != BL_OK) {
        free_session(s);
        dlclose(dl);
        return rc;
    }
    *out = s;
    return BL_OK;
}

static int32_t open_backend(bl_session *s, int check_only) {
    bl_open_args args = {
        .abi_version = BACKLINE_ABI_VERSION, .role = s->role, .key = s->key, .config = s->config,
        .slots = s->cfg_slots, .slot_bytes = s->cfg_slot_bytes, .session = s, .host = &host_api,
        .runs_in = s->runs_in, .check_only = check_only,
        .timeout_ns = s->timeout_ns, .connect_timeout_ns = s->connect_timeout_ns,
    };
    char err[ERR_MAX / 2] = "";
    int32_t rc = s->be->open(&args, &s->impl, err, sizeof err);
    if (rc != BL_OK)
        return fail(rc, "%s backend: open (%s '%s') failed: %s", s->be->name, role_name(s->role), s->key,
                    *err ? err : bl_status_name(rc));
    return BL_OK;
}

BL_API int32_t bl_config_check(const char *backend_lib, int32_t role, const char *key, const char *config,
                               int32_t runs_in) {
    bl_session *s;
    int32_t rc = new_session(backend_lib, role, key, config, runs_in, &s);
    if (rc) return rc;
    rc = open_backend(s, 1);
    if (rc == BL_OK) s->be->close(s->impl);
    void *dl = s->dl;
    free_session(s);
    dlclose(dl);
    return rc;
}

BL_API int32_t bl_session_create(const char *backend_lib, int32_t role, const char *key,
                                 const char *config, int32_t runs_in, bl_session **out) {
    if (!out) return fail(BL_EINVAL, "bl_session_create: out is NULL");
    bl__calibrate_ticks();
    bl_session *s;
    int32_t rc = new_session(backend_lib, role, key, config, runs_in, &s);
    if (rc) {
        *out = NULL;
        return rc;
    }
    pthread_mutex_lock(&registry_lock);
    if (registry_find(role, key)) {
        pthread_mutex_unlock(&registry_lock);
        rc = fail(BL_EBUSY, "a %s session is already registered under key '%s' in this process; destroy it first or use another key",
                  role_name(role), key);
        goto fail_free;
    }
    s->next = registry_head;
    registry_head = s;
    pthread_mutex_unlock(&registry_lock);
    rc = open_backend(s, 0);
    if (rc != BL_OK) {
        pthread_mutex_lock(&registry_lock);
        registry_remove(s);
        pthread_mutex_unlock(&registry_lock);
        goto fail_free;
    }
    s->state = ST_CREATED;
    *out = s;
    return BL_OK;

fail_free: {
    void *dl = s->dl;
    free_session(s);
    dlclose(dl);
    *out = NULL;
    return rc;
}
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

static int32_t check_session(bl_session *s, const char *call) {
    if (BL_UNLIKELY(!s || s->magic != SESSION_MAGIC))
        return fail(BL_EINVAL, "%s: not a live session (NULL or destroyed)", call);
    return BL_OK;
}

static __thread int tl_async_worker; /* this thread runs an asynchronous bring-up step */

/* The sessions whose round this thread is inside: a coprocessor it serves (bl_serve,
 * bl_serve_pending) and a controller whose deliver hook runs the coprocessor in place. A
 * coprocessor function runs there, and must not stop, destroy or park them: that would free
 * (or wait on) the session under its own stack. */
static __thread bl_session *tl_serving, *tl_delivering;

static int32_t refuse_from_inside(bl_session *s, const char *call) {
    if (BL_LIKELY(s != tl_serving && s != tl_delivering)) return BL_OK;
    return fail(BL_ESTATE, "%s (%s '%s'): a coprocessor function cannot stop or destroy the session that is running it; "
                "return from the function, and stop and destroy the session from another thread",
                call, role_name(s->role), s->key);
}

static int32_t expect_state(bl_session *s, const char *call, int32_t want) {
    int32_t rc = check_session(s, call);
    if (rc) return rc;
    if (__atomic_load_n(&s->busy, __ATOMIC_ACQUIRE) && !tl_async_worker)
        return fail(BL_ESTATE, "%s (%s '%s'): an asynchronous bring-up step is in flight on this session; "
                    "await its token first", call, role_name(s->role), s->key);
    if (s->state != want) {
        if (s->state == ST_STOPPED)
            return fail(BL_ESTATE, "%s (%s '%s'): the session is stopped", call, role_name(s->role), s->key);
        return fail(BL_ESTATE, "%s (%s '%s') is out of order: the session is %s, and %s needs it %s. "
                    "Order: connect, alloc_memory, exchange_keys, establish_channel, %s, start",
                    call, role_name(s->role), s->key, state_names[s->state], call, state_names[want],
                    s->role == BL_CONTROLLER ? "set_message_sizes" : "set_coprocessor_fn");
    }
    return BL_OK;
}

static int32_t backend_fail(bl_session *s, const char *step, int32_t rc, const char *err) {
    return fail(rc, "%s backend: %s (%s '%s') failed: %s", s->be->name, step, role_name(s->role),
                s->key, *err ? err : bl_status_name(rc));
}

BL_API int32_t bl_connect(bl_session *s) {
    int32_t rc = expect_state(s, "connect", ST_CREATED);
    if (rc) return rc;
    char err[ERR_MAX / 2] = "";
    rc = s->be->connect(s->impl, bl__now() + s->connect_timeout_ns, err, sizeof err);
    if (rc) return backend_fail(s, "connect", rc, err);
    s->state = ST_CONNECTED;
    return BL_OK;
}

BL_API int32_t bl_alloc_memory(bl_session *s) {
    int32_t rc = expect_state(s, "alloc_memory", ST_CONNECTED);
    if (rc) return rc;
    char err[ERR_MAX / 2] = "";
    rc = s->be->alloc_memory(s->impl, err, sizeof err);
    if (rc) return backend_fail(s, "alloc_memory", rc, err);
    s->state = ST_ALLOCATED;
    return BL_OK;
}

BL_API int32_t bl_exchange_keys(bl_session *s) {
    int32_t rc = expect_state(s, "exchange_keys", ST_ALLOCATED);
    if (rc) return rc;
    char err[ERR_MAX / 2] = "";
    rc = s->be->exchange_keys(s->impl, bl__now() + s->connect_timeout_ns, err, sizeof err);
    if (rc) return backend_fail(s, "exchange_keys", rc, err);
    s->state = ST_KEYS;
    return BL_OK;
}

/* ---- asynchronous bring-up ------------------------------------------------------------
 * connect and (alloc_memory + exchange_keys) can run on a worker thread, so bring-up of
 * one session overlaps other work -- e.g. a controller waiting for its coprocessor while
 * the same thread brings that coprocessor up. The session refuses other lifecycle calls
 * until the token is awaited. */

struct async_step {
    int64_t token;
    bl_session *s;
    int exchange; /* 0: connect; 1: alloc_memory + exchange_keys */
    pthread_t thread;
    int done;
    int32_t status;
    char error[ERR_MAX];
    struct async_step *next;
};

static pthread_mutex_t async_lock = PTHREAD_MUTEX_INITIALIZER;
static struct async_step *async_head;
static int64_t async_next_token = 1;

static void *async_main(void *arg) {
    struct async_step *a = arg;
    tl_async_worker = 1;
    int32_t rc = a->exchange ? bl_alloc_memory(a->s) : bl_connect(a->s);
    if (rc == BL_OK && a->exchange) rc = bl_exchange_keys(a->s);
    a->status = rc;
    if (rc) memcpy(a->error, tl_error, sizeof a->error);
    __atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int64_t start_async(bl_session *s, int exchange, const char *call, int32_t want) {
    int32_t rc = expect_state(s, call, want);
    if (rc) return rc;
    struct async_step *a = calloc(1, sizeof *a);
    if (!a) return fail(BL_ENOMEM, "%s: out of memory", call);
    a->s = s;
    a->exchange = exchange;
    __atomic_store_n(&s->busy, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&async_lock);
    a->token = async_next_token++;
    int prc = pthread_create(&a->thread, NULL, async_main, a);
    if (prc == 0) {
        a->next = async_head;
        async_head = a;
    }
    pthread_mutex_unlock(&async_lock);
    if (prc) {
        __atomic_store_n(&s->busy, 0, __ATOMIC_RELEASE);
        free(a);
        return fail(BL_EBACKEND, "%s: cannot start a worker thread: %s", call, strerror(prc));
    }
    return a->token;
}

BL_API int64_t bl_connect_async(bl_session *s) { return start_async(s, 0, "connect_async", ST_CREATED); }
BL_API int64_t bl_exchange_keys_async(bl_session *s) { return start_async(s, 1, "exchange_keys_async", ST_CONNECTED); }

static struct async_step *take_step(int64_t token, bl_session *of_session) {
    pthread_mutex_lock(&async_lock);
    struct async_step *found = NULL;
    for (struct async_step **pp = &async_head; *pp; pp = &(*pp)->next)
        if ((token && (*pp)->token == token) || (of_session && (*pp)->s == of_session)) {
            found = *pp;
            *pp = found->next;
            break;
        }
    pthread_mutex_unlock(&async_lock);
    return found;
}

static int32_t finish_step(struct async_step *a) {
    pthread_join(a->thread, NULL);
    __atomic_store_n(&a->s->busy, 0, __ATOMIC_RELEASE);
    int32_t rc = a->status;
    if (rc) memcpy(tl_error, a->error, sizeof tl_error);
    free(a);
    return rc;
}

BL_API int32_t bl_await(int64_t token) {
    if (token < 0) return (int32_t)token; /* the *_async call itself failed: pass its status on */
    pthread_mutex_lock(&async_lock);
    struct async_step *a = async_head;
    while (a && a->token != token) a = a->next;
    uint64_t deadline = a ? bl__now() + 2 * a->s->connect_timeout_ns : 0;
    pthread_mutex_unlock(&async_lock);
    if (!a) return fail(BL_EINVAL, "await: token %lld names no asynchronous step in flight (already awaited?)", (long long)token);
    /* The step itself is bounded by connect_timeout_ms; this deadline only guards a stuck backend. */
    while (!__atomic_load_n(&a->done, __ATOMIC_ACQUIRE)) {
        if (bl__now() > deadline)
            return fail(BL_ETIMEOUT, "await: the asynchronous step of '%s' is still running past its deadline", a->s->key);
        usleep(20);
    }
    return finish_step(take_step(token, NULL));
}

static uint64_t slot_seq(const uint8_t *ring, uint32_t slot_bytes, uint32_t slot) {
    return bl__load_acquire((const uint64_t *)(ring + (size_t)slot * slot_bytes));
}

BL_API int32_t bl_establish_channel(bl_session *s) {
    int32_t rc = expect_state(s, "establish_channel", ST_KEYS);
    if (rc) return rc;
    char err[ERR_MAX / 2] = "";
    bl_channel ch;
    memset(&ch, 0, sizeof ch);
    uint64_t deadline = bl__now() + s->connect_timeout_ns;
    rc = s->be->establish_channel(s->impl, &ch, deadline, err, sizeof err);
    if (rc) return backend_fail(s, "establish_channel", rc, err);
    if (!ch.request_ring || !ch.reply_ring || !ch.slots || (ch.slots & (ch.slots - 1)) ||
        ch.slot_bytes < BL_SLOT_ALIGN || ch.slot_bytes % BL_SLOT_ALIGN ||
        ((uintptr_t)ch.request_ring | (uintptr_t)ch.reply_ring) % BL_SLOT_ALIGN)
        return fail(BL_EBACKEND, "%s backend: establish_channel returned an invalid channel (rings must be 64-byte aligned, slots a power of two, slot_bytes a multiple of 64)",
                    s->be->name);
    if ((s->slots_explicit && ch.slots != s->cfg_slots) || (s->slot_bytes_explicit && ch.slot_bytes != s->cfg_slot_bytes))
        return fail(BL_EINVAL, "%s '%s' asked for %s=%u but the channel has slots=%u slot_bytes=%u; "
                    "configure the ring on the coprocessor (it owns the memory) or drop the key here",
                    role_name(s->role), s->key, s->slots_explicit && ch.slots != s->cfg_slots ? "slots" : "slot_bytes",
                    s->slots_explicit && ch.slots != s->cfg_slots ? s->cfg_slots : s->cfg_slot_bytes, ch.slots, ch.slot_bytes);
    s->ch = ch;
    s->mask = ch.slots - 1;
    s->slot_bytes = ch.slot_bytes;
    s->max_payload = ch.slot_bytes - BL_FRAME_HEADER_BYTES;
    if (s->role == BL_CONTROLLER) {
        s->tx_ring = ch.request_ring;
        s->rx_ring = ch.reply_ring;
        /* A coprocessor may outlive earlier controllers: continue their sequence, once
         * every request they posted has been answered. */
        uint64_t base = 0;
        for (uint32_t i = 0; i < ch.slots; ++i) {
            uint64_t q = slot_seq(ch.request_ring, ch.slot_bytes, i);
            if (q > base) base = q;
        }
        if (base) {
            uint32_t slot = (uint32_t)((base - 1) & s->mask);
            while (slot_seq(ch.reply_ring, ch.slot_bytes, slot) != base) {
                if (bl__now() > deadline)
                    return fail(BL_EPEER, "controller '%s': the coprocessor has not answered round %llu posted by a previous controller; restart the coprocessor",
                                s->key, (unsigned long long)base);
                usleep(100);
            }
        }
        s->staged = s->posted = s->collected = base;
        s->post_time = calloc(ch.slots, sizeof *s->post_time);
        if (!s->post_time) return fail(BL_ENOMEM, "establish_channel: out of memory");
    } else {
        s->tx_ring = ch.reply_ring;
        s->rx_ring = ch.request_ring;
        uint64_t served = 0;
        for (uint32_t i = 0; i < ch.slots; ++i) {
            uint64_t q = slot_seq(ch.reply_ring, ch.slot_bytes, i);
            if (q > served) served = q;
        }
        s->served = served;
        s->fns = calloc(BL_MAX_DECODERS, sizeof *s->fns);
        if (!s->fns) return fail(BL_ENOMEM, "establish_channel: out of memory");
    }
    s->state = ST_CHANNEL;
    return BL_OK;
}

BL_API int32_t bl_set_message_sizes(bl_session *s, uint32_t in_bytes, uint32_t out_bytes) {
    int32_t rc = check_session(s, "set_message_sizes");
    if (rc) return rc;
    if (s->role != BL_CONTROLLER)
        return fail(BL_ESTATE, "set_message_sizes is a controller call; '%s' is a coprocessor session (it binds functions with set_coprocessor_fn)", s->key);
    rc = expect_state(s, "set_message_sizes", ST_CHANNEL);
    if (rc) return rc;
    if (in_bytes == 0 || in_bytes > s->max_payload || out_bytes > s->max_payload)
        return fail(BL_ETOOBIG, "set_message_sizes(in=%u, out=%u): each must fit a slot's payload of %u bytes (slot_bytes %u minus the %u-byte header), and in must be > 0; raise slot_bytes on the coprocessor",
                    in_bytes, out_bytes, s->max_payload, s->slot_bytes, BL_FRAME_HEADER_BYTES);
    s->in_bytes = in_bytes;
    s->out_bytes = out_bytes;
    s->state = ST_CONFIGURED;
    return BL_OK;
}

BL_API int32_t bl_set_coprocessor_fn(bl_session *s, uint32_t decoder_id, bl_coprocessor_fn fn, void *ctx) {
    int32_t rc = check_session(s, "set_coprocessor_fn");
    if (rc) return rc;
    if (s->role != BL_COPROCESSOR)
        return fail(BL_ESTATE, "set_coprocessor_fn is a coprocessor call; '%s' is a controller session (it calls set_message_sizes)", s->key);
    if (s->state != ST_CHANNEL && s->state != ST_CONFIGURED)
        return expect_state(s, "set_coprocessor_fn", ST_CHANNEL);
    if (!fn) return fail(BL_EINVAL, "set_coprocessor_fn: fn is NULL");
    if (decoder_id >= BL_MAX_DECODERS)
        return fail(BL_EINVAL, "set_coprocessor_fn: decoder_id %u must be below %u", decoder_id, BL_MAX_DECODERS);
    s->fns[decoder_id].fn = fn;
    s->fns[decoder_id].ctx = ctx;
    s->state = ST_CONFIGURED;
    return BL_OK;
}

BL_API int32_t bl_set_coprocessor_fn_by_name(bl_session *s, uint32_t decoder_id, const char *library,
                                             const char *symbol, const char *init_symbol,
                                             const char *fini_symbol, const uint8_t *params,
                                             uint64_t params_len) {
    int32_t rc = check_session(s, "set_coprocessor_fn");
    if (rc) return rc;
    if (!symbol || !*symbol) return fail(BL_EINVAL, "set_coprocessor_fn: no symbol named");
    void *dl = dlopen(library && *library ? library : NULL, RTLD_NOW | RTLD_LOCAL);
    if (!dl) return fail(BL_EINVAL, "set_coprocessor_fn: cannot load '%s': %s", library ? library : "(this process)", dlerror());
    bl_coprocessor_fn fn = (bl_coprocessor_fn)dlsym(dl, symbol);
    if (!fn) {
        dlclose(dl);
        return fail(BL_EINVAL, "set_coprocessor_fn: '%s' has no symbol '%s'", library ? library : "(this process)", symbol);
    }
    void *ctx = NULL;
    bl_fn_fini fini = NULL;
    if (init_symbol && *init_symbol) {
        bl_fn_init init = (bl_fn_init)dlsym(dl, init_symbol);
        if (fini_symbol && *fini_symbol) fini = (bl_fn_fini)dlsym(dl, fini_symbol);
        if (!init || (fini_symbol && *fini_symbol && !fini)) {
            dlclose(dl);
            return fail(BL_EINVAL, "set_coprocessor_fn: '%s' lacks '%s' or '%s'", library, init_symbol, fini_symbol ? fini_symbol : "");
        }
        int32_t irc = init(params, params_len, &ctx);
        if (irc != 0) {
            dlclose(dl);
            return fail(BL_EFN, "set_coprocessor_fn: %s returned %d building the context of %s", init_symbol, irc, symbol);
        }
    }
    rc = bl_set_coprocessor_fn(s, decoder_id, fn, ctx);
    struct owned_ctx *o = calloc(1, sizeof *o);
    if (!o) rc = fail(BL_ENOMEM, "set_coprocessor_fn: out of memory");
    if (rc) {
        if (fini && ctx) fini(ctx);
        dlclose(dl);
        free(o);
        return rc;
    }
    *o = (struct owned_ctx){fini, ctx, dl, s->owned};
    s->owned = o;
    return BL_OK;
}

BL_API int32_t bl_start(bl_session *s) {
    int32_t rc = expect_state(s, "start", ST_CONFIGURED);
    if (rc) return rc;
    char err[ERR_MAX / 2] = "";
    s->stop_flag = 0;
    __atomic_store_n(&s->stop_done, 0, __ATOMIC_RELEASE);
    s->state = ST_STARTED; /* before the backend starts a poller that checks it */
    rc = s->be->start(s->impl, err, sizeof err);
    if (rc) {
        s->state = ST_CONFIGURED;
        return backend_fail(s, "start", rc, err);
    }
    return BL_OK;
}

/* ---- controller rounds -------------------------------------------------------------------- */

static int32_t round_state_error(bl_session *s, const char *call) {
    int32_t rc = check_session(s, call);
    if (rc) return rc;
    if (s->role != BL_CONTROLLER)
        return fail(BL_ESTATE, "%s is a controller call; '%s' is a coprocessor session", call, s->key);
    return expect_state(s, call, ST_STARTED);
}

static void ring_doorbell(bl_session *s) {
    uint32_t *db = s->ch.doorbell;
    /* Pairs with the coprocessor's flag store before its last look at the ring. */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (BL_UNLIKELY(__atomic_load_n(&db[0], __ATOMIC_RELAXED))) {
        __atomic_fetch_add(&db[1], 1, __ATOMIC_SEQ_CST);
        syscall(SYS_futex, &db[1], s->ch.doorbell_shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
}

/* Take the controller session for the calling thread (see bl_session.owner). */
static inline int32_t take_rounds(bl_session *s, const char *call) {
    uintptr_t me = (uintptr_t)pthread_self();
    uintptr_t cur = __atomic_load_n(&s->owner, __ATOMIC_RELAXED);
    if (BL_LIKELY(cur == me)) return BL_OK; /* rounds of this thread's in flight */
    cur = 0;
    if (BL_LIKELY(__atomic_compare_exchange_n(&s->owner, &cur, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)))
        return BL_OK;
    return fail(BL_EBUSY, "%s (controller '%s'): this controller session is in use by another thread (a call, or rounds "
                "it posted and has not collected); use one session per thread", call, s->key);
}

/* Let go of it once nothing is staged or in flight: another thread may then take it over. */
static inline int32_t release_rounds(bl_session *s, int32_t rc) {
    if (s->staged == s->posted && s->posted == s->collected) __atomic_store_n(&s->owner, 0, __ATOMIC_RELEASE);
    return rc;
}

static int32_t stage_payload(bl_session *s, const void *data, uint32_t len, uint32_t decoder_id);
static int32_t post(bl_session *s);
static int32_t wait_reply(bl_session *s, const char *call, const bl_frame_header **out);

BL_API int32_t bl_stage_payload(bl_session *s, const void *data, uint32_t len, uint32_t decoder_id) {
    if (BL_UNLIKELY(!s || s->magic != SESSION_MAGIC || s->state != ST_STARTED || s->role != BL_CONTROLLER))
        return round_state_error(s, "stage_payload");
    int32_t rc = take_rounds(s, "stage_payload");
    if (BL_UNLIKELY(rc)) return rc;
    return release_rounds(s, stage_payload(s, data, len, decoder_id));
}

static int32_t stage_payload(bl_session *s, const void *data, uint32_t len, uint32_t decoder_id) {
    if (BL_UNLIKELY(len > s->in_bytes))
        return fail(BL_ETOOBIG, "stage_payload (controller '%s'): payload of %u bytes exceeds the maximum of %u set by set_message_sizes",
                    s->key, len, s->in_bytes);
    if (BL_UNLIKELY(len && !data)) return fail(BL_EINVAL, "stage_payload: data is NULL");
    if (BL_UNLIKELY(decoder_id >= BL_MAX_DECODERS))
        return fail(BL_EINVAL, "stage_payload: decoder_id %u must be below %u", decoder_id, BL_MAX_DECODERS);
    uint64_t seq = s->posted + 1;
    if (BL_UNLIKELY(seq == 0)) /* 0 would wrap onto "slot never written": an empty reply nobody sent */
        return fail(BL_ESTATE, "stage_payload (controller '%s'): the round sequence numbers are exhausted (round %llu "
                    "was the last; the next would wrap to 0, which means a slot never written); start a new session "
                    "(a new coprocessor: a controller continues the count its rings carry)",
                    s->key, (unsigned long long)s->posted);
    if (BL_UNLIKELY(seq - s->collected > (uint64_t)s->mask + 1))
        return fail(BL_EFULL, "stage_payload (controller '%s'): all %u slots are in flight; collect a reply first",
                    s->key, s->mask + 1);
    uint8_t *slot = s->tx_ring + (size_t)((seq - 1) & s->mask) * s->slot_bytes;
    bl_frame_header *h = (bl_frame_header *)slot;
    if (len) memcpy(slot + BL_FRAME_HEADER_BYTES, data, len);
    h->len = len;
    h->decoder_id = decoder_id;
    h->status = 0;
    s->staged = seq;
    return BL_OK;
}

BL_API int32_t bl_post(bl_session *s) {
    if (BL_UNLIKELY(!s || s->magic != SESSION_MAGIC || s->state != ST_STARTED || s->role != BL_CONTROLLER))
        return round_state_error(s, "post");
    int32_t rc = take_rounds(s, "post");
    if (BL_UNLIKELY(rc)) return rc;
    return release_rounds(s, post(s));
}

static int32_t post(bl_session *s) {
    uint64_t seq = s->posted + 1;
    if (BL_UNLIKELY(s->staged != seq))
        return fail(BL_ESTATE, "post (controller '%s'): nothing staged; call stage_payload before each post", s->key);
    uint32_t slot = (uint32_t)((seq - 1) & s->mask);
    s->post_time[slot] = bl__ticks();
    bl__store_release((uint64_t *)(s->tx_ring + (size_t)slot * s->slot_bytes), seq);
    s->posted = seq;
    if (s->ch.doorbell) ring_doorbell(s);
    if (s->ch.deliver) {
        tl_error[0] = 0; /* so a hook that fails without text does not show an older error */
        bl_session *outer = tl_delivering;
        tl_delivering = s; /* an inline coprocessor function runs inside this call */
        int32_t rc = s->ch.deliver(s->ch.impl, seq, slot);
        tl_delivering = outer;
        /* A deliver hook may run the round itself (an inline coprocessor): one that took
         * longer than the deadline is a deadline error, as a late reply would be. */
        if (BL_UNLIKELY(!rc && bl__ns_since(s->post_time[slot]) > s->timeout_ns)) {
            s->collected = s->posted;
            return fail(BL_ETIMEOUT, "post (controller '%s'): round %llu took longer than timeout_ms=%llu to deliver "
                        "(an inline coprocessor function overran the deadline)", s->key, (unsigned long long)seq,
                        (unsigned long long)(s->timeout_ns / 1000000));
        }
        if (BL_UNLIKELY(rc)) {
            s->collected = s->posted; /* the round is lost: it must not hold a ring slot */
            char reason[ERR_MAX / 2];
            snprintf(reason, sizeof reason, "%s", tl_error[0] ? tl_error : bl_status_name(rc));
            return fail(rc, "post (controller '%s'): the %s backend could not deliver round %llu: %s", s->key,
                        s->be->name, (unsigned long long)seq, reason);
        }
    }
    return BL_OK;
}

/* How long a wait spins before it also yields the CPU each time it looks at the clock: longer than
 * the rounds of the fast decoders on a CPU of their own, far shorter than a scheduler time slice
 * (milliseconds); a slower round pays a sched_yield (well under a microsecond) per clock read. */
#define BL_SPIN_BEFORE_YIELD_NS 20000u

/* Wait for the reply to the oldest in-flight round; return its header. */
static int32_t wait_reply(bl_session *s, const char *call, const bl_frame_header **out) {
    if (BL_UNLIKELY(s->posted == s->collected))
        return fail(BL_EEMPTY, "%s (controller '%s'): no round is in flight; post one first", call, s->key);
    uint64_t seq = s->collected + 1;
    uint32_t slot = (uint32_t)((seq - 1) & s->mask);
    const bl_frame_header *h = (const bl_frame_header *)(s->rx_ring + (size_t)slot * s->slot_bytes);
    uint64_t now = 0;
    if (s->ch.poll) s->ch.poll(s->ch.impl);
    if (BL_UNLIKELY(bl__load_acquire(&h->seq) != seq)) {
        /* The clock is read only every 256 spins, not before the first: a clock read costs
         * ~20 ns here, and a reply that lands during it would be seen that much later. The
         * deadline thus starts a few hundred spins late, well under a microsecond. */
        uint64_t deadline = 0, next_alive = 0, yield_after = 0;
        for (uint32_t spins = 1;; ++spins) {
            bl_cpu_relax();
            if (s->ch.poll) s->ch.poll(s->ch.impl);
            if (bl__load_acquire(&h->seq) == seq) break;
            if ((spins & 255) == 0) {
                now = bl__now();
                if (!deadline) {
                    deadline = now + s->timeout_ns;
                    next_alive = now + 1000000;
                    yield_after = now + BL_SPIN_BEFORE_YIELD_NS;
                } else if (now > deadline) {
                    s->collected = s->posted; /* the round is lost; do not wait on it again */
                    return fail(BL_ETIMEOUT, "%s (controller '%s'): no reply to round %llu within %llu ms; the coprocessor is silent or dead",
                                call, s->key, (unsigned long long)seq, (unsigned long long)(s->timeout_ns / 1000000));
                }
                if (BL_UNLIKELY(__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != ST_STARTED)) {
                    s->collected = s->posted;
                    return fail(BL_ESTATE, "%s (controller '%s'): the session was stopped by another thread while waiting for round %llu",
                                call, s->key, (unsigned long long)seq);
                }
                /* A reply this late may be held up by a coprocessor thread that shares this CPU (a poller
                 * pinned where the scheduler also put this thread): give it the CPU rather than spin
                 * out a whole time slice. With nothing else runnable here this returns at once. */
                if (now > yield_after) sched_yield();
                if (s->ch.peer_alive && now > next_alive) {
                    next_alive = now + 1000000;
                    tl_error[0] = 0;
                    int32_t alive = 1;
                    if (bl__load_acquire(&h->seq) != seq && (alive = s->ch.peer_alive(s->ch.impl)) <= 0) {
                        s->collected = s->posted;
                        char why[ERR_MAX / 2];
                        snprintf(why, sizeof why, "%s%s", tl_error[0] ? ": " : "", tl_error);
                        if (alive < 0) /* the backend's own verdict on the round (a controller's timeout) */
                            return fail(alive, "%s (controller '%s'): round %llu failed%s", call, s->key,
                                        (unsigned long long)seq, why);
                        return fail(BL_EPEER, "%s (controller '%s'): the coprocessor died before answering round %llu%s",
                                    call, s->key, (unsigned long long)seq, why);
                    }
                }
            }
        }
    }
    s->last_rtt = bl__ns_since(s->post_time[slot]);
    if (s->rtt_log) { /* one branch, predicted either way, when not recording */
        if (s->rtt_count < s->rtt_cap) s->rtt_log[s->rtt_count] = s->last_rtt;
        ++s->rtt_count;
    }
    s->collected = seq;
    if (BL_UNLIKELY(h->status != BL_OK)) {
        if (h->status == BL_EDECODER)
            return fail(BL_EDECODER, "%s (controller '%s'): round %llu asked for decoder_id %u, but the coprocessor has no function bound to it",
                        call, s->key, (unsigned long long)seq, h->decoder_id);
        if (h->status == BL_EFN)
            return fail(BL_EFN, "%s (controller '%s'): the coprocessor function for decoder_id %u failed on round %llu (it returned %lld)",
                        call, s->key, h->decoder_id, (unsigned long long)seq, (long long)h->fn_status);
        return fail(h->status, "%s (controller '%s'): the coprocessor answered round %llu with %s", call, s->key,
                    (unsigned long long)seq, bl_status_name(h->status));
    }
    if (BL_UNLIKELY(h->len > s->out_bytes))
        return fail(BL_ETOOBIG, "%s (controller '%s'): the reply to round %llu has %u bytes, more than out_bytes=%u",
                    call, s->key, (unsigned long long)seq, h->len, s->out_bytes);
    *out = h;
    return BL_OK;
}

BL_API int32_t bl_collect(bl_session *s, void *out, uint32_t out_cap, uint32_t *out_len) {
    if (BL_UNLIKELY(!s || s->magic != SESSION_MAGIC || s->state != ST_STARTED || s->role != BL_CONTROLLER))
        return round_state_error(s, "collect");
    int32_t rc = take_rounds(s, "collect");
    if (BL_UNLIKELY(rc)) return rc;
    const bl_frame_header *h;
    rc = wait_reply(s, "collect", &h);
    if (BL_UNLIKELY(rc)) return release_rounds(s, rc);
    if (BL_UNLIKELY(h->len > out_cap))
        return release_rounds(s, fail(BL_ETOOBIG, "collect (controller '%s'): the reply has %u bytes but the buffer holds %u",
                                      s->key, h->len, out_cap));
    if (h->len) memcpy(out, (const uint8_t *)h + BL_FRAME_HEADER_BYTES, h->len);
    if (out_len) *out_len = h->len;
    return release_rounds(s, BL_OK);
}

BL_API int32_t bl_reply_slot(bl_session *s, const uint8_t **data, uint32_t *len) {
    if (BL_UNLIKELY(!s || s->magic != SESSION_MAGIC || s->state != ST_STARTED || s->role != BL_CONTROLLER))
        return round_state_error(s, "reply_slot");
    int32_t rc = take_rounds(s, "reply_slot");
    if (BL_UNLIKELY(rc)) return rc;
    const bl_frame_header *h;
    rc = wait_reply(s, "reply_slot", &h);
    if (BL_UNLIKELY(rc)) return release_rounds(s, rc);
    if (data) *data = (const uint8_t *)h + BL_FRAME_HEADER_BYTES;
    if (len) *len = h->len;
    return release_rounds(s, BL_OK);
}

BL_API int32_t bl_round(bl_session *s, const void *in, uint32_t in_len, uint32_t decoder_id, void *out,
                        uint32_t out_cap, uint32_t *out_len) {
    int32_t rc = bl_stage_payload(s, in, in_len, decoder_id);
    if (BL_LIKELY(rc == BL_OK)) rc = bl_post(s);
    if (BL_LIKELY(rc == BL_OK)) rc = bl_collect(s, out, out_cap, out_len);
    return rc;
}

BL_API uint64_t bl_last_rtt_ns(bl_session *s) {
    return (s && s->magic == SESSION_MAGIC) ? s->last_rtt : 0;
}

BL_API int32_t bl_record_rtt(bl_session *s, uint64_t *buf, uint64_t cap) {
    int32_t rc = check_session(s, "record_rtt");
    if (rc) return rc;
    if (s->role != BL_CONTROLLER)
        return fail(BL_ESTATE, "record_rtt: '%s' is a coprocessor session; round trips are measured (and recorded) by the controller",
                    s->key);
    if (buf) { /* arm: a fresh count into a fresh buffer */
        s->rtt_count = 0;
        s->rtt_cap = cap;
    }
    s->rtt_log = buf; /* disarm keeps rtt_count, so it can still be read */
    return BL_OK;
}

BL_API uint64_t bl_recorded_rtt(bl_session *s) {
    return (s && s->magic == SESSION_MAGIC) ? s->rtt_count : 0;
}

/* ---- coprocessor serving ------------------------------------------------------------------ */

static inline void answer(bl_session *s, uint64_t seq) {
    uint32_t slot = (uint32_t)((seq - 1) & s->mask);
    const uint8_t *req = s->rx_ring + (size_t)slot * s->slot_bytes;
    uint8_t *rep = s->tx_ring + (size_t)slot * s->slot_bytes;
    const bl_frame_header *q = (const bl_frame_header *)req;
    bl_frame_header *r = (bl_frame_header *)rep;
    uint32_t did = q->decoder_id, len = q->len, out_len = 0;
    int32_t status = BL_OK;
    int64_t fn_rc = 0;
    if (BL_UNLIKELY(len > s->max_payload)) {
        status = BL_ETOOBIG;
    } else if (BL_UNLIKELY(did >= BL_MAX_DECODERS || !s->fns[did].fn)) {
        status = BL_EDECODER;
    } else {
        fn_rc = s->fns[did].fn(s->fns[did].ctx, did, req + BL_FRAME_HEADER_BYTES, len,
                               rep + BL_FRAME_HEADER_BYTES, s->max_payload, &out_len);
        if (BL_UNLIKELY(fn_rc != 0 || out_len > s->max_payload)) {
            status = BL_EFN;
            if (fn_rc == 0) fn_rc = -1; /* wrote more than out_cap */
            out_len = 0;
        }
    }
    r->len = out_len;
    r->decoder_id = did;
    r->status = status;
    r->fn_status = fn_rc;
    bl__store_release(&r->seq, seq);
    s->served = seq;
    if (s->ch.deliver) s->ch.deliver(s->ch.impl, seq, slot);
}

static inline int ready(bl_session *s, uint64_t seq) {
    const uint8_t *req = s->rx_ring + (size_t)((seq - 1) & s->mask) * s->slot_bytes;
    /* Past round 2^64 - 1 comes 0, "never written": no controller posts it (stage_payload refuses). */
    return BL_LIKELY(seq != 0) && bl__load_acquire((const uint64_t *)req) == seq;
}

BL_API int32_t bl_serve_pending(bl_session *s) {
    if (BL_UNLIKELY(!s || s->magic != SESSION_MAGIC || s->role != BL_COPROCESSOR || s->state != ST_STARTED)) {
        int32_t rc = check_session(s, "serve");
        if (rc) return rc;
        if (s->role != BL_COPROCESSOR) return fail(BL_ESTATE, "serve is a coprocessor call; '%s' is a controller session", s->key);
        return expect_state(s, "serve", ST_STARTED);
    }
    int32_t n = 0;
    bl_session *outer = tl_serving;
    tl_serving = s; /* its functions run below: they may not tear it down */
    if (s->ch.poll) s->ch.poll(s->ch.impl);
    while (ready(s, s->served + 1)) {
        answer(s, s->served + 1);
        ++n;
        if (s->ch.poll) s->ch.poll(s->ch.impl);
    }
    tl_serving = outer;
    return n;
}

static void doorbell_sleep(bl_session *s) {
    uint32_t *db = s->ch.doorbell;
    uint32_t ticket = __atomic_load_n(&db[1], __ATOMIC_SEQ_CST);
    __atomic_store_n(&db[0], 1, __ATOMIC_SEQ_CST);
    if (!ready(s, s->served + 1) && !s->stop_flag) {
        /* Timed, so a stop or a dead controller is noticed even without a wake. */
        struct timespec ts = {0, 100 * 1000 * 1000};
        syscall(SYS_futex, &db[1], s->ch.doorbell_shared ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE, ticket, &ts, NULL, 0);
    }
    __atomic_store_n(&db[0], 0, __ATOMIC_SEQ_CST);
}

BL_API int32_t bl_serve(bl_session *s) {
    int32_t rc = bl_serve_pending(s);
    if (rc < 0) return rc;
    uint64_t idle_since = bl__now();
    /* How often an idle loop reads the clock: every 256 spins, and every 32 once it yields, so
     * a controller sharing this CPU gets it back within a microsecond or two of its reply. */
    uint32_t check_mask = 255;
    bl_session *outer = tl_serving;
    tl_serving = s;
    for (uint32_t spins = 0; !s->stop_flag;) {
        if (s->ch.poll) s->ch.poll(s->ch.impl);
        if (ready(s, s->served + 1)) {
            do {
                answer(s, s->served + 1);
                if (s->ch.poll) s->ch.poll(s->ch.impl);
            } while (ready(s, s->served + 1));
            spins = 0;
            idle_since = 0;
            check_mask = 255;
            continue;
        }
        bl_cpu_relax();
        if ((++spins & check_mask) == 0) {
            uint64_t now = bl__now();
            if (!idle_since) idle_since = now;
            if (s->ch.doorbell && s->idle_spin_ns >= 0 && now - idle_since > (uint64_t)s->idle_spin_ns) {
                doorbell_sleep(s);
                spins = 0;
            } else if (now - idle_since > BL_SPIN_BEFORE_YIELD_NS) {
                sched_yield(); /* idle: a controller sharing this CPU gets it now, not at the slice's end */
                check_mask = 31;
            }
        }
    }
    tl_serving = outer;
    return BL_OK;
}

/* ---- teardown ---------------------------------------------------------------------------------- */

/* Park the calling thread while another thread (the backend's poller) serves: an executor's
 * serve launch waits here until its stop launch's bl_stop has finished (backend included, so
 * the caller may destroy next without racing the stopper). Polls every 10 ms under the
 * registry lock, so a session destroyed meanwhile is noticed rather than read after free. */
BL_API int32_t bl_park(bl_session *s) {
    int32_t rc = check_session(s, "park");
    if (rc) return rc;
    if ((rc = refuse_from_inside(s, "park"))) return rc; /* it would wait for a stop that waits for it */
    for (;;) {
        pthread_mutex_lock(&registry_lock);
        int live = registry_contains(s) && !__atomic_load_n(&s->stop_done, __ATOMIC_ACQUIRE);
        pthread_mutex_unlock(&registry_lock);
        if (!live) return BL_OK;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

BL_API int32_t bl_stop(bl_session *s) {
    pthread_mutex_lock(&registry_lock);
    int live = s && registry_contains(s);
    pthread_mutex_unlock(&registry_lock);
    if (!live) return BL_OK; /* already destroyed: stop is idempotent */
    int32_t refused = refuse_from_inside(s, "stop");
    if (refused) return refused; /* it would join or free what runs the calling function */
    for (struct async_step *a; (a = take_step(0, s));) finish_step(a); /* bounded by connect_timeout_ms */
    if (s->state == ST_STOPPED) return BL_OK;
    s->stop_flag = 1;
    if (s->ch.doorbell && s->role == BL_COPROCESSOR) {
        __atomic_fetch_add(&s->ch.doorbell[1], 1, __ATOMIC_SEQ_CST);
        syscall(SYS_futex, &s->ch.doorbell[1], s->ch.doorbell_shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
    }
    char err[ERR_MAX / 2] = "";
    /* Before the backend stops: a round waiting on another thread sees it and returns. */
    __atomic_store_n(&s->state, ST_STOPPED, __ATOMIC_RELEASE);
    int32_t rc = s->be->stop(s->impl, err, sizeof err);
    /* Only now may a parked thread go on (and, say, destroy): the backend's poller is joined. */
    __atomic_store_n(&s->stop_done, 1, __ATOMIC_RELEASE);
    if (rc) return backend_fail(s, "stop", rc, err);
    return BL_OK;
}

BL_API int32_t bl_destroy(bl_session *s) {
    pthread_mutex_lock(&registry_lock);
    int live = s && registry_contains(s);
    pthread_mutex_unlock(&registry_lock);
    if (!live) return BL_OK; /* destroy is idempotent */
    int32_t rc = refuse_from_inside(s, "destroy");
    if (rc) return rc; /* the session stays as it was: whoever runs it destroys it later */
    rc = bl_stop(s);
    pthread_mutex_lock(&registry_lock);
    registry_remove(s);
    pthread_mutex_unlock(&registry_lock);
    s->be->close(s->impl);
    for (struct owned_ctx *o = s->owned, *next; o; o = next) {
        next = o->next;
        if (o->fini && o->ctx) o->fini(o->ctx);
        dlclose(o->dl);
        free(o);
    }
    s->magic = 0;
    /* s->rtt_log belongs to the bl_record_rtt caller: never freed or written here. */
    free(s->post_time);
    free(s->fns);
    void *dl = s->dl;
    free_session(s);
    dlclose(dl);
    return rc;
}

BL_API int32_t bl_session_geometry(bl_session *s, uint32_t *slots, uint32_t *slot_bytes, uint32_t *in_bytes,
                                   uint32_t *out_bytes) {
    int32_t rc = check_session(s, "session_geometry");
    if (rc) return rc;
    if (slots) *slots = s->state >= ST_CHANNEL ? s->mask + 1 : s->cfg_slots;
    if (slot_bytes) *slot_bytes = s->state >= ST_CHANNEL ? s->slot_bytes : s->cfg_slot_bytes;
    if (in_bytes) *in_bytes = s->in_bytes;
    if (out_bytes) *out_bytes = s->out_bytes;
    return BL_OK;
}

BL_API int32_t bl_session_timeouts(bl_session *s, uint64_t *timeout_ms, uint64_t *connect_timeout_ms) {
    int32_t rc = check_session(s, "session_timeouts");
    if (rc) return rc;
    if (timeout_ms) *timeout_ms = s->timeout_ns / 1000000ull;
    if (connect_timeout_ms) *connect_timeout_ms = s->connect_timeout_ns / 1000000ull;
    return BL_OK;
}

int bl__pin_current_thread(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}
