"""The native runtime with only backline-core installed: no transport plugin.

* libbackline is a plain shared library that non-Python code can dlopen;
* the built-in functions (echo, steane) called directly through the cffi binding;
* session creation errors, and the core's own session logic (configuration, lifecycle,
  rounds, registry, teardown) over a minimal backend compiled in conftest.py.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from backline_core import CORE_KEYS, get_include, get_library
from backline_core._builtins import echo, steane
from backline_core._coprocessor_function import CoprocessorFunction
from backline_core._errors import (
    AbiError,
    DeadlineError,
    FunctionError,
    InvalidArgumentError,
    KeyTakenError,
    LifecycleError,
    NothingPostedError,
    PayloadTooLargeError,
    PeerError,
    PlacementError,
    RingFullError,
    TransportError,
    UnknownDecoderError,
)
from backline_core._abi import check, ffi, last_error, lib
from backline_core._session import Session
from backline_core._steane import STEANE_H, STEANE_LOGICAL

# The Steane code's matrices as test data (see data/README.md).
STEANE_NPZ = Path(__file__).parent / "data" / "steane.npz"

# The Steane code's check matrix (Hx = Hz) from its one source, backline/steane.h; the
# tests below hold it to the reference data and to what a Steane code is.
HX = np.array(STEANE_H, dtype=np.uint8)

# Every function the headers declare with BL_API.
HEADER_DIR = Path(get_include()) / "backline"
API_FUNCTIONS = sorted(
    {m for h in ("backline.h", "bench.h", "device.h", "executor.h")
     for m in re.findall(r"^BL_API\s+[^;(]*?\**\s*(\w+)\s*\(", (HEADER_DIR / h).read_text(), re.M)}
)


# ---- paths and the plain shared library ----------------------------------------------------

def test_get_include_holds_both_headers():
    inc = Path(get_include())
    assert inc.is_dir()
    assert (inc / "backline" / "backline.h").is_file()
    assert (inc / "backline" / "bench.h").is_file()


def test_get_library_exists():
    lib_path = Path(get_library())
    assert lib_path.is_file()
    assert lib_path.name == "libbackline.so"


def test_header_parse_found_the_api():
    assert len(API_FUNCTIONS) >= 29
    for name in ("bl_session_create", "bl_round", "bl_fn_steane", "bl_bench_floor", "bl_lfsr_next"):
        assert name in API_FUNCTIONS


def test_headers_compile_cleanly(tmp_path):
    gcc = shutil.which("gcc") or pytest.fail("gcc is needed")
    src = tmp_path / "h.c"
    src.write_text("#include <backline/backline.h>\n#include <backline/bench.h>\n"
                   "#include <backline/backline.h>\nint main(void) { return sizeof(bl_frame_header) == 32 ? 0 : 1; }\n")
    proc = subprocess.run([gcc, "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{get_include()}", "-o",
                           str(tmp_path / "h"), str(src)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert subprocess.run([str(tmp_path / "h")]).returncode == 0


LOADER_C = r"""
#include <backline/backline.h>
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc != 2) return 64;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
    int32_t (*abi)(void) = (int32_t (*)(void))dlsym(h, "bl_abi_version");
    const char *(*status_name)(int32_t) = (const char *(*)(int32_t))dlsym(h, "bl_status_name");
    bl_coprocessor_fn steane = (bl_coprocessor_fn)dlsym(h, "bl_fn_steane");
    if (!abi || !status_name || !steane) { fprintf(stderr, "dlsym failed\n"); return 3; }
    printf("abi %d header %d\n", abi(), BACKLINE_ABI_VERSION);
    for (int32_t st = 0; st >= -14; --st) printf("status %d %s\n", st, status_name(st));
    for (unsigned s = 0; s < 8; ++s) {
        uint8_t in = (uint8_t)s, out = 0xee;
        uint32_t n = 0;
        int32_t rc = steane(NULL, 0, &in, 1, &out, 1, &n);
        printf("steane %u rc %d len %u out %u\n", s, rc, n, out);
    }
    printf("entry %s\n", dlsym(h, BL_BACKEND_ENTRY) ? "present" : "absent");
    return dlclose(h);
}
"""


def test_plain_c_program_dlopens_the_runtime(tmp_path):
    src = tmp_path / "loader.c"
    src.write_text(LOADER_C)
    exe = tmp_path / "loader"
    gcc = shutil.which("gcc") or pytest.fail("gcc is needed")
    proc = subprocess.run([gcc, "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{get_include()}", "-o", str(exe),
                           str(src), "-ldl"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    # Not linked against libbackline: the runtime is found only through dlopen.
    if shutil.which("readelf"):
        dyn = subprocess.run(["readelf", "-d", str(exe)], capture_output=True, text=True).stdout
        assert "libbackline" not in dyn
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    run = subprocess.run([str(exe), get_library()], capture_output=True, text=True, env=env, timeout=30)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == f"abi {lib.BACKLINE_ABI_VERSION} header {lib.BACKLINE_ABI_VERSION}"
    names = dict(re.fullmatch(r"status (-?\d+) (\w+)", line).groups() for line in lines[1:16])
    assert names["0"] == "BL_OK" and names["-13"] == "BL_EABI" and names["-14"] == "BL_ENOTFOUND"
    expected = hx_corrections(HX)
    for s in range(8):
        assert f"steane {s} rc 0 len 1 out {expected[s]}" in lines
    assert lines[-1] == "entry absent"


def exported_symbols() -> set[str]:
    nm = shutil.which("nm")
    if nm:
        out = subprocess.run([nm, "-D", "--defined-only", get_library()], capture_output=True, text=True, check=True)
        return {parts[-1] for parts in (line.split() for line in out.stdout.splitlines()) if len(parts) >= 3}
    return set()


def test_library_exports_the_api_and_no_backend_entry():
    cdll = ctypes.CDLL(get_library())
    for name in API_FUNCTIONS:
        assert hasattr(cdll, name), f"libbackline does not export {name}"
    assert not hasattr(cdll, "backline_transport_backend_v1")
    symbols = exported_symbols()
    if symbols:  # nm available: exactly the header's API, nothing internal
        bl_symbols = {s for s in symbols if s.startswith("bl") or s.startswith("backline")}
        assert bl_symbols == set(API_FUNCTIONS)
        assert "backline_transport_backend_v1" not in symbols


def test_abi_version_and_status_names_agree_with_the_header():
    assert lib.bl_abi_version() == lib.BACKLINE_ABI_VERSION == 4
    assert ffi.string(lib.bl_status_name(0)) == b"BL_OK"
    assert ffi.string(lib.bl_status_name(-99)) == b"BL_E?"


# ---- built-in functions through ffi -------------------------------------------------------

def call_fn(fn, payload: bytes, out_cap: int, decoder_id: int = 0):
    data = ffi.new("uint8_t[]", max(len(payload), 1))
    ffi.memmove(data, payload, len(payload))
    out = ffi.new("uint8_t[]", max(out_cap, 1))
    for i in range(max(out_cap, 1)):
        out[i] = 0xEE
    out_len = ffi.new("uint32_t *", 0xFFFFFFFF)
    rc = fn(ffi.NULL, decoder_id, data, len(payload), out, out_cap, out_len)
    return rc, bytes(ffi.buffer(out, max(out_cap, 1))), out_len[0]


@pytest.mark.parametrize("payload", [b"", b"\x00", b"syndrome", bytes(range(224))])
def test_echo_copies(payload):
    rc, out, n = call_fn(lib.bl_fn_echo, payload, 224, decoder_id=1)
    assert rc == 0
    assert n == len(payload)
    assert out[:n] == payload


def test_echo_exact_capacity():
    rc, out, n = call_fn(lib.bl_fn_echo, b"12345678", 8)
    assert (rc, out, n) == (0, b"12345678", 8)


def test_echo_rejects_payload_larger_than_out_cap():
    rc, out, n = call_fn(lib.bl_fn_echo, b"123456789", 8)
    assert rc != 0
    assert out == b"\xee" * 8  # nothing written
    assert n == 0xFFFFFFFF


def pack(bits) -> int:
    return int(np.packbits(np.asarray(bits, dtype=np.uint8), bitorder="little")[0])


def hx_corrections(hx: np.ndarray) -> dict[int, int]:
    """syndrome byte (bit i = check i) -> packed correction mask, from the check matrix."""
    table = {}
    for bits in itertools.product((0, 1), repeat=hx.shape[0]):
        syndrome = np.array(bits, dtype=np.uint8)
        qubits = [q for q in range(hx.shape[1]) if np.array_equal(hx[:, q], syndrome)]
        flip = np.zeros(hx.shape[1], dtype=np.uint8)
        if syndrome.any():
            assert len(qubits) == 1, f"syndrome {bits} is not a unique column of Hx"
            flip[qubits[0]] = 1
        else:
            assert qubits == []
        table[pack(syndrome)] = pack(flip)
    return table


def reference_hx() -> np.ndarray:
    with np.load(STEANE_NPZ) as data:
        hx = np.asarray(data["Hx"], dtype=np.uint8)
        assert np.array_equal(np.asarray(data["Hz"], dtype=np.uint8), hx)
    return hx


def test_the_steane_header_is_the_reference_codes_matrix():
    with np.load(STEANE_NPZ) as data:
        assert np.array_equal(HX, reference_hx())
        logical = np.asarray(data["Lx"], dtype=np.uint8)
        assert np.array_equal(logical, np.asarray(data["Lz"], dtype=np.uint8))
    assert tuple(np.flatnonzero(logical[0])) == STEANE_LOGICAL


def test_the_steane_header_is_a_distance_3_css_code():
    # H H^T = 0: Hx = Hz commute; distinct nonzero columns: every single flip has its own syndrome
    assert not ((HX.astype(int) @ HX.T.astype(int)) % 2).any()
    columns = {tuple(HX[:, q]) for q in range(HX.shape[1])}
    assert len(columns) == HX.shape[1] == 7 and (0, 0, 0) not in columns
    logical = np.zeros(7, dtype=np.uint8)
    logical[list(STEANE_LOGICAL)] = 1
    assert not ((HX.astype(int) @ logical) % 2).any()  # the logical operator commutes with every check
    t = hx_corrections(HX)
    assert sorted(t.values()) == [0] + [1 << q for q in range(7)]


def steane_reference(source: str) -> dict[int, int]:
    return hx_corrections(HX if source == "header" else reference_hx())


@pytest.mark.parametrize("source", ["header", "npz"])
@pytest.mark.parametrize("syndrome", range(8))
def test_steane_matches_reference(source, syndrome):
    expected = steane_reference(source)[syndrome]
    for decoder_id in (0, 1):  # X and Z checks share the table
        rc, out, n = call_fn(lib.bl_fn_steane, bytes([syndrome]), 1, decoder_id)
        assert (rc, n) == (0, 1)
        assert out[0] == expected, f"syndrome {syndrome:03b}: got {out[0]:#04x}, expected {expected:#04x}"


@pytest.mark.parametrize("payload", [b"", b"\x01\x00", b"\x00\x00\x00"])
def test_steane_rejects_other_lengths(payload):
    rc, _, _ = call_fn(lib.bl_fn_steane, payload, 8)
    assert rc != 0


@pytest.mark.parametrize("byte", [0x08, 0x10, 0x80, 0xFF, 0x09])
def test_steane_rejects_bits_above_the_three_checks(byte):
    rc, out, n = call_fn(lib.bl_fn_steane, bytes([byte]), 8)
    assert rc != 0
    assert out == b"\xee" * 8


def test_steane_rejects_zero_out_cap():
    rc, _, _ = call_fn(lib.bl_fn_steane, b"\x01", 0)
    assert rc != 0


# ---- session creation without any transport ------------------------------------------------

def new_session_raw(backend: str, role: int, key: str, config: str = "", runs_in: int = -1):
    out = ffi.new("bl_session **")
    rc = lib.bl_session_create(backend.encode(), role, key.encode(), config.encode(), runs_in, out)
    return rc, out[0]


def test_nonexistent_backend_library(tmp_path):
    missing = str(tmp_path / "no-such-backend.so")
    with pytest.raises(TransportError) as info:
        Session(missing, "controller", "k-missing")
    assert info.value.code == -8 and info.value.status == "BL_EBACKEND"
    assert missing in str(info.value)
    assert lib.bl_session_get(0, b"k-missing") == ffi.NULL  # nothing stayed registered


def test_library_without_backend_entry_is_an_abi_error():
    with pytest.raises(AbiError) as info:
        Session(get_library(), "coprocessor", "k-not-a-backend")
    assert "backline_transport_backend_v1" in str(info.value)
    assert get_library() in str(info.value)
    assert info.value.code == -13


def test_backend_of_another_abi_version(stub_backend):
    with pytest.raises(AbiError) as info:
        Session(stub_backend.abi999_path, "controller", "k-abi999")
    assert "ABI" in str(info.value)
    assert "999" in str(info.value)
    assert lib.bl_session_get(0, b"k-abi999") == ffi.NULL


def test_backend_built_for_the_previous_abi_is_told_to_rebuild(stub_backend):
    """ABI 2 changed bl_open_args and bl_host_api: an ABI 1 backend must be refused, not opened."""
    for call in (lambda: Session(stub_backend.abi1_path, "coprocessor", "k-abi1"),
                 lambda: check(lib.bl_config_check(stub_backend.abi1_path.encode(), 1, b"k-abi1", b"", 1))):
        with pytest.raises(AbiError) as info:
            call()
        text = str(info.value)
        assert "ABI 1" in text and f"ABI {lib.BACKLINE_ABI_VERSION}" in text and "rebuild" in text


def test_backend_with_a_null_hook(stub_backend):
    with pytest.raises(AbiError, match="NULL"):
        Session(stub_backend.null_hook_path, "controller", "k-nullhook")


@pytest.mark.parametrize("role", [2, -1, 7])
def test_bad_role_natively(stub_backend, role):
    rc, s = new_session_raw(stub_backend.path, role, "k-role")
    assert rc == -1 and s == ffi.NULL
    with pytest.raises(InvalidArgumentError, match="role"):
        check(rc)


def test_bad_role_through_session(stub_backend):
    # Every other creation error is a TransportError subclass; BacklineError's docstring
    # says it is the base class of every error the package raises.
    with pytest.raises(InvalidArgumentError):
        Session(stub_backend.path, "boss", "k-role")


@pytest.mark.parametrize("key", ["", "a/b", "/dev/shm", "sp ace", "semi;colon", "x" * (lib.BL_KEY_MAX_LEN + 1),
                                 "_lead", ".lead", "-lead", "abc\0def"])
def test_bad_keys(stub_backend, key):
    with pytest.raises(InvalidArgumentError, match="key"):
        Session(stub_backend.path, "coprocessor", key)


def test_longest_key_is_accepted(pairs):
    s = pairs.session("coprocessor", "k" * lib.BL_KEY_MAX_LEN)
    assert s.key == "k" * lib.BL_KEY_MAX_LEN


def test_key_rule_is_one_rule_in_c_and_python(stub_backend):
    """A node name Python accepts is a key C accepts, and the other way round (BL_KEY_MAX_LEN)."""
    from backline_core._placement import Controller

    for key in ("a", "0x", "k" * lib.BL_KEY_MAX_LEN, "a.b-c_d"):
        Controller(name=key)
        assert lib.bl_config_check(stub_backend.path.encode(), 1, key.encode(), b"", 1) == 0
    for key in ("_a", "k" * (lib.BL_KEY_MAX_LEN + 1), "a b"):
        with pytest.raises(PlacementError):
            Controller(name=key)
        assert lib.bl_config_check(stub_backend.path.encode(), 1, key.encode(), b"", 1) == lib.BL_EINVAL


@pytest.mark.defect("a configuration with a NUL byte was silently cut on the C side")
@pytest.mark.parametrize("config", ["slots=8\0;bogus=1", "\0"])
def test_nul_in_config_is_refused_not_cut(stub_backend, config):
    with pytest.raises(InvalidArgumentError, match="NUL"):
        Session(stub_backend.path, "coprocessor", "k-nul", config)


def test_runs_in_out_of_range_natively(stub_backend):
    rc, s = new_session_raw(stub_backend.path, 1, "k-runs", runs_in=7)
    assert rc == lib.BL_EINVAL and s == ffi.NULL
    rc, s = new_session_raw(stub_backend.path, 1, "k-runs", runs_in=lib.BL_RUNS_ANY)
    assert rc == lib.BL_EINVAL and "runs_in" in last_error()


def test_session_get_unknown_key():
    assert lib.bl_session_get(1, b"no-such-session-key") == ffi.NULL
    assert "no-such-session-key" in last_error()
    assert "coprocessor" in last_error()


def test_session_get_bad_role():
    assert lib.bl_session_get(5, b"x") == ffi.NULL
    assert "role" in last_error()


# ---- configuration through the core's parser ------------------------------------------------

def test_unknown_config_key_lists_the_known_keys(stub_backend):
    with pytest.raises(InvalidArgumentError) as info:
        Session(stub_backend.path, "coprocessor", "k-cfg", "slots=8;bogus=1")
    text = str(info.value)
    assert "bogus" in text and "testbackend" in text
    known = re.search(r"known keys: ([^)]*)\)", text).group(1).split(", ")
    # the C core and config.CORE_KEYS agree; then the backend's own (the endpoint keys it accepts)
    assert known == [*CORE_KEYS, "host", "port"]


@pytest.mark.parametrize("config", [
    "slots=3", "slots=0", "slots=2097152", "slots=abc", "slot_bytes=100", "slot_bytes=32", "slot_bytes=0",
    "timeout_ms=0", "timeout_ms=-1", "connect_timeout_ms=0", "x", "=1", "slots=", "idle_spin_us=-5",
    "idle_spin_us=1.5", "slots=8;;timeout_ms=5", "slots= 8", "slots=+8",
])
def test_malformed_config(stub_backend, config):
    with pytest.raises(InvalidArgumentError):
        Session(stub_backend.path, "coprocessor", "k-bad-cfg", config)
    assert lib.bl_session_get(1, b"k-bad-cfg") == ffi.NULL


@pytest.mark.parametrize("config,geometry", [
    ("", (64, 256)),
    ("slots=1;slot_bytes=64", (1, 64)),
    ("slots=16", (16, 256)),
    ("slot_bytes=4096;timeout_ms=5;connect_timeout_ms=100;idle_spin_us=-1", (64, 4096)),
    ("idle_spin_us=0", (64, 256)),
])
def test_good_config_sets_geometry(pairs, config, geometry):
    s = pairs.session("coprocessor", pairs.key(), config)
    g = s.geometry
    assert (g["slots"], g["slot_bytes"]) == geometry
    assert g["in_bytes"] == g["out_bytes"] == 0


# ---- the core's session logic over the compiled test backend --------------------------------

def test_full_lifecycle_and_rounds(pairs, stub_backend):
    key = pairs.key()
    cop = pairs.session("coprocessor", key)
    for step in ("connect", "alloc_memory", "exchange_keys", "establish_channel"):
        getattr(cop, step)()
    cop.set_coprocessor_fn(echo())
    cop.set_coprocessor_fn(steane(), decoder_ids=[2])
    cop.start()
    ctl = pairs.session("controller", key)
    for step in ("connect", "alloc_memory", "exchange_keys", "establish_channel"):
        getattr(ctl, step)()
    ctl.set_message_sizes(16, 8)
    ctl.start()
    assert ctl.geometry == {"slots": 64, "slot_bytes": 256, "in_bytes": 16, "out_bytes": 8}
    assert ctl.last_rtt_ns == 0
    assert ctl.round(b"hello") == b"hello"
    assert ctl.last_rtt_ns > 0
    assert ctl.round(b"abc", decoder_id=1) == b"abc"
    for s, expected in hx_corrections(HX).items():
        assert ctl.round(bytes([s]), decoder_id=2) == bytes([expected])
    out = bytearray(8)
    assert ctl.round_into(b"12345678", out) == 8 and out == b"12345678"
    ctl.stage_payload(b"xyz")
    ctl.post()
    assert bytes(ctl.reply_slot()) == b"xyz"
    ctl.stage_payload(b"q")
    ctl.post()
    buf = bytearray(8)
    assert ctl.collect_into(buf) == 1 and buf[:1] == b"q"
    ctl.stop()
    ctl.stop()
    with pytest.raises(LifecycleError, match="stopped"):
        ctl.round(b"x")
    ctl.destroy()
    cop.destroy()
    assert stub_backend.lib.tb_open_count() == 0


def test_python_coprocessor_function(pairs):
    key = pairs.key()
    cop = pairs.coprocessor(key, functions=False)
    cop.set_coprocessor_fn(CoprocessorFunction(name="rev", python=lambda d, p: bytes(reversed(p)), decoder_ids=(5,)))
    cop.start()
    ctl = pairs.controller(key)
    assert ctl.round(b"abc", decoder_id=5) == b"cba"


def test_function_error_reports_the_return_code(pairs):
    _, _, ctl = pairs.pair()
    with pytest.raises(FunctionError) as info:
        ctl.round(b"\x01\x02", decoder_id=2)  # steane returns 2 for in_len != 1
    assert "decoder_id 2" in str(info.value) and "returned 2" in str(info.value)
    with pytest.raises(FunctionError, match="returned 3"):
        ctl.round(b"\x08", decoder_id=2)
    assert ctl.round(b"\x02", decoder_id=2) == b"\x10"  # the session keeps working


def test_lifecycle_out_of_order(pairs):
    key = pairs.key()
    cop = pairs.session("coprocessor", key)
    with pytest.raises(LifecycleError) as info:
        cop.establish_channel()
    text = str(info.value)
    assert "Order: connect, alloc_memory, exchange_keys, establish_channel, set_coprocessor_fn, start" in text
    assert "created" in text
    with pytest.raises(LifecycleError):
        cop.start()
    with pytest.raises(LifecycleError):
        cop.set_coprocessor_fn(echo())
    cop.connect()
    with pytest.raises(LifecycleError):
        cop.connect()
    cop.alloc_memory()
    cop.exchange_keys()
    cop.establish_channel()
    with pytest.raises(LifecycleError, match="start"):
        cop.start()  # no function bound yet
    with pytest.raises(LifecycleError, match="controller call"):
        cop.set_message_sizes(8, 8)
    cop.set_coprocessor_fn(echo())
    cop.start()
    with pytest.raises(LifecycleError, match="controller call"):
        cop.round(b"x")

    ctl = pairs.session("controller", key)
    with pytest.raises(LifecycleError) as info:
        ctl.set_message_sizes(8, 8)
    assert "Order: connect, alloc_memory, exchange_keys, establish_channel, set_message_sizes, start" in str(info.value)
    ctl.connect()
    ctl.alloc_memory()
    ctl.exchange_keys()
    ctl.establish_channel()
    with pytest.raises(LifecycleError, match="coprocessor call"):
        ctl.set_coprocessor_fn(echo())
    with pytest.raises(LifecycleError):
        ctl.round(b"x")  # not started
    with pytest.raises(LifecycleError, match="coprocessor call"):
        ctl.serve_pending()
    ctl.set_message_sizes(8, 8)
    ctl.start()
    with pytest.raises(LifecycleError, match="nothing staged"):
        ctl.post()
    assert ctl.round(b"ok") == b"ok"


def test_set_message_sizes_limits(pairs):
    key = pairs.key()
    pairs.coprocessor(key, "slot_bytes=128")
    ctl = pairs.session("controller", key)
    for step in ("connect", "alloc_memory", "exchange_keys", "establish_channel"):
        getattr(ctl, step)()
    with pytest.raises(PayloadTooLargeError, match="96"):
        ctl.set_message_sizes(97, 8)
    with pytest.raises(PayloadTooLargeError):
        ctl.set_message_sizes(8, 97)
    with pytest.raises(PayloadTooLargeError):
        ctl.set_message_sizes(0, 8)
    ctl.set_message_sizes(96, 96)
    ctl.start()
    assert ctl.round(bytes(range(96))) == bytes(range(96))


def test_stage_larger_than_in_bytes(pairs):
    _, _, ctl = pairs.pair(in_bytes=8, out_bytes=8)
    with pytest.raises(PayloadTooLargeError) as info:
        ctl.stage_payload(b"123456789")
    assert "9 bytes" in str(info.value) and "8" in str(info.value)
    assert ctl.round(b"12345678") == b"12345678"


def test_reply_larger_than_out_bytes(pairs):
    _, _, ctl = pairs.pair(in_bytes=16, out_bytes=4)
    with pytest.raises(PayloadTooLargeError, match="out_bytes=4"):
        ctl.round(b"12345")
    assert ctl.round(b"1234") == b"1234"


def test_unknown_decoder_id(pairs):
    _, _, ctl = pairs.pair()
    with pytest.raises(UnknownDecoderError) as info:
        ctl.round(b"x", decoder_id=7)
    assert "decoder_id 7" in str(info.value)
    with pytest.raises(InvalidArgumentError, match="256"):
        ctl.stage_payload(b"x", decoder_id=256)
    assert ctl.round(b"y") == b"y"


def test_decoder_id_bound_beyond_the_table(pairs):
    cop = pairs.coprocessor(pairs.key(), functions=False)
    with pytest.raises(InvalidArgumentError, match="256"):
        cop.set_coprocessor_fn(echo(), decoder_ids=[256])


def test_ring_full_and_in_order_collection(pairs):
    _, _, ctl = pairs.pair(cop_config="slots=4")
    for i in range(4):
        ctl.stage_payload(bytes([i]) * (i + 1))
        ctl.post()
    with pytest.raises(RingFullError, match="4 slots"):
        ctl.stage_payload(b"x")
    assert ctl.collect() == b"\x00"
    ctl.stage_payload(b"\x04" * 5)  # one slot free again
    ctl.post()
    with pytest.raises(RingFullError):
        ctl.stage_payload(b"x")
    assert [ctl.collect() for _ in range(4)] == [bytes([i]) * (i + 1) for i in range(1, 5)]
    with pytest.raises(NothingPostedError):
        ctl.collect()


def test_collect_with_nothing_in_flight(pairs):
    _, _, ctl = pairs.pair()
    with pytest.raises(NothingPostedError, match="no round is in flight"):
        ctl.collect()
    with pytest.raises(NothingPostedError):
        ctl.reply_slot()
    ctl.round(b"a")
    with pytest.raises(NothingPostedError):
        ctl.collect()


def test_manual_serving_and_deadline(pairs, stub_backend):
    _, cop, ctl = pairs.pair(ctl_config="timeout_ms=30")
    stub_backend.lib.tb_set_auto_deliver(0)
    for p in (b"a", b"bb", b"ccc"):
        ctl.stage_payload(p)
        ctl.post()
    assert cop.serve_pending() == 3
    assert cop.serve_pending() == 0
    assert [ctl.collect() for _ in range(3)] == [b"a", b"bb", b"ccc"]
    ctl.stage_payload(b"lost")
    ctl.post()
    with pytest.raises(DeadlineError, match="round 4"):
        ctl.collect()
    with pytest.raises(NothingPostedError):
        ctl.collect()  # the lost round is not waited on again
    stub_backend.lib.tb_set_auto_deliver(1)
    assert ctl.round(b"next") == b"next"  # round 5; round 4's late answer is skipped


def test_dead_coprocessor(pairs):
    _, cop, ctl = pairs.pair()
    assert ctl.round(b"x") == b"x"
    cop.destroy()
    with pytest.raises(PeerError):
        ctl.round(b"y")


def test_deliver_failure_keeps_the_backend_reason(pairs):
    # bl_post formats bl_last_error() (the reason the deliver hook left) into the very
    # thread-local buffer it is formatting: the reason must survive, once.
    key = pairs.key()
    pairs.coprocessor(key, functions=False)  # channel up, never started: serve_pending fails
    ctl = pairs.controller(key)
    with pytest.raises(LifecycleError) as info:
        ctl.round(b"x")
    text = str(info.value)
    assert text.count("could not deliver round 1") == 1, text
    assert "serve (coprocessor" in text, text


def test_dead_coprocessor_message_is_not_garbled(pairs):
    _, cop, ctl = pairs.pair()
    cop.destroy()
    assert lib.bl_session_get(0, b"unrelated-earlier-failure") == ffi.NULL  # leaves a last error behind
    with pytest.raises(PeerError) as info:
        ctl.round(b"y")
    text = str(info.value)
    assert text.count("could not deliver round") == 1, text
    assert "unrelated-earlier-failure" not in text, text


def test_registry_and_duplicate_keys(pairs):
    key = pairs.key()
    cop = pairs.session("coprocessor", key)
    assert lib.bl_session_get(1, key.encode()) == cop._s
    assert lib.bl_session_get(0, key.encode()) == ffi.NULL
    with pytest.raises(KeyTakenError, match=key):
        Session(pairs.backend.path, "coprocessor", key)
    ctl = pairs.session("controller", key)  # the other role may share the key
    assert lib.bl_session_get(0, key.encode()) == ctl._s
    with pytest.raises(KeyTakenError):
        Session(pairs.backend.path, "controller", key)
    cop.destroy()
    assert lib.bl_session_get(1, key.encode()) == ffi.NULL
    again = pairs.session("coprocessor", key)  # the key is free after destroy
    assert lib.bl_session_get(1, key.encode()) == again._s


def test_controller_cannot_override_the_ring_geometry(pairs):
    key = pairs.key()
    pairs.coprocessor(key, "slots=8")
    ctl = pairs.session("controller", key, "slots=16")
    for step in ("connect", "alloc_memory", "exchange_keys"):
        getattr(ctl, step)()
    with pytest.raises(InvalidArgumentError, match="slots=16"):
        ctl.establish_channel()
    fresh = pairs.session("controller", pairs.key())
    assert fresh.geometry["slots"] == 64  # before the channel: the configured default


def test_controller_adopts_the_coprocessor_geometry(pairs):
    _, cop, ctl = pairs.pair(cop_config="slots=8;slot_bytes=512", in_bytes=480, out_bytes=480)
    assert ctl.geometry == {"slots": 8, "slot_bytes": 512, "in_bytes": 480, "out_bytes": 480}
    assert cop.geometry["slots"] == 8 and cop.geometry["slot_bytes"] == 512
    assert ctl.round(bytes(480)) == bytes(480)


def test_controller_matching_explicit_geometry(pairs):
    key = pairs.key()
    pairs.coprocessor(key, "slots=8;slot_bytes=128")
    ctl = pairs.controller(key, "slots=8;slot_bytes=128", in_bytes=96, out_bytes=96)
    assert ctl.round(b"z") == b"z"


def test_controller_pinning_only_slots_is_compared_on_slots_only(pairs):
    # The controller says slots=8 and nothing about slot_bytes; the coprocessor's ring
    # has 8 slots of 512 bytes. establish_channel compares both values whenever either
    # key is given, so the unset slot_bytes is compared as its default 256 and fails
    # with "asked for slots=8 slot_bytes=256".
    key = pairs.key()
    pairs.coprocessor(key, "slots=8;slot_bytes=512")
    ctl = pairs.controller(key, "slots=8", in_bytes=480, out_bytes=480)
    assert ctl.geometry["slot_bytes"] == 512


def test_controller_without_coprocessor(pairs):
    ctl = pairs.session("controller", pairs.key(), "connect_timeout_ms=10")
    with pytest.raises(DeadlineError, match="no coprocessor"):
        ctl.connect()


def test_destroy_twice_and_raw_pointer_teardown(pairs):
    key, cop, ctl = pairs.pair()
    raw_ctl, raw_cop = ctl._s, cop._s
    ctl.destroy()
    ctl.destroy()
    cop.destroy()
    cop.destroy()
    assert lib.bl_destroy(raw_ctl) == 0
    assert lib.bl_stop(raw_ctl) == 0
    assert lib.bl_destroy(raw_cop) == 0
    assert lib.bl_stop(raw_cop) == 0
    assert lib.bl_destroy(ffi.NULL) == 0
    assert lib.bl_stop(ffi.NULL) == 0
    assert lib.bl_session_get(0, key.encode()) == ffi.NULL
    for call in (lambda: ctl.stage_payload(b"x"), ctl.collect, cop.serve_pending, ctl.connect):
        with pytest.raises(TransportError, match="destroyed") as info:
            call()
        assert (info.value.code, info.value.status) == (-2, "BL_ESTATE")
    with pytest.raises(InvalidArgumentError, match="not a live session"):
        check(lib.bl_connect(ffi.NULL))


def test_destroyed_session_error_is_a_lifecycle_error(pairs):
    # Session._handle raises TransportError(code=-2, status="BL_ESTATE"), but BL_ESTATE
    # maps to LifecycleError everywhere else (errors.STATUS, from_status).
    _, _, ctl = pairs.pair()
    ctl.destroy()
    with pytest.raises(LifecycleError, match="destroyed"):
        ctl.stage_payload(b"x")


def test_round_after_destroy_raises_the_destroyed_error(pairs):
    # Session.round/round_into pass self._s (None after destroy) straight to bl_round;
    # every other method reports "... was destroyed" through _handle().
    _, _, ctl = pairs.pair()
    assert ctl.round(b"x") == b"x"
    ctl.destroy()
    with pytest.raises(TransportError, match="destroyed"):
        ctl.round(b"x")


def test_context_manager_destroys(pairs, stub_backend):
    key = pairs.key()
    with Session(stub_backend.path, "coprocessor", key) as s:
        assert lib.bl_session_get(1, key.encode()) == s._s
    assert lib.bl_session_get(1, key.encode()) == ffi.NULL
    assert "destroyed" in repr(s)
