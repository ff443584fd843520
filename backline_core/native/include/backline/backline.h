/*
 * backline.h -- the Backline runtime and transport-backend C ABI.
 *
 * Three contracts live here:
 *   1. the session API of libbackline (bl_session_*, bl_connect ... bl_destroy), used by
 *      Python (through cffi) and by compiled programs;
 *   2. the per-message coprocessor function signature (bl_coprocessor_fn);
 *   3. the transport backend ABI (bl_backend), which a transport plugin's shared library
 *      exports through the symbol BL_BACKEND_ENTRY.
 *
 * The wire format (frame header and ring geometry) is described in docs/wire-format.md.
 * All functions return a bl_status (0 on success, a negative BL_E* code on failure);
 * bl_last_error() gives the text of the calling thread's last failure.
 */
#ifndef BACKLINE_H
#define BACKLINE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI is BACKLINE_ABI_VERSION.BACKLINE_ABI_MINOR. The version changes with the layout or
 * the meaning of what crosses the ABI, and the core, the transports' handshakes and the
 * memcpy region refuse a peer of another version (BL_EABI). The minor changes only
 * source: names, never bytes, so peers and backends of any minor of one version work
 * together; it restarts at 0 with each version.
 * 2: the node's place (bl_runs_in) in bl_session_create and bl_open_args; configuration
 * parsed once by the core and read by backends through bl_host_api accessors.
 * 3: bl_host_api.error_text, so a deliver or peer_alive hook can say why it failed;
 *    bl_channel.poll, for backends whose frames arrive as completions (rdma).
 * 3.1: bl_frame_header's last field, which carries the coprocessor function's return
 *    value, is named fn_status (int64_t; it was `uint64_t reserved`): the same 8 bytes.
 * 4: bl_open_args carries the core's round and connect deadlines (timeout_ns,
 *    connect_timeout_ns), parsed once by the core: backends no longer read them from the text. */
#define BACKLINE_ABI_VERSION 4
#define BACKLINE_ABI_MINOR 0

#if defined(__GNUC__)
#define BL_API __attribute__((visibility("default")))
#else
#define BL_API
#endif

/* ---- status codes -------------------------------------------------------------- */
typedef enum bl_status {
    BL_OK = 0,
    BL_EINVAL = -1,     /* bad argument or configuration value */
    BL_ESTATE = -2,     /* lifecycle call out of order */
    BL_ETIMEOUT = -3,   /* the call's deadline passed (peer silent or dead) */
    BL_ETOOBIG = -4,    /* payload larger than the session maximum */
    BL_EDECODER = -5,   /* no coprocessor function bound to the frame's decoder_id */
    BL_EPEER = -6,      /* the peer went away or broke the protocol */
    BL_EBUSY = -7,      /* the session key is held by another session */
    BL_EBACKEND = -8,   /* the transport backend failed; see the error text */
    BL_EFULL = -9,      /* every ring slot is in flight; collect first */
    BL_EEMPTY = -10,    /* collect with no round in flight */
    BL_EFN = -11,       /* the coprocessor function returned an error */
    BL_ENOMEM = -12,    /* allocation failed (only during set-up) */
    BL_EABI = -13,      /* backend built for another ABI version */
    BL_ENOTFOUND = -14, /* no session under this (role, key); no such object or symbol */
    BL_EAUTH = -15      /* the peer failed authentication (an executor's secret) */
} bl_status;

typedef enum bl_role { BL_CONTROLLER = 0, BL_COPROCESSOR = 1 } bl_role;

/* Where a coprocessor runs relative to its controller (a field of the placement's node,
 * not a transport key). A coprocessor session says where it runs; a controller session
 * may say where it expects its coprocessor (BL_RUNS_ANY: wherever it is found). A
 * transport plugin declares which of these it supports. */
typedef enum bl_runs_in {
    BL_RUNS_ANY = -1,
    BL_RUNS_CONTROLLER_THREAD = 0, /* the controller's own thread, at post time */
    BL_RUNS_THREAD = 1,            /* another thread of the controller's process */
    BL_RUNS_PROCESS = 2            /* another process on this machine */
} bl_runs_in;

