"""inject-transport-session and lower-decode-to-transport, driven from Python; and a
third-party pass found through the ``backline.passes`` entry point and scheduled by name."""

from __future__ import annotations

import ctypes
import operator
import re
import shutil
import subprocess
import sys
import textwrap
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from backline_compiler import pipeline
from backline_compiler.dialects import bqec
from backline_compiler.dialects import transport as t
from backline_compiler.dialects.bqec import TannerAttr
from backline_compiler.passes.inject_transport_session import (
    MESSAGE_SIZES_ATTR,
    PLACEMENT_ATTR,
    SETUP,
    TEARDOWN,
    InjectTransportSession,
)
from backline_compiler.passes.lower_decode_to_transport import LowerDecodeToTransport
from xdsl.dialects import llvm
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    IntegerAttr,
    ModuleOp,
    i32,
    i64,
)
from xdsl.ir import Block, Operation, Region
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import DiagnosticException, PassFailedException

from backline_core import (
    Controller,
    Coprocessor,
    CoprocessorFunction,
    Pass,
    Placement,
    PluginError,
    UnknownPluginError,
    get_library,
    hookimpl,
    plugins,
    resolve,
)

BOTH = "inject-transport-session,lower-decode-to-transport"
PTR = llvm.LLVMPointerType()
#: The Steane code's H (3x7): 1 syndrome byte, 1 correction byte.
STEANE = TannerAttr.from_matrix([[0, 0, 0, 1, 1, 1, 1], [0, 1, 1, 0, 0, 1, 1], [1, 0, 1, 0, 1, 0, 1]])
#: A 9x13 H: 2 syndrome bytes, 2 correction bytes.
WIDE = TannerAttr.from_matrix([[(r * 13 + c) % 3 == 0 for c in range(13)] for r in range(9)])


# -- helpers ------------------------------------------------------------------------------


def placement(*coprocessors: Coprocessor, controller: Controller | None = None) -> Placement:
    return Placement(controller=controller or Controller(), coprocessors=list(coprocessors))


def module(p: Placement | None, decodes: list[tuple[str, str | None]] = (), tanner: TannerAttr = STEANE,
           attributes: dict | None = None) -> ModuleOp:
    """``llvm.func @kernel(%syn, %corr) -> i32`` holding one bqec.decode per (check_type, coprocessor)."""
    block = Block(arg_types=[PTR, PTR])
    syn, corr = block.args
    for check_type, coprocessor in decodes:
        block.add_op(bqec.DecodeOp(syn, corr, tanner, check_type, coprocessor))
    status = t.TakeStatusOp()
    block.add_ops([status, llvm.ReturnOp(status.status)])
    kernel = llvm.FuncOp("kernel", llvm.LLVMFunctionType([PTR, PTR], i32), linkage=llvm.LinkageAttr("external"),
                         body=Region(block))
    attrs = dict(attributes or {})
    if p is not None:
        attrs[PLACEMENT_ATTR] = t.BacklineAttr.from_placement(p)
    m = ModuleOp([kernel], attributes=attrs)
    m.verify()
    return m


def function(m: ModuleOp, name: str) -> llvm.FuncOp:
    found = [op for op in m.ops if isinstance(op, llvm.FuncOp) and op.sym_name.data == name]
    assert len(found) == 1, f"expected one @{name}, found {len(found)}"
    return found[0]


def ops_of(root: Operation, cls: type[Operation]) -> list:
    return [op for op in root.walk() if isinstance(op, cls)]


def role_keys(root: Operation, cls: type[Operation]) -> list[tuple[str, str]]:
    return [(op.session.type.role_name, op.key.data) for op in ops_of(root, cls)]


def names(root: Operation) -> Counter:
    return Counter(op.name for op in root.walk())


def text(m: ModuleOp) -> str:
    return pipeline.print_module(m)


THREAD = Coprocessor(name="xdec", coprocessor_fn="steane", runs_in="thread")
PROCESS = Coprocessor(name="zdec", coprocessor_fn="echo", runs_in="process")


# -- both passes --------------------------------------------------------------------------


