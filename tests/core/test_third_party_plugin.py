"""A third-party package adds a transport and a decoder with no change to this repository.

The test writes a complete small distribution, ``backline-loopback-example``, into a
temporary directory, pip-installs it into the running interpreter's environment and
checks, through real entry points only (no monkeypatching, no in-process
registration), that its transport and decoder resolve, are listed by ``backline
plugins``, run a round and validate in a Placement. It then uninstalls the package and
checks that both are gone. A second throwaway package whose plugin module fails to
import shows that one broken plugin does not break the others.

docs/plugins.md walks through exactly this example: the file contents below are its
listings, and :func:`test_docs_listings_match` keeps the two in step.

Every check after an install or uninstall runs in a fresh interpreter, because
stevedore caches entry points per process. The packages are always uninstalled again,
also when a check fails, and concurrent runs of this module in one environment take
turns (a file lock). Building needs pip and the C compiler Python was built with
(the same one installing backline-core from source needs).
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

# ---- the example distribution (shown verbatim in docs/plugins.md) ----------------------

PYPROJECT_TOML = """\
[build-system]
# setup.py imports backline_core.sdk.build, so backline-core must be installed first and
# this package built with `pip install --no-build-isolation .`
requires = ["setuptools>=65", "backline-core"]
build-backend = "setuptools.build_meta"

[project]
name = "backline-loopback-example"
version = "0.1.0"
description = "Example Backline plugin: a single-process loopback transport and an invert decoder"
requires-python = ">=3.11"
dependencies = ["backline-core"]

[project.entry-points."backline.transports"]
loopback = "backline_loopback_example.plugin"

[project.entry-points."backline.decoders"]
invert = "backline_loopback_example.plugin"

[tool.setuptools]
packages = ["backline_loopback_example"]
include-package-data = false

[tool.setuptools.package-data]
backline_loopback_example = ["native/*.c"]
"""

SETUP_PY = """\
\"\"\"Builds the two native libraries as plain shared libraries against backline.h.\"\"\"

from setuptools import setup

from backline_core.sdk.build import BuildPlainLibraries, plain_library

setup(
    ext_modules=[
        plain_library("backline_loopback_example.libloopback",
                      sources=["backline_loopback_example/native/loopback.c"]),
        plain_library("backline_loopback_example.libinvert",
                      sources=["backline_loopback_example/native/invert.c"]),
    ],
    cmdclass={"build_ext": BuildPlainLibraries},
)
"""

INIT_PY = """\
\"\"\"Example Backline plugin: the ``loopback`` transport and the ``invert`` decoder.\"\"\"
"""

PLUGIN_PY = """\
\"\"\"Entry point of backline-loopback-example: what it provides and where its libraries are.

Both entry points (loopback in backline.transports, invert in backline.decoders) name
this module; the core imports it the first time either is asked for.
\"\"\"

from __future__ import annotations

import os

from backline_core import CoprocessorFunction, Decoder, Transport, hookimpl

HERE = os.path.dirname(os.path.abspath(__file__))
LOOPBACK_LIBRARY = os.path.join(HERE, "libloopback.so")
INVERT_LIBRARY = os.path.join(HERE, "libinvert.so")


def _library(hardware: str, role: str) -> str:
    return LOOPBACK_LIBRARY  # one library serves both roles


def invert() -> CoprocessorFunction:
    \"\"\"Flips every bit of the payload; serves decoder_ids 0 and 1.\"\"\"
    return CoprocessorFunction(name="invert", library=INVERT_LIBRARY, symbol="invert_bits", decoder_ids=(0, 1))


@hookimpl
def backline_transports() -> list[Transport]:
    return [
        Transport(
            name="loopback",
            summary="one process: the controller's post serves the coprocessor in place",
            serves=(("cpu", "controller"), ("cpu", "coprocessor")),
            runs_in=("controller-thread",),
            init_args={"greeting": "any text of at most 64 characters; checked, otherwise unused (how a backend declares a key)"},
            library=_library,
        )
    ]