/* Session keys (a placement's node names): 1..BL_KEY_MAX_LEN characters of letters,
 * digits, '_', '.', '-', the first a letter or a digit. */
#define BL_KEY_MAX_LEN 64u

/* ---- configuration limits and defaults (the core keys; docs/architecture.md) -------- */
#define BL_DEFAULT_SLOTS 64u
#define BL_MAX_SLOTS 1048576u
#define BL_DEFAULT_SLOT_BYTES 256u
#define BL_MAX_SLOT_BYTES 16777216u
#define BL_DEFAULT_TIMEOUT_MS 1000u
#define BL_DEFAULT_CONNECT_TIMEOUT_MS 10000u
#define BL_MAX_TIMEOUT_MS 86400000u
#define BL_DEFAULT_IDLE_SPIN_US 10000u
#define BL_MAX_IDLE_SPIN_US 3600000000u
#define BL_MAX_CONFIG_ITEMS 64u

/* ---- wire format ------------------------------------------------------------------ */
/* A ring is `slots` (a power of two) slots of `slot_bytes` (a multiple of 64) bytes.
 * Round `seq` (1, 2, 3, ...) uses slot (seq - 1) & (slots - 1). Each slot starts with
 * this 32-byte header; the payload follows it. The producer writes the payload and the
 * other header fields first and stores `seq` last with release ordering, so a consumer
 * that reads the expected `seq` with acquire ordering sees a complete frame. */
#define BL_FRAME_HEADER_BYTES 32u
#define BL_SLOT_ALIGN 64u
#define BL_MAX_DECODERS 256u

typedef struct bl_frame_header {
    uint64_t seq;        /* round sequence number; 0 = slot never written */
    uint32_t len;        /* payload bytes that follow the header */
    uint32_t decoder_id; /* request: which bound function serves it; reply: echoed */
    int32_t status;      /* reply: BL_OK or the error of this round; request: 0 */
    uint32_t flags;      /* reserved, 0 */
    int64_t fn_status;   /* reply: the function's return value when status is BL_EFN (-1: it
                          * wrote more than out_cap), else 0; request: not written */
} bl_frame_header;

/* ---- coprocessor functions --------------------------------------------------------- */
/* Called once per message. Write at most out_cap bytes to out, set *out_len, and
 * return 0; any nonzero return becomes the round's error (BL_EFN) at the controller. */
typedef int32_t (*bl_coprocessor_fn)(void *ctx, uint32_t decoder_id, const uint8_t *in,
                                     uint32_t in_len, uint8_t *out, uint32_t out_cap,
                                     uint32_t *out_len);
/* Optional constructor/destructor of a function's ctx, given opaque parameter bytes. */
typedef int32_t (*bl_fn_init)(const uint8_t *params, uint64_t len, void **ctx);
typedef void (*bl_fn_fini)(void *ctx);

/* ---- session API (libbackline) ------------------------------------------------------ */
typedef struct bl_session bl_session;

BL_API int32_t bl_abi_version(void);
BL_API const char *bl_status_name(int32_t status);
/* Text of the calling thread's last failure (never NULL). */
BL_API const char *bl_last_error(void);

/* Open `backend_lib` (path of a transport backend) and register a session under
 * (role, key). `config` is "k=v;k=v" (keys: docs/architecture.md, "Session configuration
 * keys"); `runs_in` is a bl_runs_in (a coprocessor: where it runs; a controller: where it
 * expects its coprocessor, or BL_RUNS_ANY). */
BL_API int32_t bl_session_create(const char *backend_lib, int32_t role, const char *key,
                                 const char *config, int32_t runs_in, bl_session **out);
/* Check what bl_session_create would check -- the backend's ABI, the key, every
 * configuration key and value (the core's and the backend's, through its open hook) --
 * without registering or connecting anything. */
