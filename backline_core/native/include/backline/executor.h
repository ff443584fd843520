/*
 * executor.h -- the executor C ABI: run cross-compiled code in another process.
 *
 * Implemented by libbackline (native/src/executor_*.c), the host-side client; served
 * by `backline executor serve` (distribution backline-executor-orc), the executor process
 * it talks to over TCP. convert-executor-to-llvm lowers executor ops into calls of these
 * functions, and Python calls them through backline_core._native.lib. The wire protocol
 * (version BL_EXECUTOR_PROTOCOL_VERSION, documented in docs/executor-protocol.md) is
 * fixed by the constants below; both sides read them from this header.
 *
 * Model. A host program opens a session with an executor process at "host:port", ships
 * it relocatable object files (cross-compiled by cross-compile-targets), and invokes their
 * functions; values cross the boundary by copy, marshalled through arrays of pointers to
 * host-side slots.
 *
 * Conventions.
 *   - Every function that returns int32_t returns a bl_status from backline.h: BL_OK (0) on
 *     success, a negative BL_E* code on failure, with the text in bl_last_error().
 *     Compiled code passes each such status through bl_status_record() (libbackline), which
 *     keeps the calling thread's FIRST failure; the program returns bl_status_take() at
 *     its end. So a failed call does not stop the program: later calls still run and must
 *     cope (see "after a failure" below).
 *   - Strings are NUL-terminated UTF-8 and are only read during the call; names (symbols,
 *     object paths, libraries, signatures) are at most BL_EXECUTOR_MAX_NAME_BYTES bytes.
 *   - `signature` is the kernel's type as LLVM IR text: "<ret> (<param>, ...)", e.g.
 *     "i64 (i64, ptr)", "void ()". Several results are one literal-struct return:
 *     "{i64, i32} (i64)". Supported types: iN (N 1..64 or 128), half, float, double,
 *     [N x type], literal structs {type, ...}, and `ptr` as a top-level parameter only.
 *     Anything else (vectors, packed structs, ptr in a result or an aggregate, ...) is
 *     BL_EINVAL naming the type. Layout is LP64 little-endian (both supported targets).
 *   - `args` is an array of `nargs` pointers; args[i] points to the i-th argument's value
 *     in host memory, laid out as the host's ABI lays out that LLVM type. `results` is an
 *     array of `nresults` pointers to host slots the runtime writes the results into (the
 *     fields of a struct return are scattered, one slot each, each its field's ABI size).
 *     nargs must be the parameter count and nresults the result count (0 for void, the
 *     field count for a struct return, else 1), else BL_EINVAL before anything is sent.
 *     An empty array may be NULL.
 *   - A `ptr` parameter is a buffer: args[i] points to a slot holding a
 *     `bl_executor_buffer *` (the parameter's value is the address of a buffer
 *     descriptor). The runtime sends the buffer's `bytes` bytes, the executor calls the
 *     function with a pointer to its own copy, and the copy's contents after the call are
 *     written back into `data` (every buffer, inputs included).
 *   - After a failure: bl_executor_open returns NULL; every other function given a NULL
 *     session returns BL_ESTATE and does nothing (bl_executor_close(NULL) returns BL_OK),
 *     so a failed open yields one recorded failure, not a crash.
 *   - All functions may block on the network; each has a deadline (the per-call timeout
 *     of bl_executor_configure, else env BACKLINE_EXECUTOR_TIMEOUT_MS, else
 *     BL_EXECUTOR_DEFAULT_TIMEOUT_MS), after which it returns BL_ETIMEOUT rather than hang
 *     on a dead peer. A request that timed out or broke (the peer closed, or broke the
 *     protocol) ends the connection: later calls on it return BL_EPEER ("connection to
 *     executor ADDR was lost: ..."); a new bl_executor_open makes a new one.
 *   - Authentication: the connection is authenticated by a shared secret (HMAC-SHA256
 *     challenge-response, both ways, bound to the connection's addresses: backline/trust.h;
 *     libcrypto is loaded at first use). The secret is the
 *     content of a file: bl_executor_configure's `secret_file`, else env
 *     BACKLINE_EXECUTOR_SECRET_FILE. The file must be a regular file owned by this user,
 *     with no group/other permission bits (chmod 600), holding 16..4096 bytes (one
 *     trailing newline is stripped). A failed authentication is BL_EAUTH.
 *   - Thread safety: every function may be called from any thread; requests on one
 *     connection are serialized (one at a time, each answered in order). A session must
 *     not be used by one thread while another closes it.
 *
 * bl_status_record / bl_status_take are declared in backline.h (the core runtime).
 */
#ifndef BACKLINE_EXECUTOR_H
#define BACKLINE_EXECUTOR_H

#include <stdint.h>

#include "backline/backline.h" /* bl_status, bl_status_record, bl_status_take */