def test_both_passes_build_sessions_and_rounds() -> None:
    p = placement(THREAD, PROCESS)
    m = module(p, [("x", None), ("z", None), ("x", None), ("z", "xdec")], tanner=WIDE)
    pipeline.run(m, pipeline.from_spec(BOTH))
    m.verify()

    setup, teardown, kernel = function(m, SETUP), function(m, TEARDOWN), function(m, "kernel")
    for fn in (setup, teardown):
        assert fn.function_type == llvm.LLVMFunctionType([], i32)
        assert fn.linkage.linkage.data == "external"
        ret = fn.body.blocks.last.last_op
        assert isinstance(ret, llvm.ReturnOp) and isinstance(ret.arg.owner, t.TakeStatusOp)

    # setup: xdec's coprocessor (co-located) before its controller; zdec's controller only
    assert role_keys(setup, t.CreateOp) == [("coprocessor", "xdec"), ("controller", "xdec"), ("controller", "zdec")]
    res = resolve(p)
    for create in ops_of(setup, t.CreateOp):
        role, key = create.session.type.role_name, create.key.data
        node = res.controller if role == "controller" else res.coprocessor(key)
        assert create.transport.data == "memcpy"
        assert create.backend_lib.data == node.library
        assert create.hardware.data == "cpu"
        assert create.config.data == ""
        # a coprocessor's own place; a controller expects its coprocessor there
        assert create.runs_in.data == res.coprocessor(key).runs_in == {"xdec": "thread", "zdec": "process"}[key]
    counts = names(setup)
    assert counts["transport.connect_async"] == counts["transport.exchange_keys_async"] == 1
    assert counts["transport.await"] == 2
    assert counts["transport.connect"] == counts["transport.exchange_keys"] == 2  # the controllers
    assert counts["transport.establish_channel"] == 3 and counts["transport.start"] == 3
    fns = ops_of(setup, t.SetCoprocessorFnOp)
    assert [(f.symbol.data, f.library.data, f.decoder_id.value.data) for f in fns] == [
        ("bl_fn_steane", get_library(), 0),
        ("bl_fn_steane", get_library(), 1),
    ]
    assert all(f.init_symbol is None and f.context is None for f in fns)
    sizes = ops_of(setup, t.SetMessageSizesOp)
    assert [(s.in_bytes.value.data, s.out_bytes.value.data) for s in sizes] == [(8, 8), (8, 8)]

    # teardown: per key, controller then co-located coprocessor
    assert role_keys(teardown, t.GetSessionOp) == [("controller", "xdec"), ("coprocessor", "xdec"), ("controller", "zdec")]
    assert names(teardown)["transport.stop"] == names(teardown)["transport.destroy"] == 3

    # rounds: round-robin over (xdec, zdec), the pinned 4th decode to xdec
    assert not ops_of(m, bqec.DecodeOp)
    assert role_keys(kernel, t.GetSessionOp) == [("controller", k) for k in ("xdec", "zdec", "xdec", "xdec")]
    stages = ops_of(kernel, t.StagePayloadOp)
    assert [s.decoder_id.value.data for s in stages] == [0, 1, 0, 1]
    for stage in stages:
        assert stage.length.owner.value == IntegerAttr(WIDE.syndrome_bytes, i32) == IntegerAttr(2, i32)
        assert stage.payload is kernel.body.blocks.first.args[0]
    collects = ops_of(kernel, t.CollectOp)
    assert len(collects) == len(ops_of(kernel, t.PostOp)) == 4
    for collect in collects:
        assert collect.capacity.owner.value == IntegerAttr(WIDE.correction_bytes, i32)
        assert collect.buffer is kernel.body.blocks.first.args[1]


def test_options_from_the_spec() -> None:
    m = module(placement(THREAD, PROCESS), [("z", None), ("x", None), ("x", None)])
    pipeline.run(m, pipeline.from_spec("inject-transport-session{in-bytes=32 out-bytes=16},lower-decode-to-transport{policy=by-check-type}"))
    sizes = ops_of(function(m, SETUP), t.SetMessageSizesOp)
    assert {(s.in_bytes.value.data, s.out_bytes.value.data) for s in sizes} == {(32, 16)}
    assert [k for _, k in role_keys(function(m, "kernel"), t.GetSessionOp)] == ["zdec", "xdec", "xdec"]