BL_API int32_t bl_config_check(const char *backend_lib, int32_t role, const char *key,
                               const char *config, int32_t runs_in);
/* The session registered under (role, key), or NULL (bl_last_error says why). */
BL_API bl_session *bl_session_get(int32_t role, const char *key);

/* Lifecycle, in this order. Bring-up calls wait at most connect_timeout_ms. */
BL_API int32_t bl_connect(bl_session *s);
BL_API int32_t bl_alloc_memory(bl_session *s);
BL_API int32_t bl_exchange_keys(bl_session *s);
/* Asynchronous bring-up: run connect, or alloc_memory + exchange_keys, on a worker thread
 * and return a token (> 0) at once, or a negative status. bl_await(token) waits for the
 * step and returns its status (with its error text). Until then the session refuses other
 * lifecycle calls; bl_destroy waits for a step still in flight. */
BL_API int64_t bl_connect_async(bl_session *s);
BL_API int64_t bl_exchange_keys_async(bl_session *s);
BL_API int32_t bl_await(int64_t token);
BL_API int32_t bl_establish_channel(bl_session *s);
BL_API int32_t bl_set_message_sizes(bl_session *s, uint32_t in_bytes, uint32_t out_bytes);
BL_API int32_t bl_set_coprocessor_fn(bl_session *s, uint32_t decoder_id, bl_coprocessor_fn fn,
                                     void *ctx);
/* The same, naming the function by library and symbol (what compiled code can do):
 * dlopen `library` (NULL: this process), dlsym `symbol`, and if `init_symbol` is not
 * NULL build ctx with it from `params`. The context lives until the session is destroyed
 * (fini_symbol, if not NULL, frees it then). */
BL_API int32_t bl_set_coprocessor_fn_by_name(bl_session *s, uint32_t decoder_id, const char *library,
                                             const char *symbol, const char *init_symbol,
                                             const char *fini_symbol, const uint8_t *params,
                                             uint64_t params_len);
BL_API int32_t bl_start(bl_session *s);

/* Rounds (controller). Payloads may vary per round up to in_bytes. Up to `slots`
 * rounds may be in flight; replies are collected in order. A thread that stages, posts or
 * collects holds the session until nothing is staged or in flight; another thread's round
 * call meanwhile fails with BL_EBUSY (use one session per thread). The round after sequence
 * 2^64 - 1 fails with BL_ESTATE (the sequence is exhausted: start a new session). */
BL_API int32_t bl_stage_payload(bl_session *s, const void *data, uint32_t len,
                                uint32_t decoder_id);
BL_API int32_t bl_post(bl_session *s);
/* Wait (at most timeout_ms) for the oldest in-flight reply and copy it to out. */
BL_API int32_t bl_collect(bl_session *s, void *out, uint32_t out_cap, uint32_t *out_len);
/* Like bl_collect but hands back the reply in place; valid until `slots` more posts. */
BL_API int32_t bl_reply_slot(bl_session *s, const uint8_t **data, uint32_t *len);
/* stage + post + collect in one call. */
BL_API int32_t bl_round(bl_session *s, const void *in, uint32_t in_len, uint32_t decoder_id,
                        void *out, uint32_t out_cap, uint32_t *out_len);
/* Round trip of the last collected round, in nanoseconds (0 before the first). */
BL_API uint64_t bl_last_rtt_ns(bl_session *s);
/* Per-round RTT recording (controller), for programs whose sessions compiled code drives:
 * from now on every collected round (collect, reply_slot, round) stores its round trip in
 * ns into buf[count] while count < cap, and increments count. `buf` is caller-owned and
 * must stay valid until recording is disarmed (buf == NULL) or the session is destroyed;
 * the runtime never frees it. Arming resets the count to 0; disarming keeps it readable.
 * Call it on the thread that runs the rounds, or while none is in progress. */
BL_API int32_t bl_record_rtt(bl_session *s, uint64_t *buf, uint64_t cap);
/* Rounds collected since recording was last armed (may exceed cap: only the first cap
 * are stored); 0 for a NULL or destroyed session. */