#ifdef __cplusplus
extern "C" {
#endif

/* 2: ptr parameters are buffers (bl_executor_buffer, copied both ways); the secret and
 * the deadline are configured per address (bl_executor_configure). */
#define BACKLINE_EXECUTOR_ABI_VERSION 2

/* ---- wire protocol (docs/executor-protocol.md); header integers are big-endian ------ */
#define BL_EXECUTOR_MAGIC 1112294744u /* 0x424C4558: big-endian on the wire, the bytes "BLEX" */
/* 2: AUTH's and WELCOME's tags are backline/trust.h's, over both nonces and the connection's
 * two addresses (protocol name "executor", empty context), so a relay cannot reuse them. */
#define BL_EXECUTOR_PROTOCOL_VERSION 2u
#define BL_EXECUTOR_HEADER_BYTES 12u  /* u32 magic, u16 version, u16 type, u32 body length */
/* The next four are backline/trust.h's BL_TRUST_* numbers, restated because cffi reads only
 * this header's numeric defines; the client's _Static_asserts check they agree. */
#define BL_EXECUTOR_NONCE_BYTES 32u   /* BL_TRUST_NONCE_BYTES */
#define BL_EXECUTOR_TAG_BYTES 32u     /* BL_TRUST_TAG_BYTES: HMAC-SHA256 */
/* The client's connect + HELLO/AUTH/WELCOME; the server gives a connection
 * BL_TRUST_HANDSHAKE_TIMEOUT_MS from accept to authenticate. */
#define BL_EXECUTOR_HANDSHAKE_TIMEOUT_MS 5000u
#define BL_EXECUTOR_FRAME_TIMEOUT_MS 30000u    /* a frame's body after its header */
#define BL_EXECUTOR_CLOSE_TIMEOUT_MS 10000u    /* CLOSE waits this long for async launches */
#define BL_EXECUTOR_DEFAULT_TIMEOUT_MS 30000u  /* the per-call deadline when none is configured */
#define BL_EXECUTOR_MAX_NAME_BYTES 4096u       /* a str: u16 byte count + UTF-8, no NUL */
#define BL_EXECUTOR_MAX_SMALL_BYTES 16384u     /* body of every frame not listed below */
#define BL_EXECUTOR_MAX_OBJECT_BYTES 67108864u /* SEND_BINARY data (body: + 4096 + 3) */
#define BL_EXECUTOR_MAX_ARGS_BYTES 16777216u   /* args blob (LAUNCH/CALL body: + 3*4096 + 16); RESULT body */
#define BL_EXECUTOR_MIN_SECRET_BYTES 16u /* BL_TRUST_MIN_SECRET_BYTES */
#define BL_EXECUTOR_MAX_SECRET_BYTES 4096u /* BL_TRUST_MAX_SECRET_BYTES */

/* Frame types. tag_C / tag_S are backline/trust.h's HMAC-SHA256(K, T("client"/"server")), T over
 * protocol "executor", Ns, Nc, the client's and the server's address (as the server sees the
 * connection) and an empty context. */
typedef enum bl_executor_msg {
    BL_EXEC_HELLO = 1,         /* S->C: server nonce (32) */
    BL_EXEC_AUTH = 2,          /* C->S: client nonce (32) | tag_C (32) */
    BL_EXEC_WELCOME = 3,       /* S->C: tag_S (32) */
    BL_EXEC_REFUSED = 4,       /* S->C: empty; the server closes */
    BL_EXEC_SEND_BINARY = 16,  /* u8 kind | str name | data */
    BL_EXEC_LAUNCH = 17,       /* str symbol | str object | str signature | u32 nargs | args */
    BL_EXEC_LAUNCH_ASYNC = 18, /* str symbol | str object */
    BL_EXEC_AWAIT = 19,        /* u64 token | u32 timeout_ms */
    BL_EXEC_CALL = 20,         /* str symbol | str library | str signature | u32 nargs | u32 num_input_args | args */
    BL_EXEC_CLOSE = 21,        /* empty */
    BL_EXEC_OK = 32,           /* empty */
    BL_EXEC_RESULT = 33,       /* results blob */
    BL_EXEC_TOKEN = 34,        /* u64 token (>= 1) */
    BL_EXEC_ERROR = 35,        /* i32 status | str message */
    BL_EXEC_CRASHED = 36       /* i32 signal | str message; the server closes */
} bl_executor_msg;

/* SEND_BINARY kinds. */
typedef enum bl_executor_binary_kind {
    BL_EXEC_KIND_OBJECT = 0, /* a relocatable ELF object, linked into the session */
    BL_EXEC_KIND_ASSET = 1   /* bytes the session keeps, not linked */
} bl_executor_binary_kind;

/* ---- API ------------------------------------------------------------------------------ */

/* A buffer argument (a `ptr` parameter): `bytes` bytes at `data` (NULL only if bytes is 0). */
typedef struct bl_executor_buffer {
    void *data;
    uint64_t bytes;
} bl_executor_buffer;

/* An opaque session with one executor process. */
typedef struct bl_executor_session bl_executor_session;

/* In-process settings for `address` ("host:port", as given to bl_executor_open): the
 * secret's file (read at each open; NULL: env BACKLINE_EXECUTOR_SECRET_FILE) and the
 * per-call deadline in ms (0: env BACKLINE_EXECUTOR_TIMEOUT_MS, else
 * BL_EXECUTOR_DEFAULT_TIMEOUT_MS; at most BL_MAX_TIMEOUT_MS). A later call replaces the
 * settings; the deadline applies to the address's open connection too. BL_EINVAL: a
 * malformed address or a timeout out of range (nothing is read or connected here). */
BL_API int32_t bl_executor_configure(const char *address, const char *secret_file, int64_t timeout_ms);

/* Mark `address` as the near end of a forward this process trusts, e.g. the local port of
 * the SSH -L forward that Executor.ssh opens and its ssh owns (forwarded != 0; 0 unmarks it).
 * Through a forward the two ends see different TCP connections, so the handshake's tags
 * cover no addresses (16 zero bytes and port 0 for both), as an executor started with env
 * BACKLINE_EXECUTOR_FORWARDED=1 expects; a relay is then kept out by the forward owning its
 * ports, not by the tags. Kept across bl_executor_configure calls. BL_EINVAL: a malformed
 * address. */
BL_API int32_t bl_executor_configure_forwarded(const char *address, int32_t forwarded);

/* Open a session with the executor at `address` ("host:port", IPv6 hosts in brackets:
 * "[::1]:9000"): connect, authenticate, all within min(the per-call deadline,
 * BL_EXECUTOR_HANDSHAKE_TIMEOUT_MS). Sessions to the same address share one connection:
 * the runtime keeps a per-address reference count, and the connection closes when the
 * last session using it is closed. Returns NULL on failure, after recording the failure
 * with bl_status_record() itself (its result carries no status for the caller to record;
 * bl_last_error() has the text). */
BL_API bl_executor_session *bl_executor_open(const char *address);

/* Ship the relocatable object file at `object_path` (a path on the host, at most
 * BL_EXECUTOR_MAX_OBJECT_BYTES) to the executor, which links it into its own namespace
 * (one per object, so two objects may export the same symbol names) and resolves its
 * undefined symbols against the libraries it has loaded. `object_path` is also the
 * object's name in later calls. Sending an object the connection already holds is a
 * no-op returning BL_OK. BL_ENOTFOUND: no file at `object_path`. */
BL_API int32_t bl_executor_send_binary(bl_executor_session *session, const char *object_path);

/* Call `symbol` of the object `object_path` (sent earlier on this session) with the
 * arguments `args[0..nargs)` and wait for it to return; write its results through
 * `results[0..nresults)` and copy the buffers back. `signature` is the function's LLVM
 * type (see above). BL_ENOTFOUND: the object was not sent, or does not define `symbol`. */
BL_API int32_t bl_executor_launch(bl_executor_session *session, const char *symbol, const char *object_path,
                                  const char *signature, void *const *args, int64_t nargs,
                                  void *const *results, int64_t nresults);

/* Start `symbol` of `object_path`, a function `int32_t symbol(void)` returning a
 * bl_status, on a thread of the executor, and return without waiting. On success *token
 * is set to a positive id naming this launch (for bl_executor_await); on failure it is
 * set to 0. Other requests on the connection may run meanwhile. */
BL_API int32_t bl_executor_launch_async(bl_executor_session *session, const char *symbol,
                                        const char *object_path, int64_t *token);

/* Wait (up to the per-call deadline) until the launch named by `token` has finished; its
 * status is the launch's (with the launched code's bl_last_error() text). BL_ETIMEOUT:
 * not finished yet; the token stays valid and may be awaited again. A finished token is
 * awaited at most once; token 0 (a failed launch_async) returns BL_ESTATE. */
BL_API int32_t bl_executor_await(bl_executor_session *session, int64_t token);

/* Call `symbol` of the shared `library` already loaded in the executor process (a
 * preloaded path, its file name, or "libbackline"), like bl_executor_launch. The first
 * `num_input_args` arguments are inputs; the rest (`nargs - num_input_args`) are output
 * operands: buffers the callee fills. Every buffer is copied back.
 * 0 <= num_input_args <= nargs, else BL_EINVAL. */
BL_API int32_t bl_executor_call(bl_executor_session *session, const char *symbol, const char *library,
                                const char *signature, void *const *args, int64_t nargs,
                                int64_t num_input_args, void *const *results, int64_t nresults);

/* Release the session. Closing the last session on a connection closes it: the executor
 * waits (up to BL_EXECUTOR_CLOSE_TIMEOUT_MS) for the connection's outstanding async
 * launches (BL_ETIMEOUT if some still ran), drops its objects, and ends. The session is
 * freed in every case; closing one whose connection was lost is BL_OK. NULL is a no-op
 * (BL_OK). */
BL_API int32_t bl_executor_close(bl_executor_session *session);

#ifdef __cplusplus
}
#endif

#endif /* BACKLINE_EXECUTOR_H */