def test_message_sizes_attribute_overrides_one_key() -> None:
    sizes = DictionaryAttr({"zdec": ArrayAttr([IntegerAttr(64, i64), IntegerAttr(2, i64)])})
    m = module(placement(THREAD, PROCESS), attributes={MESSAGE_SIZES_ATTR: sizes})
    InjectTransportSession(in_bytes=4).apply(pipeline.context(), m)
    m.verify()
    got = {op.session.owner.key.data: (op.in_bytes.value.data, op.out_bytes.value.data)
           for op in ops_of(m, t.SetMessageSizesOp)}
    assert got == {"xdec": (4, 8), "zdec": (64, 2)}


LUT_C = """
#include <stdint.h>
int32_t lut_decode(void *ctx, uint32_t id, const uint8_t *in, uint32_t n, uint8_t *out, uint32_t cap,
                   uint32_t *len) { (void)ctx; (void)id; (void)in; (void)n; (void)out; (void)cap; *len = 0; return 0; }
int32_t lut_init(const uint8_t *params, uint64_t len, void **ctx) { (void)params; (void)len; *ctx = 0; return 0; }
void lut_fini(void *ctx) { (void)ctx; }
"""


def test_native_function_with_context_and_hooks(tmp_path: Path) -> None:
    # resolution loads every symbol, so the library must exist
    cc = shutil.which("gcc") or shutil.which("cc")
    assert cc is not None, "no C compiler on PATH (gcc or cc); install one (apt-get install gcc)"
    (tmp_path / "lut.c").write_text(LUT_C)
    lib = str(tmp_path / "liblut.so")
    subprocess.run([cc, "-shared", "-fPIC", "-o", lib, str(tmp_path / "lut.c")], check=True)
    fn = CoprocessorFunction(name="lut", library=lib, symbol="lut_decode", decoder_ids=(3,),
                             context=b"\x00\xff", init_symbol="lut_init", fini_symbol="lut_fini")
    m = module(placement(Coprocessor(name="lut", coprocessor_fn=fn)))
    pipeline.run(m, pipeline.from_spec("inject-transport-session"))
    (op,) = ops_of(m, t.SetCoprocessorFnOp)
    assert (op.symbol.data, op.library.data, op.decoder_id.value.data) == ("lut_decode", lib, 3)
    assert (op.init_symbol.data, op.fini_symbol.data, op.context.data) == ("lut_init", "lut_fini", "00ff")


def test_inject_is_idempotent() -> None:
    m = module(placement(THREAD, PROCESS), [("x", None)])
    pipeline.run(m, pipeline.from_spec("inject-transport-session"))
    once = text(m)
    pipeline.run(m, pipeline.from_spec("inject-transport-session"))
    assert text(m) == once
    again = pipeline.parse(once)  # also after a round trip through text
    pipeline.run(again, pipeline.from_spec("inject-transport-session"))
    assert text(again) == once


def test_inject_adds_only_a_new_coprocessor() -> None:
    m = module(placement(THREAD))
    pipeline.run(m, pipeline.from_spec("inject-transport-session"))
    m.attributes[PLACEMENT_ATTR] = t.BacklineAttr.from_placement(placement(THREAD, PROCESS))
    pipeline.run(m, pipeline.from_spec("inject-transport-session"))
    assert sorted(role_keys(function(m, SETUP), t.CreateOp)) == [
        ("controller", "xdec"), ("controller", "zdec"), ("coprocessor", "xdec")]
    assert len(role_keys(function(m, TEARDOWN), t.GetSessionOp)) == 3


# -- no-ops -------------------------------------------------------------------------------


def test_no_placement_is_a_no_op() -> None:
    m = module(None, [("x", None)])
    before = text(m)
    pipeline.run(m, pipeline.from_spec(BOTH))
    assert text(m) == before


