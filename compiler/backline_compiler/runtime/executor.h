/*
 * executor.h -- the executor runtime C ABI that convert-executor-to-llvm targets.
 *
 * STATUS: this header is the contract only. The executor runtime that implements it (the
 * host-side client library and the executor server process it talks to) is NOT part of
 * this change and does not exist yet; a program lowered by convert-executor-to-llvm links
 * (or JITs) against whatever library ends up providing these symbols. The lowering and
 * its tests (compiler/tests/test_passes_targets.py) only check that the calls compile,
 * and drive them against an in-test mock.
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
 *   - Strings are NUL-terminated UTF-8 and are only read during the call.
 *   - `signature` is the kernel's type as LLVM IR text: "<ret> (<param>, ...)", e.g.
 *     "i64 (i64, ptr)", "void ()". Several results are one literal-struct return:
 *     "{i64, i32} (i64)". Parameter and result types are LLVM first-class types
 *     (iN, half/float/double, ptr, vectors, arrays, literal structs).
 *   - `args` is an array of `nargs` pointers; args[i] points to the i-th argument's value
 *     in host memory, laid out as the host's ABI lays out that LLVM type. `results` is an
 *     array of `nresults` pointers to host slots the runtime writes the results into (the
 *     fields of a struct return are scattered, one slot each). An empty array may be NULL.
 *   - A `ptr` argument is passed as an address value: the runtime copies the pointer, not
 *     the memory it points to. Only meaningful for executors that share the address
 *     space; a later ABI version will carry buffer sizes.
 *   - After a failure: bl_executor_open returns NULL; every other function given a NULL
 *     session returns BL_ESTATE and does nothing (bl_executor_close(NULL) returns BL_OK),
 *     so a failed open yields one recorded failure, not a crash.
 *   - All functions may block on the network; each has a deadline (runtime-configured),
 *     after which it returns BL_ETIMEOUT rather than hang on a dead peer.
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

#define BACKLINE_EXECUTOR_ABI_VERSION 1

/* An opaque connection to one executor process. */
typedef struct bl_executor_session bl_executor_session;

/* Open a session with the executor at `address` ("host:port", IPv6 hosts in brackets:
 * "[::1]:9000"). Sessions to the same address share one connection: the runtime keeps a
 * per-address reference count, and the connection closes when the last session using it
 * is closed. Returns NULL on failure, after recording the failure with bl_status_record()
 * itself (its result carries no status for the caller to record). */
BL_API bl_executor_session *bl_executor_open(const char *address);

/* Ship the relocatable object file at `object_path` (a path on the host) to the executor,
 * which loads and links it into its own namespace (one per object, so two objects may
 * export the same symbol names) and resolves its undefined symbols against the libraries
 * it has loaded. Sending an object the session already holds is a no-op returning BL_OK. */
BL_API int32_t bl_executor_send_binary(bl_executor_session *session, const char *object_path);

/* Call `symbol` of the object `object_path` (sent earlier on this session) with the
 * arguments `args[0..nargs)` and wait for it to return; write its results through
 * `results[0..nresults)`. `signature` is the function's LLVM type (see above); the runtime
 * rejects (BL_EINVAL) a signature whose parameter/result counts do not match nargs /
 * nresults. BL_ENOTFOUND: the object was not sent, or does not define `symbol`. */
BL_API int32_t bl_executor_launch(bl_executor_session *session, const char *symbol, const char *object_path,
                                  const char *signature, void *const *args, int64_t nargs,
                                  void *const *results, int64_t nresults);

/* Start `symbol` of `object_path`, a function with signature "void ()", and return without
 * waiting. On success *token is set to a positive id naming this launch (for
 * bl_executor_await); on failure it is set to 0. Other launches on the session may run
 * meanwhile. */
BL_API int32_t bl_executor_launch_async(bl_executor_session *session, const char *symbol,
                                        const char *object_path, int64_t *token);

/* Block until the launch named by `token` has finished; its status is the launch's.
 * Each token is awaited at most once; token 0 (a failed launch_async) returns BL_ESTATE. */
BL_API int32_t bl_executor_await(bl_executor_session *session, int64_t token);

/* Call `symbol` of the shared `library` already loaded in the executor process (by path
 * or soname), like bl_executor_launch. The first `num_input_args` arguments are inputs;
 * the rest (`nargs - num_input_args`) are output operands: buffers the callee fills. In
 * this ABI version they are passed like inputs (a ptr by value, see above); copying buffer
 * contents back needs their sizes, which a later version will carry.
 * 0 <= num_input_args <= nargs, else BL_EINVAL. */
BL_API int32_t bl_executor_call(bl_executor_session *session, const char *symbol, const char *library,
                                const char *signature, void *const *args, int64_t nargs,
                                int64_t num_input_args, void *const *results, int64_t nresults);

/* Release the session: wait for its outstanding async launches, drop its objects, and
 * close the connection if this was the last session on it. NULL is a no-op (BL_OK). */
BL_API int32_t bl_executor_close(bl_executor_session *session);

#ifdef __cplusplus
}
#endif

#endif /* BACKLINE_EXECUTOR_H */
