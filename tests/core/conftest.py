"""Fixtures for the core's native tests: a minimal transport backend compiled here.

Nothing in tests/core needs a transport plugin. The backend below is the smallest one
the C ABI allows: the coprocessor allocates two zeroed, 64-byte aligned rings; the
controller finds them in a static table by session key; on the controller, the deliver
hook answers every posted request on the spot through ``host->serve_pending`` of the
coprocessor session (so one thread runs both sides). Of its own configuration keys it
accepts only ``host`` and ``port``, which resolution passes a transport that needs an
endpoint, and it ignores them, so everything a session does with it is the core's own logic.

Exported helpers (``tb_*``) let the tests see the ring memory and switch delivery off.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cffi
import pytest

import backline_core._plugins as plugins
from backline_core import get_include
from backline_core._coprocessor_function import CoprocessorFunction
from backline_core._hookspecs import RECORD_TYPES, Decoder, Transport, hookimpl
from backline_core._builtins import echo, steane
from backline_core._session import Session

TEST_BACKEND_C = r"""
#define _GNU_SOURCE
#include <backline/backline.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef TB_ABI
#define TB_ABI BACKLINE_ABI_VERSION
#endif

struct region {
    char key[128];
    uint8_t *req, *rep;
    uint32_t slots, slot_bytes;
    bl_session *coproc;
    int ready, alive, refs;
    struct region *next;
};