def test_no_coprocessors_keeps_decodes_local() -> None:
    m = module(placement(), [("x", None), ("z", None)])
    before = text(m)
    pipeline.run(m, pipeline.from_spec("lower-decode-to-transport{policy=by-check-type}"))
    assert text(m) == before
    pipeline.run(m, pipeline.from_spec(BOTH))
    assert len(ops_of(m, bqec.DecodeOp)) == 2 and not ops_of(m, t.CreateOp)


# -- errors -------------------------------------------------------------------------------


def test_python_callable_coprocessor_is_an_error() -> None:
    fn = CoprocessorFunction(name="neg", python=operator.neg)
    m = module(placement(Coprocessor(name="py", coprocessor_fn=fn)))
    before = text(m)
    with pytest.raises(PassFailedException, match="compiled code cannot bind a Python function") as exc:
        pipeline.run(m, pipeline.from_spec("inject-transport-session"))
    assert "'py'" in str(exc.value) and "native decoder" in str(exc.value)
    assert text(m) == before  # checked before anything changed
    # served out of the program, the same node is fine: only the controller side is emitted
    m = module(placement(Coprocessor(name="py", coprocessor_fn=fn, runs_in="process")))
    pipeline.run(m, pipeline.from_spec("inject-transport-session"))
    assert role_keys(m, t.CreateOp) == [("controller", "py")]


def test_unknown_coprocessor_is_an_error_and_changes_nothing() -> None:
    m = module(placement(THREAD, PROCESS), [("x", None), ("z", "nope")])
    before = text(m)
    with pytest.raises(PassFailedException, match=r"names coprocessor 'nope'.*coprocessors: 'xdec', 'zdec'"):
        pipeline.run(m, pipeline.from_spec("lower-decode-to-transport"))
    assert text(m) == before


def test_by_check_type_needs_two_coprocessors() -> None:
    m = module(placement(THREAD), [("z", None)])
    with pytest.raises(PassFailedException, match="only 1 \\('xdec'\\)"):
        pipeline.run(m, pipeline.from_spec("lower-decode-to-transport{policy=by-check-type}"))
    # ... unless every decode names its coprocessor
    m = module(placement(THREAD), [("z", "xdec")])
    pipeline.run(m, pipeline.from_spec("lower-decode-to-transport{policy=by-check-type}"))
    assert role_keys(m, t.GetSessionOp) == [("controller", "xdec")]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("lower-decode-to-transport{policy=nearest}", "unknown policy 'nearest'"),
        ("inject-transport-session{in-bytes=0}", "option in-bytes must be positive"),
    ],
)
def test_bad_options(spec: str, message: str) -> None:
    with pytest.raises(DiagnosticException, match=message):
        pipeline.run(module(placement(THREAD), [("x", None)]), pipeline.from_spec(spec))


@pytest.mark.defect("one module's placement was re-validated against the plugins four times per compile")
def test_one_resolution_per_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    # A placement value not resolved before; every pass that needs plugin facts resolves it,
    # and the core's cache makes that one resolution: one backend lookup per node.
    lookups = []
    real = plugins.transport_backend

    def counting(name: str, hardware: str, role: str):
        lookups.append((name, hardware, role))
        return real(name, hardware, role)

    monkeypatch.setattr(plugins, "transport_backend", counting)
    key = f"once-{uuid.uuid4().hex[:8]}"
    m = module(placement(Coprocessor(name=key, coprocessor_fn="echo"), PROCESS), [("x", None), ("z", None)])
    pipeline.run(m, pipeline.from_spec(BOTH + ",convert-bqec-to-llvm,convert-transport-to-llvm"))
    assert sorted(lookups) == [("memcpy", "cpu", "controller"), ("memcpy", "cpu", "coprocessor"),
                               ("memcpy", "cpu", "coprocessor")]


def test_resolution_errors_stop_the_passes() -> None:
    m = module(placement(Coprocessor(name="dec", coprocessor_fn="no-such-decoder")), [("x", None)])
    for spec in ("inject-transport-session", "lower-decode-to-transport"):
        with pytest.raises(PassFailedException, match=f"^{spec}: .*no-such-decoder"):
            pipeline.run(m, pipeline.from_spec(spec))