BL_API uint64_t bl_recorded_rtt(bl_session *s);

/* Coprocessor serving: poll the request ring and answer until bl_stop (or, for
 * bl_serve_for, until `ns` nanoseconds have passed). Backends with their own poller
 * thread call these; bl_serve_pending answers what has arrived and returns the count. */
BL_API int32_t bl_serve(bl_session *s);
BL_API int32_t bl_serve_pending(bl_session *s);

/* Teardown: idempotent. bl_destroy also unregisters the key and frees the session; a
 * second bl_destroy of the same pointer is a no-op (it is looked up in the registry), as
 * long as no new session has been created at that address in between. */
/* Block the calling thread until bl_stop(s), called from another thread, has finished (its
 * backend stopped too), or s is destroyed; BL_OK. For a coprocessor whose backend serves on
 * its own poller thread: an executor's serve launch waits here while rounds are answered. */
/* bl_park, bl_stop and bl_destroy called from a coprocessor function on the session that is
 * running it (its coprocessor's, or an in-place coprocessor's controller) fail with BL_ESTATE and
 * change nothing: return from the function and tear the session down from another thread. */
BL_API int32_t bl_park(bl_session *s);
BL_API int32_t bl_stop(bl_session *s);
BL_API int32_t bl_destroy(bl_session *s);

/* Compiled programs check no return code inline: they pass each status through
 * bl_status_record, which keeps the calling thread's FIRST failure (status and text),
 * and return bl_status_take() at the end, which hands it back (BL_OK if none), clears
 * it, and makes bl_last_error() show that first failure's text. */
BL_API int32_t bl_status_record(int32_t status);
BL_API int32_t bl_status_take(void);

/* Introspection. */
BL_API int32_t bl_session_geometry(bl_session *s, uint32_t *slots, uint32_t *slot_bytes,
                                   uint32_t *in_bytes, uint32_t *out_bytes);
/* The session's timeout_ms and connect_timeout_ms as the core parsed them (or their defaults). */
BL_API int32_t bl_session_timeouts(bl_session *s, uint64_t *timeout_ms, uint64_t *connect_timeout_ms);
BL_API uint64_t bl_now_ns(void);

/* Built-in coprocessor functions (see docs): echo copies the payload back; steane maps
 * a bit-packed 3-bit Steane syndrome to the bit-packed 7-qubit correction mask. */
BL_API int32_t bl_fn_echo(void *ctx, uint32_t decoder_id, const uint8_t *in, uint32_t in_len,
                          uint8_t *out, uint32_t out_cap, uint32_t *out_len);
BL_API int32_t bl_fn_steane(void *ctx, uint32_t decoder_id, const uint8_t *in, uint32_t in_len,
                            uint8_t *out, uint32_t out_cap, uint32_t *out_len);

/* ---- transport backend ABI -------------------------------------------------------------- */
/* What a backend hands the core at establish_channel: the two rings as this process sees
 * them, and optional hooks. `deliver` runs on the round path right after this side
 * publishes a frame (controller: a request; coprocessor: a reply) -- NULL when the
 * memory is shared and nothing needs to move. `peer_alive` is polled rarely while
 * waiting so a dead peer is reported early (NULL: rely on the deadline): 1 alive, 0 gone
 * (the round fails with BL_EPEER), or a negative bl_status the round fails with (a controller
 * whose hardware timed the round out: BL_ETIMEOUT), with its text through error_text. `doorbell`
 * (NULL: none) is a futex word pair in the shared region that lets an idle
 * coprocessor sleep: doorbell[0] = "coprocessor sleeping" flag, doorbell[1] = counter. */
