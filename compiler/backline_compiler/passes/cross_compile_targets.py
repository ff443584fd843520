"""``cross-compile-targets``: each target module becomes an object file for its triple.

A *target module* is a ``builtin.module`` directly inside the top-level module that carries
the attribute ``backline.target``, a dictionary::

    builtin.module @decoder attributes {backline.target = {
        name = "decoder",                       // required: unique, names the object file
        triple = "aarch64-unknown-linux-gnu",   // optional: default is the host's triple
        address = "decoder-host:9000"           // optional: executor host:port (dispatched)
    }} {
      llvm.func @decode(%x: i64) -> i64 { ... }
    }

It holds the code of one node, in the llvm dialect (``llvm.func`` and ``llvm.mlir.global``
only). A target with an ``address`` runs in an executor process and is dispatched to it by
``dispatch-executor-targets``; one without runs in the compiling process and is linked in.

The pass, for every target module that has no ``backline.object_file`` yet:

1. clones it into a standalone module and writes ``<workspace>/<name>.<triple>.o`` with
   :func:`backline_compiler.codegen.emit_object`;
2. records the path on the nested module as ``backline.object_file = "..."``;
3. reduces the nested module to external declarations (``llvm.func`` without a body, same
   signature) of the functions the object exports -- every defined function whose linkage
   is not ``internal``/``private``. Globals, private functions and the target's own
   external declarations are dropped: they are not entry points.

The workspace is the pass option ``workspace``; when it is empty the module attribute
``backline.workspace`` (from an earlier run) is used, and failing that a fresh temporary
directory. The workspace used is recorded in ``backline.workspace`` on the top module.
Target modules that already carry ``backline.object_file`` are left alone, so running the
pass twice is harmless.

Errors (each names the pass and the target): a malformed ``backline.target``, two targets
with the same name (they would write the same object file), a triple LLVM does not know, an
op other than ``llvm.func``/``llvm.mlir.global`` in a target module, and a failure to
translate or compile it.

The host module calls a target function by its plain name, ``llvm.call @decode(...)``, and
declares it at top level (``llvm.func @decode(i64) -> i64``) like any external function:
xDSL resolves ``llvm.call`` callees in the enclosing symbol table only, and its parser does
not accept nested references (``@decoder::@decode``).

This module also holds the helpers the later passes use to read target modules.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass

import llvmlite.binding as llvm_binding
from xdsl.context import Context
from xdsl.dialects import llvm
from xdsl.dialects.builtin import DictionaryAttr, ModuleOp, StringAttr
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from backline_core._errors import PlacementError
from backline_core._placement import Endpoint

from .. import codegen

TARGET_ATTR = "backline.target"
OBJECT_FILE_ATTR = "backline.object_file"
WORKSPACE_ATTR = "backline.workspace"

_TARGET_KEYS = ("name", "triple", "address")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*\Z")
#: linkages whose functions an object file does not export
_LOCAL_LINKAGES = frozenset({"internal", "private"})


@dataclass(frozen=True)
class Target:
    """One validated target module."""

    module: ModuleOp
    name: str
    triple: str
    address: str | None
    object_file: str | None

    @property
    def remote(self) -> bool:
        """Dispatched to an executor (it has an ``address``)."""
        return self.address is not None


def host_triple() -> str:
    return llvm_binding.get_default_triple()


def _fail(pass_name: str, message: str) -> PassFailedException:
    return PassFailedException(f"{pass_name}: {message}")


def _string_field(pass_name: str, where: str, attr: DictionaryAttr, key: str) -> str | None:
    value = attr.data.get(key)
    if value is None:
        return None
    if not isinstance(value, StringAttr):
        raise _fail(pass_name, f"{where}: '{key}' must be a string, got {value}")
    return value.data


def parse_target(pass_name: str, module: ModuleOp) -> Target:
    """Validate ``module``'s ``backline.target`` attribute (it must have one)."""
    attr = module.attributes[TARGET_ATTR]
    where = f"{TARGET_ATTR} on the nested module" + (f" @{module.sym_name.data}" if module.sym_name else "")
    if not isinstance(attr, DictionaryAttr):
        raise _fail(pass_name, f"{where} must be a dictionary {{name = \"...\", triple = \"...\", "
                               f"address = \"host:port\"}}, got {attr}")
    unknown = sorted(set(attr.data) - set(_TARGET_KEYS))
    if unknown:
        raise _fail(pass_name, f"{where} has unknown key(s) {', '.join(unknown)}; the keys are "
                               f"{', '.join(_TARGET_KEYS)}")
    name = _string_field(pass_name, where, attr, "name")
    if name is None:
        raise _fail(pass_name, f"{where} needs a name")
    if not _NAME.match(name):
        raise _fail(pass_name, f"{where}: name {name!r} must match [A-Za-z0-9_][A-Za-z0-9_.+-]* "
                               "(it names the object file)")
    where = f"target '{name}'"
    triple = _string_field(pass_name, where, attr, "triple")
    if triple is not None and not triple:
        raise _fail(pass_name, f"{where}: triple must not be empty (leave it out for the host's)")
    address = _string_field(pass_name, where, attr, "address")
    if address is not None:
        try:
            Endpoint.parse(address)
        except PlacementError as exc:
            raise _fail(pass_name, f"{where}: executor {exc}") from exc
    obj = module.attributes.get(OBJECT_FILE_ATTR)
    if obj is not None and not isinstance(obj, StringAttr):
        raise _fail(pass_name, f"{where}: {OBJECT_FILE_ATTR} must be a string, got {obj}")
    return Target(module, name, triple or host_triple(), address, obj.data if obj is not None else None)