@hookimpl
def backline_decoders() -> list[Decoder]:
    return [Decoder(name="invert", summary="writes each payload byte XOR 0xFF", build=invert)]
"""

LOOPBACK_C = """\
/*
 * loopback: a single-process Backline transport backend.
 *
 * The coprocessor owns the memory. At connect it registers its session key in a static
 * table, at alloc_memory it allocates both rings (64-byte aligned, zeroed), and at
 * exchange_keys it publishes them. A controller in the same process finds the rings by
 * key; its deliver hook answers each request at once by serving the coprocessor session
 * on the controller's own thread (runs_in="controller-thread"), so no thread polls.
 *
 * Teardown may come in either order: the rings are reference-counted and freed by
 * whichever side closes last. Rounds are meant to run on one thread at a time.
 */
#include <backline/backline.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One coprocessor's rings, shared with the controller that found them. */
struct entry {
    char key[BL_KEY_MAX_LEN + 1];
    uint8_t *rings;     /* the request ring, then the reply ring */
    uint32_t slots, slot_bytes;
    bl_session *coproc; /* the session the controller's deliver hook serves */
    int ready;          /* rings allocated and published */
    int alive;          /* the coprocessor session is open and not stopped */
    int refs;           /* coprocessor + controller; the last to close frees */
    struct entry *next;
};