typedef struct bl_channel {
    uint8_t *request_ring;
    uint8_t *reply_ring;
    uint32_t slots;
    uint32_t slot_bytes;
    int32_t (*deliver)(void *impl, uint64_t seq, uint32_t slot);
    int32_t (*peer_alive)(void *impl);
    uint32_t *doorbell;
    int32_t doorbell_shared; /* 1: the futex word is shared between processes */
    void *impl;
    /* Called on every turn of a wait for a frame (a collect, a serving coprocessor), before
     * the frame's sequence number is read: a backend that learns of arrivals from a
     * completion queue publishes them here, storing the sequence number with release order
     * once the frame is in memory (NULL: frames publish themselves). */
    void (*poll)(void *impl);
} bl_channel;

/* Services of the core a backend may call (passed to open). The configuration string is
 * parsed once by the core, which has already refused unknown keys and malformed items;
 * a backend reads its own keys through these accessors and writes no parser. */
typedef struct bl_host_api {
    uint32_t abi_version;
    int32_t (*serve)(bl_session *s);
    int32_t (*serve_pending)(bl_session *s);
    uint64_t (*now_ns)(void);
    /* The value of `key`, or NULL when the configuration does not set it. */
    const char *(*config_str)(const bl_session *s, const char *key);
    /* `key` as a decimal integer in [min, max] into *out (dflt when absent): BL_OK, or
     * BL_EINVAL with a message naming the key, the value and the range in err. */
    int32_t (*config_int)(const bl_session *s, const char *key, int64_t min, int64_t max,
                          int64_t dflt, int64_t *out, char *err, size_t errlen);
    /* Why a hook without an err buffer (deliver, peer_alive) failed: the calling thread's text,
     * which the core quotes in the error it reports for that round. */
    void (*error_text)(const char *text);
} bl_host_api;

typedef struct bl_open_args {
    uint32_t abi_version;
    int32_t role;
    const char *key;
    const char *config;   /* the whole configuration string (read it through host->config_*) */
    uint32_t slots;       /* the ring geometry the core parsed from config (or defaults) */
    uint32_t slot_bytes;
    bl_session *session;  /* the core session that owns this backend instance */
    const bl_host_api *host;
    int32_t runs_in;      /* bl_runs_in of the node (see bl_session_create) */
    int32_t check_only;   /* 1: bl_config_check -- read the configuration, then close */
    /* The core's deadlines as it parsed them (timeout_ms, connect_timeout_ms, or their
     * defaults), in ns: a backend that needs them reads them here, not from the text. */
    uint64_t timeout_ns;
    uint64_t connect_timeout_ns;
} bl_open_args;

/* Every hook returns a bl_status and may write a message (NUL-terminated, at most
 * errlen bytes) into err. Deadlines are absolute bl_now_ns() values. `open` must only
 * read the configuration and allocate (no connection, no shared resource): the core
 * also calls open + close to check a configuration (bl_config_check). A runs_in the
 * backend does not support is refused in open with BL_EINVAL. */
typedef struct bl_backend {
    uint32_t abi_version; /* BACKLINE_ABI_VERSION the backend was built against */
    const char *name;
    const char *const *config_keys; /* NULL-terminated keys this backend reads */
    int32_t (*open)(const bl_open_args *args, void **impl, char *err, size_t errlen);
    int32_t (*connect)(void *impl, uint64_t deadline_ns, char *err, size_t errlen);
    int32_t (*alloc_memory)(void *impl, char *err, size_t errlen);
    int32_t (*exchange_keys)(void *impl, uint64_t deadline_ns, char *err, size_t errlen);
    int32_t (*establish_channel)(void *impl, bl_channel *ch, uint64_t deadline_ns, char *err,
                                 size_t errlen);
    int32_t (*start)(void *impl, char *err, size_t errlen);
    int32_t (*stop)(void *impl, char *err, size_t errlen);
    void (*close)(void *impl);
} bl_backend;

/* The entry symbol's name is stable across ABI versions; the returned struct's
 * abi_version says which ABI the backend was built for. */
#define BL_BACKEND_ENTRY "backline_transport_backend_v1"
typedef const bl_backend *(*bl_backend_entry_fn)(void);

#ifdef __cplusplus
}
#endif
#endif /* BACKLINE_H */