struct tb {
    int role;
    char key[128];
    bl_session *session;
    const bl_host_api *host;
    uint32_t slots, slot_bytes;
    struct region *r;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct region *regions;
static int auto_deliver = 1;
static int open_count;
static long deliver_calls;

static const char *const config_keys[] = {"host", "port", NULL}; /* the endpoint's; ignored */

static int32_t err_out(char *err, size_t n, int32_t rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return rc;
}

static struct region *find_live(const char *key) {
    for (struct region *r = regions; r; r = r->next)
        if (r->alive && !strcmp(r->key, key)) return r;
    return NULL;
}

static void unref(struct region *r) { /* under lock */
    if (--r->refs) return;
    for (struct region **pp = &regions; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    free(r->req);
    free(r->rep);
    free(r);
}

static int32_t tb_open(const bl_open_args *a, void **impl, char *err, size_t n) {
    if (a->abi_version != BACKLINE_ABI_VERSION || !a->host || !a->session)
        return err_out(err, n, BL_EINVAL, "bad open args");
    struct tb *t = calloc(1, sizeof *t);
    if (!t) return err_out(err, n, BL_ENOMEM, "out of memory");
    t->role = a->role;
    t->session = a->session;
    t->host = a->host;
    t->slots = a->slots;
    t->slot_bytes = a->slot_bytes;
    snprintf(t->key, sizeof t->key, "%s", a->key);
    __atomic_add_fetch(&open_count, 1, __ATOMIC_SEQ_CST);
    *impl = t;
    return BL_OK;
}

static int32_t tb_connect(void *impl, uint64_t deadline, char *err, size_t n) {
    (void)deadline;
    struct tb *t = impl;
    int32_t rc = BL_OK;
    pthread_mutex_lock(&lock);
    struct region *r = find_live(t->key);
    if (t->role == BL_COPROCESSOR) {
        if (r) {
            rc = err_out(err, n, BL_EBUSY, "key '%s' is already served", t->key);
        } else if (!(r = calloc(1, sizeof *r))) {
            rc = err_out(err, n, BL_ENOMEM, "out of memory");
        } else {
            snprintf(r->key, sizeof r->key, "%s", t->key);
            r->slots = t->slots;
            r->slot_bytes = t->slot_bytes;
            r->coproc = t->session;
            r->alive = 1;
            r->refs = 1;
            r->next = regions;
            regions = r;
            t->r = r;
        }
    } else if (!r || !r->ready) {
        rc = err_out(err, n, BL_ETIMEOUT, "no coprocessor serves key '%s'", t->key);
    } else {
        r->refs++;
        t->r = r;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static int32_t tb_alloc(void *impl, char *err, size_t n) {
    struct tb *t = impl;
    if (t->role != BL_COPROCESSOR) return BL_OK; /* the coprocessor owns the rings */
    size_t bytes = (size_t)t->slots * t->slot_bytes;
    t->r->req = aligned_alloc(64, bytes);
    t->r->rep = aligned_alloc(64, bytes);
    if (!t->r->req || !t->r->rep) return err_out(err, n, BL_ENOMEM, "out of memory");
    memset(t->r->req, 0, bytes);
    memset(t->r->rep, 0, bytes);
    return BL_OK;
}

static int32_t tb_exchange(void *impl, uint64_t deadline, char *err, size_t n) {
    (void)deadline, (void)err, (void)n;
    struct tb *t = impl;
    pthread_mutex_lock(&lock);
    if (t->role == BL_COPROCESSOR) {
        t->r->ready = 1;
    } else { /* the controller adopts the coprocessor's geometry */
        t->slots = t->r->slots;
        t->slot_bytes = t->r->slot_bytes;
    }
    pthread_mutex_unlock(&lock);
    return BL_OK;
}

static int32_t tb_deliver(void *impl, uint64_t seq, uint32_t slot) {
    (void)seq, (void)slot;
    struct tb *t = impl;
    __atomic_add_fetch(&deliver_calls, 1, __ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&auto_deliver, __ATOMIC_SEQ_CST)) return BL_OK;
    if (!__atomic_load_n(&t->r->alive, __ATOMIC_SEQ_CST)) return BL_EPEER;
    int32_t rc = t->host->serve_pending(t->r->coproc);
    return rc < 0 ? rc : BL_OK;
}

static int32_t tb_alive(void *impl) {
    struct tb *t = impl;
    return __atomic_load_n(&t->r->alive, __ATOMIC_SEQ_CST);
}

static int32_t tb_establish(void *impl, bl_channel *ch, uint64_t deadline, char *err, size_t n) {
    (void)deadline, (void)err, (void)n;
    struct tb *t = impl;
    ch->request_ring = t->r->req;
    ch->reply_ring = t->r->rep;
    ch->slots = t->r->slots;
    ch->slot_bytes = t->r->slot_bytes;
    ch->impl = t;
    if (t->role == BL_CONTROLLER) {
        ch->deliver = tb_deliver;
        ch->peer_alive = tb_alive;
    }
    return BL_OK;
}

__attribute__((unused)) static int32_t tb_start(void *impl, char *err, size_t n) {
    (void)impl, (void)err, (void)n;
    return BL_OK;
}

static int32_t tb_stop(void *impl, char *err, size_t n) {
    (void)err, (void)n;
    struct tb *t = impl;
    if (t->role == BL_COPROCESSOR && t->r) __atomic_store_n(&t->r->alive, 0, __ATOMIC_SEQ_CST);
    return BL_OK;
}

static void tb_close(void *impl) {
    struct tb *t = impl;
    pthread_mutex_lock(&lock);
    if (t->r) {
        if (t->role == BL_COPROCESSOR) t->r->alive = 0;
        unref(t->r);
    }
    pthread_mutex_unlock(&lock);
    __atomic_sub_fetch(&open_count, 1, __ATOMIC_SEQ_CST);
    free(t);
}

static const bl_backend backend = {
    .abi_version = TB_ABI,
    .name = "testbackend",
    .config_keys = config_keys,
    .open = tb_open,
    .connect = tb_connect,
    .alloc_memory = tb_alloc,
    .exchange_keys = tb_exchange,
    .establish_channel = tb_establish,
#ifdef TB_NULL_HOOK
    .start = NULL,
#else
    .start = tb_start,
#endif
    .stop = tb_stop,
    .close = tb_close,
};

BL_API const bl_backend *backline_transport_backend_v1(void) { return &backend; }

/* ---- test helpers ---- */
BL_API int tb_rings(const char *key, uint8_t **req, uint8_t **rep, uint32_t *slots, uint32_t *slot_bytes) {
    pthread_mutex_lock(&lock);
    struct region *r = find_live(key);
    if (r) *req = r->req, *rep = r->rep, *slots = r->slots, *slot_bytes = r->slot_bytes;
    pthread_mutex_unlock(&lock);
    return r ? 0 : -1;
}
BL_API void tb_set_auto_deliver(int on) { __atomic_store_n(&auto_deliver, on, __ATOMIC_SEQ_CST); }
BL_API int tb_open_count(void) { return __atomic_load_n(&open_count, __ATOMIC_SEQ_CST); }
BL_API long tb_deliver_calls(void) { return __atomic_load_n(&deliver_calls, __ATOMIC_SEQ_CST); }
BL_API int tb_region_count(void) {
    int k = 0;
    pthread_mutex_lock(&lock);
    for (struct region *r = regions; r; r = r->next) ++k;
    pthread_mutex_unlock(&lock);
    return k;
}
"""

TB_CDEF = """
int tb_rings(const char *key, uint8_t **req, uint8_t **rep, uint32_t *slots, uint32_t *slot_bytes);
void tb_set_auto_deliver(int on);
int tb_open_count(void);
long tb_deliver_calls(void);
int tb_region_count(void);
"""


def gcc() -> str:
    path = shutil.which("gcc")
    if path is None:
        pytest.fail("gcc is needed to compile the test backend and the C loader program")
    return path


def compile_shared(src: Path, out: Path, *defines: str) -> Path:
    cmd = [gcc(), "-shared", "-fPIC", "-O1", "-std=gnu11", "-Wall", "-Wextra", "-Werror",
           f"-I{get_include()}", *(f"-D{d}" for d in defines), "-o", str(out), str(src), "-lpthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    return out


@dataclass
class StubBackend:
    path: str
    abi999_path: str
    null_hook_path: str
    abi1_path: str
    ffi: Any
    lib: Any

    def rings(self, key: str) -> dict[str, Any]:
        """The live rings of ``key`` as read-only byte views plus the geometry."""
        req, rep = self.ffi.new("uint8_t **"), self.ffi.new("uint8_t **")
        slots, slot_bytes = self.ffi.new("uint32_t *"), self.ffi.new("uint32_t *")
        assert self.lib.tb_rings(key.encode(), req, rep, slots, slot_bytes) == 0, f"no rings for {key!r}"
        size = slots[0] * slot_bytes[0]
        return {
            "request": self.ffi.buffer(req[0], size),
            "reply": self.ffi.buffer(rep[0], size),
            "request_addr": int(self.ffi.cast("uintptr_t", req[0])),
            "reply_addr": int(self.ffi.cast("uintptr_t", rep[0])),
            "slots": slots[0],
            "slot_bytes": slot_bytes[0],
        }


@pytest.fixture(scope="session")
def stub_backend(tmp_path_factory: pytest.TempPathFactory) -> StubBackend:
    build = tmp_path_factory.mktemp("testbackend")
    src = build / "testbackend.c"
    src.write_text(TEST_BACKEND_C)
    path = compile_shared(src, build / "libtestbackend.so")
    abi999 = compile_shared(src, build / "libtestbackend_abi999.so", "TB_ABI=999")
    null_hook = compile_shared(src, build / "libtestbackend_nullhook.so", "TB_NULL_HOOK")
    abi1 = compile_shared(src, build / "libtestbackend_abi1.so", "TB_ABI=1")  # built for the previous ABI
    ffi = cffi.FFI()
    ffi.cdef(TB_CDEF)
    # Held open for the whole run: the core's own dlopen of the same path shares this
    # copy, so the helpers see the rings of the sessions the core creates.
    lib = ffi.dlopen(str(path))
    return StubBackend(str(path), str(abi999), str(null_hook), str(abi1), ffi, lib)


_keys = itertools.count()


@dataclass
class Pairs:
    """Makes coprocessor/controller sessions on the test backend; destroys them all after the test."""

    backend: StubBackend
    sessions: list[Session] = field(default_factory=list)

    def key(self) -> str:
        return f"core-test-{next(_keys)}"

    def session(self, role: str, key: str, config: str = "") -> Session:
        s = Session(self.backend.path, role, key, config)
        self.sessions.append(s)
        return s

    def coprocessor(self, key: str, config: str = "", functions: bool = True) -> Session:
        """A started coprocessor: echo on decoder_ids 0 and 1, steane on 2."""
        cop = self.session("coprocessor", key, config)
        cop.connect()
        cop.alloc_memory()
        cop.exchange_keys()
        cop.establish_channel()
        if functions:
            cop.set_coprocessor_fn(echo())
            cop.set_coprocessor_fn(steane(), decoder_ids=[2])
            cop.start()
        return cop

    def controller(self, key: str, config: str = "", in_bytes: int = 64, out_bytes: int = 64) -> Session:
        ctl = self.session("controller", key, config)
        ctl.connect()
        ctl.alloc_memory()
        ctl.exchange_keys()
        ctl.establish_channel()
        ctl.set_message_sizes(in_bytes, out_bytes)
        ctl.start()
        return ctl

    def pair(self, cop_config: str = "", ctl_config: str = "", in_bytes: int = 64,
             out_bytes: int = 64) -> tuple[str, Session, Session]:
        key = self.key()
        cop = self.coprocessor(key, cop_config)
        ctl = self.controller(key, ctl_config, in_bytes, out_bytes)
        return key, cop, ctl

    def close(self) -> None:
        # Controllers first, as a deployment tears down; destroy is idempotent anyway.
        for s in sorted(self.sessions, key=lambda s: s.role != "controller"):
            s.destroy()
        self.sessions.clear()


@pytest.fixture
def pairs(stub_backend: StubBackend):
    stub_backend.lib.tb_set_auto_deliver(1)
    p = Pairs(stub_backend)
    try:
        yield p
    finally:
        p.close()
        stub_backend.lib.tb_set_auto_deliver(1)
    # Every backend instance the core opened was closed, and every ring freed.
    assert stub_backend.lib.tb_open_count() == 0
    assert stub_backend.lib.tb_region_count() == 0


# ---- plugins for placement tests, registered in process (no entry points needed) ----

class PlacementTestPlugin:
    @hookimpl
    def backline_transports(self):
        return [
            Transport(
                name="shm",
                summary="test shared memory",
                serves=(("cpu", "controller"), ("cpu", "coprocessor"), ("gpu", "coprocessor")),
                library=lambda h, r: "/nonexistent.so",
                init_args={"cpu": "core to pin to"},
            ),
            Transport(
                name="net",
                summary="test network",
                serves=(("cpu", "controller"), ("fpga", "controller"), ("cpu", "coprocessor"), ("gpu", "coprocessor")),
                library=lambda h, r: "/nonexistent.so",
                needs_endpoint=True,
            ),
        ]

    @hookimpl
    def backline_decoders(self):
        return [
            Decoder(
                name="lookup",
                summary="t",
                build=lambda **kw: CoprocessorFunction(name="lookup", library="/x.so", symbol="fn"),
            )
        ]


@pytest.fixture
def placement_plugins():
    """Test transports ``shm`` and ``net`` (needs an endpoint) and a decoder ``lookup``."""
    plugin = PlacementTestPlugin()
    plugins.register(plugin)
    yield plugin
    plugins.unregister(plugin)


# ---- sentinel plugins: installed only for a subprocess, to see which kinds a call imports ----

#: kind -> (entry-point group, module a sentinel of that kind lives in)
SENTINEL_KINDS = {
    "transport": ("backline.transports", "backline_sentinel_transport"),
    "decoder": ("backline.decoders", "backline_sentinel_decoder"),
    "pass": ("backline.passes", "backline_sentinel_pass"),
    "device": ("backline.devices", "backline_sentinel_device"),
}
_SENTINEL_RECORD = {
    "transport": 'Transport(name="sentinel-transport", summary="s", library=lambda h, r: "/x.so", '
                 'serves=(("cpu", "controller"),))',
    "decoder": 'Decoder(name="sentinel-decoder", summary="s", build=lambda: None)',
    "pass": 'Pass(name="sentinel-pass", summary="s", load=lambda: None)',
    "device": 'Device(name="sentinel-device", summary="s", load=lambda: "/x.so")',
}


@dataclass
class Sentinels:
    """A folder holding one installed-looking plugin distribution per kind; put it on a
    subprocess's PYTHONPATH and check ``modules`` in its ``sys.modules`` afterwards."""

    path: Path

    @staticmethod
    def module(kind: str) -> str:
        return SENTINEL_KINDS[kind][1]

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.path), env.get("PYTHONPATH", "")]))
        return env


@pytest.fixture(scope="session")
def sentinels(tmp_path_factory: pytest.TempPathFactory) -> Sentinels:
    root = tmp_path_factory.mktemp("sentinels")
    entry_points = []
    for kind, (group, module) in SENTINEL_KINDS.items():
        hook, record = RECORD_TYPES[kind][1], _SENTINEL_RECORD[kind]
        (root / f"{module}.py").write_text(
            f"from backline_core._hookspecs import Decoder, Device, Pass, Transport, hookimpl\n\n\n"
            f"@hookimpl\ndef {hook}():\n    return [{record}]\n")
        entry_points.append(f"[{group}]\nsentinel-{kind} = {module}\n")
    dist = root / "backline_sentinels-0.0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: backline-sentinels\nVersion: 0.0.0\n")
    (dist / "entry_points.txt").write_text("\n".join(entry_points))
    return Sentinels(root)