def test_pass_classes_are_the_registered_ones() -> None:
    passes = pipeline.available_passes()
    assert passes["inject-transport-session"]() is InjectTransportSession
    assert passes["lower-decode-to-transport"]() is LowerDecodeToTransport


# -- end to end: lowered to LLVM and run against the runtime --------------------------------


def test_compiled_setup_round_teardown() -> None:
    from backline_compiler import codegen

    key = "its-e2e"
    m = module(placement(Coprocessor(name=key, coprocessor_fn="echo")), [("x", None), ("z", None)])
    pipeline.run(m, pipeline.from_spec(BOTH + ",convert-transport-to-llvm"))
    program = codegen.JitProgram(m)
    setup = program.function(SETUP, "int32")
    teardown = program.function(TEARDOWN, "int32")
    kernel = program.function("kernel", "int32", "ptr", "ptr")
    assert setup() == 0
    try:
        syn = (ctypes.c_uint8 * 1)(0b101)
        corr = (ctypes.c_uint8 * 1)(0)
        assert kernel(ctypes.addressof(syn), ctypes.addressof(corr)) == 0
        assert corr[0] == 0b101  # echo: the reply is the syndrome
    finally:
        assert teardown() == 0


# -- a third-party pass, installed and scheduled by name -----------------------------------

EXAMPLE_DIST = "backline-example-pass"
#: the "Writing a pass" example of the compiler's documentation: these tests install and run it
DOCS = Path(__file__).resolve().parents[2] / "docs" / "compiler.md"
_EXAMPLE_BLOCK = re.compile(r"<!-- example-(file: (?P<path>\S+)|run) -->\n```\w*\n(?P<body>.*?)```", re.DOTALL)


def doc_example() -> tuple[dict[str, str], str]:
    """The example's files (path -> text) and the Python snippet that uses it."""
    files, runs = {}, []
    for m in _EXAMPLE_BLOCK.finditer(DOCS.read_text()):
        if m["path"]:
            files[m["path"]] = m["body"]
        else:
            runs.append(m["body"])
    assert set(files) == {"pyproject.toml", "backline_example_pass.py"} and len(runs) == 1, (sorted(files), runs)
    return files, runs[0]


def _pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          check=False, capture_output=True, text=True, timeout=300)


@pytest.fixture
def example_pass(tmp_path: Path):
    src = tmp_path / "backline-example-pass"
    src.mkdir()
    for name, text in doc_example()[0].items():
        (src / name).write_text(text)
    try:
        proc = _pip("install", "--no-build-isolation", "--no-index", "--no-deps", str(src))
        assert proc.returncode == 0, f"pip install failed:\n{proc.stdout}\n{proc.stderr}"
        yield
    finally:
        _pip("uninstall", "-y", EXAMPLE_DIST)


def _opt(*args: str) -> subprocess.CompletedProcess:
    # a fresh interpreter: entry points are read at start-up
    return subprocess.run([sys.executable, "-m", "backline_compiler.opt", *args],
                          check=False, capture_output=True, text=True, timeout=300)


def test_third_party_pass_through_the_entry_point(example_pass: None, tmp_path: Path) -> None:
    source = tmp_path / "three.mlir"
    source.write_text(textwrap.dedent("""\
        func.func @f(%s: !llvm.ptr, %c: !llvm.ptr) {
          bqec.decode %s, %c {check_type = "x", tanner = #bqec.tanner<3x7, "787315">}
          bqec.decode %s, %c {check_type = "z", tanner = #bqec.tanner<3x7, "787315">}
          bqec.decode %s, %c {check_type = "x", tanner = #bqec.tanner<3x7, "787315">}
          func.return
        }
        """))
    listed = _opt("--list-passes")
    assert listed.returncode == 0 and "count-decodes" in listed.stdout.split(), listed.stdout + listed.stderr

    proc = _opt(str(source), "-p", "count-decodes")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "example.decodes = 3 : i64" in proc.stdout

    # scheduled among the compiler's own passes, in the order the spec gives
    placed = source.with_name("placed.mlir")
    p = placement(Coprocessor(name="dec", coprocessor_fn="steane"))
    placed.write_text(f"module attributes {{{PLACEMENT_ATTR} = {t.BacklineAttr.from_placement(p)}}} {{\n"
                      + source.read_text() + "}\n")
    before = _opt(str(placed), "-p", "count-decodes,lower-decode-to-transport")
    after = _opt(str(placed), "-p", "lower-decode-to-transport,count-decodes")
    assert before.returncode == after.returncode == 0, before.stderr + after.stderr
    assert "example.decodes = 3 : i64" in before.stdout and "transport.post" in before.stdout
    assert "example.decodes = 0 : i64" in after.stdout