/* One session's backend instance (the core's `impl`). */
struct loopback {
    int32_t role;
    char key[BL_KEY_MAX_LEN + 1];
    uint32_t slots, slot_bytes; /* coprocessor: the geometry the core parsed from config */
    bl_session *session;
    const bl_host_api *host;
    struct entry *entry;
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
/* Registered coprocessors, newest first. The core lets one session per (role, key) exist
 * in a process, so a key names at most one live coprocessor and one controller. */
static struct entry *table;

/* Keys of the configuration string this backend accepts besides the core's own. */
static const char *const config_keys[] = {"greeting", NULL};

static int32_t fail(char *err, size_t errlen, int32_t rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int32_t fail(char *err, size_t errlen, int32_t rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return rc;
}

static struct entry *find(const char *key) { /* table_lock held */
    for (struct entry *e = table; e; e = e->next)
        if (e->ready && __atomic_load_n(&e->alive, __ATOMIC_ACQUIRE) && strcmp(e->key, key) == 0) return e;
    return NULL;
}

static void release(struct entry *e) { /* table_lock held */
    if (--e->refs == 0) {
        free(e->rings);
        free(e);
    }
}

/* ---- round path (controller) ---- */

static int32_t deliver(void *impl, uint64_t seq, uint32_t slot) {
    struct loopback *lb = impl;
    if (!__atomic_load_n(&lb->entry->alive, __ATOMIC_ACQUIRE)) return BL_EPEER;
    int32_t answered = lb->host->serve_pending(lb->entry->coproc);
    return answered < 0 ? answered : BL_OK;
}

static int32_t peer_alive(void *impl) {
    struct loopback *lb = impl;
    return __atomic_load_n(&lb->entry->alive, __ATOMIC_ACQUIRE);
}

/* ---- lifecycle hooks ---- */

static int32_t lb_open(const bl_open_args *args, void **impl, char *err, size_t errlen) {
    if (args->abi_version != BACKLINE_ABI_VERSION)
        return fail(err, errlen, BL_EABI, "loopback was built for Backline ABI %d, the runtime is ABI %u",
                    BACKLINE_ABI_VERSION, args->abi_version);
    struct loopback *lb = calloc(1, sizeof *lb);
    if (!lb) return fail(err, errlen, BL_ENOMEM, "out of memory");
    lb->role = args->role;
    snprintf(lb->key, sizeof lb->key, "%s", args->key);
    lb->slots = args->slots;
    lb->slot_bytes = args->slot_bytes;
    lb->session = args->session;
    lb->host = args->host;
    /* The core has parsed the configuration and checked every key against config_keys;
     * greeting=... is read through the host's accessor (this backend only checks it). */
    const char *greeting = args->host->config_str(args->session, "greeting");
    if (greeting && strlen(greeting) > 64) {
        free(lb);
        return fail(err, errlen, BL_EINVAL, "greeting=%.16s...: at most 64 characters", greeting);
    }
    if (args->role == BL_COPROCESSOR && args->runs_in != BL_RUNS_CONTROLLER_THREAD) {
        free(lb);
        return fail(err, errlen, BL_EINVAL, "loopback runs its coprocessor in the controller's thread only "
                    "(runs_in controller-thread)");
    }
    *impl = lb;
    return BL_OK;
}

static int32_t lb_connect(void *impl, uint64_t deadline_ns, char *err, size_t errlen) {
    struct loopback *lb = impl;
    if (lb->role == BL_COPROCESSOR) {
        struct entry *e = calloc(1, sizeof *e);
        if (!e) return fail(err, errlen, BL_ENOMEM, "out of memory");
        snprintf(e->key, sizeof e->key, "%s", lb->key);
        e->coproc = lb->session;
        e->alive = 1;
        e->refs = 1;
        pthread_mutex_lock(&table_lock);
        e->next = table;
        table = e;
        lb->entry = e;
        pthread_mutex_unlock(&table_lock);
        return BL_OK;
    }
    for (;;) { /* controller: wait for a live coprocessor to publish rings under our key */
        pthread_mutex_lock(&table_lock);
        struct entry *e = find(lb->key);
        if (e) {
            e->refs++;
            lb->entry = e;
            pthread_mutex_unlock(&table_lock);
            return BL_OK;
        }
        pthread_mutex_unlock(&table_lock);
        if (lb->host->now_ns() > deadline_ns)
            return fail(err, errlen, BL_ETIMEOUT,
                        "no loopback coprocessor serves key '%s' in this process; open the coprocessor first",
                        lb->key);
        struct timespec pause = {0, 100000}; /* 0.1 ms */
        nanosleep(&pause, NULL);
    }
}

static int32_t lb_alloc_memory(void *impl, char *err, size_t errlen) {
    struct loopback *lb = impl;
    if (lb->role != BL_COPROCESSOR) return BL_OK; /* the controller uses the coprocessor's rings */
    size_t bytes = 2 * (size_t)lb->slots * lb->slot_bytes; /* a multiple of 64 */
    uint8_t *rings = aligned_alloc(BL_SLOT_ALIGN, bytes);
    if (!rings) return fail(err, errlen, BL_ENOMEM, "cannot allocate %zu bytes of ring memory", bytes);
    memset(rings, 0, bytes); /* seq 0: no slot written yet */
    pthread_mutex_lock(&table_lock);
    lb->entry->rings = rings;
    lb->entry->slots = lb->slots;
    lb->entry->slot_bytes = lb->slot_bytes;
    pthread_mutex_unlock(&table_lock);
    return BL_OK;
}

static int32_t lb_exchange_keys(void *impl, uint64_t deadline_ns, char *err, size_t errlen) {
    struct loopback *lb = impl;
    if (lb->role == BL_COPROCESSOR) { /* publish: controllers may take the rings now */
        pthread_mutex_lock(&table_lock);
        lb->entry->ready = 1;
        pthread_mutex_unlock(&table_lock);
    }
    return BL_OK; /* nothing to exchange within one process */
}

static int32_t lb_establish_channel(void *impl, bl_channel *ch, uint64_t deadline_ns, char *err, size_t errlen) {
    struct loopback *lb = impl;
    struct entry *e = lb->entry;
    ch->request_ring = e->rings;
    ch->reply_ring = e->rings + (size_t)e->slots * e->slot_bytes;
    ch->slots = e->slots;
    ch->slot_bytes = e->slot_bytes;
    ch->impl = lb;
    if (lb->role == BL_CONTROLLER) {
        ch->deliver = deliver; /* answer each request as it is posted */
        ch->peer_alive = peer_alive;
    }
    /* ch->doorbell stays NULL: no coprocessor thread ever sleeps waiting for work */
    return BL_OK;
}

static int32_t lb_start(void *impl, char *err, size_t errlen) {
    return BL_OK; /* no poller thread: the controller's deliver hook serves */
}

static int32_t lb_stop(void *impl, char *err, size_t errlen) {
    struct loopback *lb = impl;
    if (lb->role == BL_COPROCESSOR && lb->entry) /* its controller now fails fast with BL_EPEER */
        __atomic_store_n(&lb->entry->alive, 0, __ATOMIC_RELEASE);
    return BL_OK;
}

static void lb_close(void *impl) {
    struct loopback *lb = impl;
    struct entry *e = lb->entry;
    if (e) {
        pthread_mutex_lock(&table_lock);
        if (lb->role == BL_COPROCESSOR) {
            __atomic_store_n(&e->alive, 0, __ATOMIC_RELEASE);
            for (struct entry **pp = &table; *pp; pp = &(*pp)->next) /* unregister the key */
                if (*pp == e) {
                    *pp = e->next;
                    break;
                }
        }
        release(e);
        pthread_mutex_unlock(&table_lock);
    }
    free(lb);
}

static const bl_backend backend = {
    .abi_version = BACKLINE_ABI_VERSION,
    .name = "loopback",
    .config_keys = config_keys,
    .open = lb_open,
    .connect = lb_connect,
    .alloc_memory = lb_alloc_memory,
    .exchange_keys = lb_exchange_keys,
    .establish_channel = lb_establish_channel,
    .start = lb_start,
    .stop = lb_stop,
    .close = lb_close,
};

BL_API const bl_backend *backline_transport_backend_v1(void) { return &backend; }
"""

INVERT_C = """\
/* invert_bits: a bl_coprocessor_fn that writes each input byte XOR 0xFF. */
#include <backline/backline.h>

BL_API int32_t invert_bits(void *ctx, uint32_t decoder_id, const uint8_t *in, uint32_t in_len,
                           uint8_t *out, uint32_t out_cap, uint32_t *out_len) {
    (void)ctx;
    (void)decoder_id;
    if (in_len > out_cap) return 1; /* nonzero: the round fails with BL_EFN */
    for (uint32_t i = 0; i < in_len; ++i) out[i] = in[i] ^ 0xFFu;
    *out_len = in_len;
    return 0;
}
"""

CONFTEST_PY = """\
\"\"\"What backline-core's conformance suite needs to know of the loopback transport.\"\"\"

import pytest

from backline_core.testing import TransportUnderTest


@pytest.fixture
def backline_transport() -> TransportUnderTest:
    # Where its coprocessors run, and that they need no endpoint and it has no bench floor, the
    # suite reads from the transport's record; here only what the record cannot say: a value
    # of its own key that the backend refuses, and the words of the refusal.
    return TransportUnderTest("loopback", bad_values=[({"greeting": "x" * 65}, ["at most 64 characters"])])
"""

TEST_CONFORMANCE_PY = """\
\"\"\"backline-core's conformance suite, run against the loopback transport (see conftest.py).\"\"\"

from backline_core.testing.conformance import *  # noqa: F403
"""

#: path inside the project directory -> contents
EXAMPLE_FILES = {
    "pyproject.toml": PYPROJECT_TOML,
    "setup.py": SETUP_PY,
    "backline_loopback_example/__init__.py": INIT_PY,
    "backline_loopback_example/plugin.py": PLUGIN_PY,
    "backline_loopback_example/native/loopback.c": LOOPBACK_C,
    "backline_loopback_example/native/invert.c": INVERT_C,
    "tests/conftest.py": CONFTEST_PY,
    "tests/test_conformance.py": TEST_CONFORMANCE_PY,
}

# ---- the broken distribution --------------------------------------------------------------

BROKEN_FILES = {
    "pyproject.toml": """\
[build-system]
requires = ["setuptools>=65"]
build-backend = "setuptools.build_meta"

[project]
name = "backline-broken-example"
version = "0.1.0"
requires-python = ">=3.11"

[project.entry-points."backline.transports"]
broken = "backline_broken_example.plugin"

[tool.setuptools]
packages = ["backline_broken_example"]
""",
    "backline_broken_example/__init__.py": "",
    "backline_broken_example/plugin.py": 'raise ImportError("deliberately broken")\n',
}

DOCS = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"
LOOPBACK_DIST = "backline-loopback-example"
BROKEN_DIST = "backline-broken-example"


# ---- helpers ------------------------------------------------------------------------------


def _require_toolchain() -> None:
    if importlib.util.find_spec("pip") is None:
        pytest.skip("pip is not installed in this interpreter")
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")
    if not cc or shutil.which(cc[0]) is None:
        pytest.skip(f"no C compiler ({cc[0] if cc else 'cc'}) to build the example plugin")


def _write_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args]
    try:
        return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"{' '.join(cmd)} failed ({exc.returncode}):\n{exc.stdout}\n{exc.stderr}")


def _install(project: Path) -> None:
    # --no-index: everything it needs (setuptools, backline-core) is installed already.
    _pip("install", "--no-build-isolation", "--no-index", str(project))


def _uninstall(dist: str) -> None:
    _pip("uninstall", "-y", dist)  # prints a warning and succeeds when it is not installed


def _fresh(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python *args`` in a new interpreter (a new stevedore entry-point cache).

    ``cwd`` must not hold the example's sources, or ``import backline_loopback_example``
    would find the unbuilt source tree instead of the installed package.
    """
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def _fresh_json(code: str, cwd: Path) -> dict:
    """Run ``code`` in a new interpreter; return the JSON it prints last."""
    proc = _fresh(cwd, "-c", textwrap.dedent(code))
    assert proc.returncode == 0, f"fresh interpreter failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def environment_lock():
    """Hold an exclusive lock on this Python environment while the module installs packages.

    Two runs of this module in one environment at once (say, two sessions each running
    the suite) would otherwise uninstall each other's packages mid-test.
    """
    # In the environment itself, so the lock goes when the environment does (no file left in /tmp).
    path = os.path.join(sys.prefix, ".backline-third-party-plugin.lock")
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# ---- the loopback example -----------------------------------------------------------------


class Installed:
    def __init__(self, project: Path, workdir: Path) -> None:
        self.project, self.workdir = project, workdir

    def uninstall(self) -> None:
        _uninstall(LOOPBACK_DIST)


@pytest.fixture(scope="module")
def loopback(tmp_path_factory: pytest.TempPathFactory, environment_lock: None):
    """backline-loopback-example, built and installed; uninstalled at the end however the tests went."""
    _require_toolchain()
    root = tmp_path_factory.mktemp("third_party")
    project = _write_tree(root / "backline-loopback-example", EXAMPLE_FILES)
    workdir = root / "run"
    workdir.mkdir()
    installed = Installed(project, workdir)
    try:
        _install(project)
        yield installed
    finally:
        installed.uninstall()


def test_entry_points_resolve(loopback: Installed) -> None:
    out = _fresh_json(
        """
        import json
        from backline_core import plugins
        t = plugins.get("transport", "loopback")
        d = plugins.get("decoder", "invert")
        fn = d.build()
        rows = {f"{r.kind}:{r.name}": [r.distribution, r.version, r.error] for r in plugins.listing()}
        print(json.dumps({
            "serves": [list(p) for p in t.serves], "runs_in": list(t.runs_in),
            "init_args": sorted(t.init_args), "library": t.library("cpu", "coprocessor"),
            "function": [fn.name, fn.library, fn.symbol, list(fn.decoder_ids)], "rows": rows,
        }))
        """,
        loopback.workdir,
    )
    assert out["serves"] == [["cpu", "controller"], ["cpu", "coprocessor"]]
    assert out["runs_in"] == ["controller-thread"]
    assert out["init_args"] == ["greeting"]
    name, library, symbol, ids = out["function"]
    assert (name, symbol, ids) == ("invert", "invert_bits", [0, 1])
    for path in (out["library"], library):
        # the installed package's own libraries, not anything in the source tree
        assert os.path.isfile(path), path
        assert not Path(path).resolve().is_relative_to(loopback.project.resolve()), path
    assert os.path.basename(out["library"]) == "libloopback.so"
    assert os.path.basename(library) == "libinvert.so"
    assert out["rows"]["transport:loopback"] == [LOOPBACK_DIST, "0.1.0", None]
    assert out["rows"]["decoder:invert"] == [LOOPBACK_DIST, "0.1.0", None]
    assert out["rows"]["decoder:echo"][2] is None  # the core's own plugins are unaffected


def test_cli_lists_the_plugins(loopback: Installed) -> None:
    proc = _fresh(loopback.workdir, "-m", "backline_core", "plugins")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for plugin in ("loopback", "invert"):
        rows = [line for line in lines if re.search(rf"\b{plugin}\b", line)]
        assert rows, f"`backline plugins` does not list {plugin}:\n{proc.stdout}"
        assert any(LOOPBACK_DIST in line for line in rows), f"{plugin} is not attributed to {LOOPBACK_DIST}:\n{proc.stdout}"


def test_round_runs(loopback: Installed) -> None:
    out = _fresh_json(
        """
        import json
        from backline_core import Session
        from backline_core._errors import DeadlineError, InvalidArgumentError

        with Session.open("loopback", "coprocessor", "k", functions=["invert"]) as cop, \\
             Session.open("loopback", "controller", "k", in_bytes=4, out_bytes=4) as ctl:
            first = ctl.round(bytes.fromhex("000ff0ff")).hex()
            again = [ctl.round(bytes([i, 255 - i]), decoder_id=i % 2).hex() for i in range(200)]
            geometry = ctl.geometry

        # the backend's own key passes the core's check; the same key works again afterwards
        with Session.open("loopback", "coprocessor", "k", config="greeting=hello;slots=8",
                          functions=["invert"]) as cop, \\
             Session.open("loopback", "controller", "k", config="greeting=hi", in_bytes=2, out_bytes=2) as ctl:
            greeted = ctl.round(b"ab").hex()
            slots = ctl.geometry["slots"]

        errors = {}
        try:
            Session.open("loopback", "coprocessor", "x", config="colour=red", functions=["invert"])
        except InvalidArgumentError as exc:
            errors["unknown_key"] = str(exc)
        try:
            Session.open("loopback", "controller", "nobody", config="connect_timeout_ms=50", in_bytes=4, out_bytes=4)
        except DeadlineError as exc:
            errors["no_coprocessor"] = str(exc)
        print(json.dumps({"first": first, "again": again, "geometry": geometry, "greeted": greeted,
                          "slots": slots, "errors": errors}))
        """,
        loopback.workdir,
    )
    assert out["first"] == "fff00f00"
    assert out["again"] == [bytes([255 - i, i]).hex() for i in range(200)]
    assert out["geometry"] == {"slots": 64, "slot_bytes": 256, "in_bytes": 4, "out_bytes": 4}
    assert out["greeted"] == bytes(b ^ 0xFF for b in b"ab").hex()
    assert out["slots"] == 8
    assert "colour" in out["errors"]["unknown_key"] and "greeting" in out["errors"]["unknown_key"]
    assert "no loopback coprocessor serves key 'nobody'" in out["errors"]["no_coprocessor"]
    assert "BL_ETIMEOUT" in out["errors"]["no_coprocessor"]


def test_placement_validates(loopback: Installed) -> None:
    out = _fresh_json(
        """
        import json
        from backline_core import Controller, Coprocessor, Placement, PlacementError, resolve
        p = Placement(controller=Controller(),
                      coprocessors=[Coprocessor(coprocessor_fn="invert", init_args={"greeting": "hello"})],
                      transport="loopback")
        r = resolve(p)
        rejected = {}
        for case, kwargs in (("key", dict(init_args={"colour": "red"})), ("place", dict(runs_in="process")),
                             ("value", dict(init_args={"greeting": "x" * 65}))):
            try:
                resolve(Placement(controller=Controller(), transport="loopback",
                                  coprocessors=[Coprocessor(coprocessor_fn="invert", **kwargs)]))
            except PlacementError as exc:
                rejected[case] = str(exc)
        print(json.dumps({"transport": r.controller.transport.name, "dist": r.controller.transport.distribution,
                          "runs_in": r.coprocessors[0].runs_in, "nodes": [n.name for n in p.nodes],
                          "fn": r.coprocessors[0].function.symbol, "rejected": rejected}))
        """,
        loopback.workdir,
    )
    assert (out["transport"], out["dist"]) == ("loopback", LOOPBACK_DIST)
    assert out["runs_in"] == "controller-thread"  # the transport's only (so default) place
    assert out["nodes"] == ["controller", "coprocessor0"]
    assert out["fn"] == "invert_bits"
    # keys are the backend's own: an undeclared one is refused with the known ones, and the backend
    # itself refuses a value (through the core's bl_config_check) and a place it does not support
    assert "colour" in out["rejected"]["key"] and "greeting" in out["rejected"]["key"]
    assert "controller-thread" in out["rejected"]["place"]
    assert "at most 64 characters" in out["rejected"]["value"]


#: the suite's tests that must pass for loopback (the rest skip: they need an endpoint, another
#: process, a floor, or an executor, or a compiler the core-only environment lacks)
LOOPBACK_CONFORMS = {
    "test_steane_rounds_on_every_syndrome_and_both_decoder_ids",
    "test_payloads_of_every_size_up_to_the_slot",
    "test_the_controller_takes_the_coprocessors_geometry",
    "test_pipelined_rounds_come_back_in_order",
    "test_a_killed_coprocessor_fails_the_round_and_does_not_hang",
    "test_a_second_controller_is_refused_and_the_next_one_continues",
    "test_a_place_the_transport_does_not_run_coprocessors_in_is_refused",
    "test_a_runs_in_that_is_no_place_is_refused",
    "test_bad_configuration_is_refused_and_leaves_the_key_free[coprocessor]",
    "test_bad_configuration_is_refused_and_leaves_the_key_free[controller]",
    "test_the_transports_own_bad_values_are_refused",
    "test_nothing_is_left_behind_after_a_deployment",
}


def test_the_conformance_suite_runs_against_the_plugin(loopback: Installed) -> None:
    """The plugin's own tests/ (a conftest.py and one import) run backline-core's conformance suite
    through the pytest plugin the core installs, in a pytest of their own."""
    proc = _fresh(loopback.workdir, "-P", "-m", "pytest", "-v", "-p", "no:cacheprovider", "-o", "addopts=",
                  str(loopback.project / "tests"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    outcomes = dict(re.findall(r"::(\S+) (PASSED|SKIPPED|FAILED|ERROR)", proc.stdout))
    assert LOOPBACK_CONFORMS <= {name for name, outcome in outcomes.items() if outcome == "PASSED"}, proc.stdout
    assert set(outcomes.values()) <= {"PASSED", "SKIPPED"}, proc.stdout


def test_uninstall_removes_the_plugins(loopback: Installed) -> None:
    # Keep this test last in the module: it uninstalls the package the others use.
    loopback.uninstall()
    out = _fresh_json(
        """
        import json
        from backline_core import plugins
        from backline_core._errors import UnknownPluginError
        raised = {}
        for kind, name in (("transport", "loopback"), ("decoder", "invert")):
            try:
                plugins.get(kind, name)
                raised[name] = None
            except UnknownPluginError:
                raised[name] = "UnknownPluginError"
            except Exception as exc:
                raised[name] = f"{type(exc).__name__}: {exc}"
        print(json.dumps({"raised": raised, "names": [r.name for r in plugins.listing()]}))
        """,
        loopback.workdir,
    )
    assert out["raised"] == {"loopback": "UnknownPluginError", "invert": "UnknownPluginError"}
    assert "loopback" not in out["names"] and "invert" not in out["names"]
    assert "echo" in out["names"]


# ---- a plugin that fails to import ------------------------------------------------------------


def test_broken_plugin_is_isolated(tmp_path: Path, environment_lock: None) -> None:
    if importlib.util.find_spec("pip") is None:
        pytest.skip("pip is not installed in this interpreter")
    project = _write_tree(tmp_path / "backline-broken-example", BROKEN_FILES)
    workdir = tmp_path / "run"
    workdir.mkdir()
    try:
        _install(project)
        out = _fresh_json(
            """
            import importlib.metadata, json
            from backline_core import plugins
            from backline_core._errors import PluginError, UnknownPluginError
            try:
                plugins.get("transport", "broken")
                got = None
            except UnknownPluginError as exc:
                got = ["UnknownPluginError", str(exc)]
            except PluginError as exc:
                got = ["PluginError", str(exc)]
            echo = plugins.get("decoder", "echo").build().symbol  # a broken plugin poisons nothing
            try:
                importlib.metadata.distribution("backline-transport-memcpy")
                memcpy = plugins.get("transport", "memcpy").name
            except importlib.metadata.PackageNotFoundError:
                memcpy = None
            rows = {f"{r.kind}:{r.name}": [r.distribution, r.error] for r in plugins.listing()}
            print(json.dumps({"got": got, "echo": echo, "memcpy": memcpy, "rows": rows}))
            """,
            workdir,
        )
        kind, message = out["got"]
        assert kind == "PluginError" and "deliberately broken" in message
        assert out["echo"] == "bl_fn_echo"
        distribution, error = out["rows"]["transport:broken"]
        assert distribution == BROKEN_DIST
        assert error and "deliberately broken" in error
        assert out["rows"]["decoder:echo"][1] is None
        assert out["rows"]["decoder:steane"][1] is None
        if out["memcpy"] is not None:  # only when the memcpy plugin is installed too
            assert out["memcpy"] == "memcpy"
            assert out["rows"]["transport:memcpy"][1] is None
        cli = _fresh(workdir, "-m", "backline_core", "plugins")
        assert cli.returncode == 0, cli.stdout + cli.stderr  # the listing survives a broken plugin
        assert "deliberately broken" in cli.stdout and "echo" in cli.stdout
    finally:
        _uninstall(BROKEN_DIST)
    out = _fresh_json(
        """
        import json
        from backline_core import plugins
        print(json.dumps([r.name for r in plugins.listing()]))
        """,
        workdir,
    )
    assert "broken" not in out


# ---- the guide shows these very files ----------------------------------------------------------


def test_docs_listings_match() -> None:
    """Every file of the example appears verbatim in docs/plugins.md (after its marker)."""
    if not DOCS.is_file():
        pytest.skip(f"{DOCS} is not part of this checkout")
    text = DOCS.read_text()
    blocks = dict(re.findall(r"<!-- example-file: (\S+) -->\n```[a-z]*\n(.*?)```\n", text, flags=re.S))
    assert sorted(blocks) == sorted(EXAMPLE_FILES), "docs/plugins.md must list every example file once"
    for path, content in EXAMPLE_FILES.items():
        assert blocks[path] == content, f"docs/plugins.md shows a different {path} than this test builds"