def target_modules(pass_name: str, module: ModuleOp) -> list[Target]:
    """The target modules directly inside ``module``, validated; names must be unique."""
    if TARGET_ATTR in module.attributes:
        raise _fail(pass_name, f"the top-level module carries {TARGET_ATTR}: a target module must be nested in "
                               "the host module (a file holding a single builtin.module makes it the top level; "
                               "wrap it in 'builtin.module { ... }')")
    targets: list[Target] = []
    seen: dict[str, Target] = {}
    for op in module.ops:
        if isinstance(op, ModuleOp) and TARGET_ATTR in op.attributes:
            target = parse_target(pass_name, op)
            if target.name in seen:
                raise _fail(pass_name, f"two target modules are named '{target.name}'; target names must be "
                                       "unique (each names an object file)")
            seen[target.name] = target
            targets.append(target)
    return targets


def check_triple(pass_name: str, target: Target) -> None:
    try:
        llvm_binding.Target.from_triple(target.triple)
    except RuntimeError as exc:
        raise _fail(pass_name, f"target '{target.name}': unknown target triple '{target.triple}' "
                               f"(LLVM: {exc})") from None


def exported_declarations(module: ModuleOp) -> list[llvm.FuncOp]:
    """Body-less copies of the functions ``module`` defines and exports."""
    decls: list[llvm.FuncOp] = []
    for op in module.ops:
        if isinstance(op, llvm.FuncOp) and op.body.blocks and op.linkage.linkage.data not in _LOCAL_LINKAGES:
            decls.append(declaration_of(op))
    return decls


def declaration_of(fn: llvm.FuncOp) -> llvm.FuncOp:
    """An external declaration with ``fn``'s name, signature, calling convention and argument attributes."""
    props = {key: getattr(fn, key) for key in ("arg_attrs", "res_attrs") if getattr(fn, key) is not None}
    return llvm.FuncOp(fn.sym_name.data, fn.function_type, linkage=llvm.LinkageAttr("external"),
                       cconv=fn.CConv, other_props=props)


def _workspace(option: str, module: ModuleOp) -> str:
    if option:
        path = option
    elif isinstance(recorded := module.attributes.get(WORKSPACE_ATTR), StringAttr) and recorded.data:
        path = recorded.data
    else:
        path = tempfile.mkdtemp(prefix="backline-workspace-")
    path = os.path.abspath(path)
    os.makedirs(path, exist_ok=True)
    return path


@dataclass(frozen=True)
class CrossCompileTargets(ModulePass):
    """Write an object file per target module; leave declarations of its functions."""

    name = "cross-compile-targets"

    workspace: str = ""
    """Directory for the object files; empty: ``backline.workspace`` or a fresh temporary one."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        targets = [t for t in target_modules(self.name, op) if t.object_file is None]
        if not targets:
            return
        for target in targets:
            check_triple(self.name, target)
            for inner in target.module.ops:
                if not isinstance(inner, (llvm.FuncOp, llvm.GlobalOp)):
                    raise _fail(self.name, f"target '{target.name}' holds '{inner.name}': a target module holds "
                                           "only llvm.func and llvm.mlir.global (lower it to the llvm dialect first)")
        workspace = _workspace(self.workspace, op)
        op.attributes[WORKSPACE_ATTR] = StringAttr(workspace)
        for target in targets:
            path = os.path.join(workspace, f"{target.name}.{target.triple}.o")
            standalone = ModuleOp([inner.clone() for inner in target.module.ops])
            try:
                codegen.emit_object(standalone, target.triple, path=path)
            except Exception as exc:  # xDSL's translation and LLVM's parser/verifier raise various types
                raise _fail(self.name, f"target '{target.name}' ({target.triple}) did not compile: "
                                       f"{type(exc).__name__}: {exc}") from exc
            decls = exported_declarations(target.module)
            block = target.module.body.block
            for inner in list(block.ops):
                block.erase_op(inner)
            block.add_ops(decls)
            target.module.attributes[OBJECT_FILE_ATTR] = StringAttr(path)