def test_the_documented_pass_example_runs(example_pass: None) -> None:
    # a fresh interpreter: entry points are read at start-up
    proc = subprocess.run([sys.executable, "-c", doc_example()[1]], check=False, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_pass_class_must_carry_its_records_name() -> None:
    @dataclass(frozen=True)
    class Misnamed(ModulePass):
        name = "not-the-record"

        def apply(self, ctx, op) -> None:
            pass

    class Plugin:
        @hookimpl
        def backline_passes(self) -> list[Pass]:
            return [Pass(name="misnamed-test-pass", summary="a record whose class has another name",
                         load=lambda: Misnamed)]

    plugin = Plugin()
    plugins.register(plugin, name="misnamed-test-pass")
    try:
        with pytest.raises(PluginError, match="its class .*Misnamed is named 'not-the-record'; set name = "
                                              "'misnamed-test-pass'"):
            pipeline.make("misnamed-test-pass")
    finally:
        plugins.unregister(plugin)


def test_an_unknown_pass_is_an_unknown_plugin_error() -> None:
    with pytest.raises(UnknownPluginError, match="(?s)unknown pass .no-such-pass.. Installed passes:.*inject-noise"):
        pipeline.from_spec("inject-noise,no-such-pass")
    with pytest.raises(UnknownPluginError):
        pipeline.make("no-such-pass")
    with pytest.raises(TypeError, match=r"pass 'inject-noise' has no options \['q'\]; its options: p"):
        pipeline.make("inject-noise", q=1)
    with pytest.raises(ValueError, match="pass pipeline 'inject-noise{'"):
        pipeline.from_spec("inject-noise{")
    with pytest.raises(TypeError, match="sequence of ModulePass instances"):
        pipeline.run(pipeline.parse("builtin.module {}"), "inject-noise")


def test_third_party_pass_is_gone_after_uninstall() -> None:
    listed = _opt("--list-passes")
    assert "count-decodes" not in listed.stdout.split()


def test_existing_setup_returning_its_own_value() -> None:
    m = pipeline.parse(f"""
    module attributes {{{PLACEMENT_ATTR} = {t.BacklineAttr.from_placement(placement(THREAD))}}} {{
      llvm.func @backline_setup() -> i32 {{
        %mine = llvm.mlir.constant(7 : i32) : i32
        llvm.return %mine : i32
      }}
    }}""")
    pipeline.run(m, pipeline.from_spec("inject-transport-session"))
    setup = function(m, SETUP)
    assert isinstance(setup.body.blocks.first.first_op, t.CreateOp)  # prepended
    ret = setup.body.blocks.first.last_op
    select = ret.arg.owner
    assert isinstance(select, llvm.SelectOp) and isinstance(select.rhs.owner, t.TakeStatusOp)
    assert select.lhs.owner.value == IntegerAttr(7, i32)
    # a coprocessor added later is brought up without wrapping the return again
    m.attributes[PLACEMENT_ATTR] = t.BacklineAttr.from_placement(placement(THREAD, PROCESS))
    pipeline.run(m, pipeline.from_spec("inject-transport-session"))
    assert len(ops_of(setup, llvm.SelectOp)) == 1 and len(ops_of(setup, t.TakeStatusOp)) == 1
    assert role_keys(setup, t.CreateOp)[0] == ("controller", "zdec")
