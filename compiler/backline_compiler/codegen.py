"""Native code from the llvm dialect: xDSL's LLVM backend, then llvmlite.

A module whose ops are all in the llvm dialect (after ``convert-transport-to-llvm`` and
friends) becomes LLVM IR with :func:`to_llvm_ir`; :class:`JitProgram` compiles it in
process with runtime symbols resolved from the core's shared library, and
:func:`emit_object` writes an object file for any target triple LLVM knows.

>>> from backline_compiler import codegen, pipeline
>>> m = pipeline.parse('''
... llvm.func @add(%a: i64, %b: i64) -> i64 {
...   %c = llvm.add %a, %b : i64
...   llvm.return %c : i64
... }''')
>>> prog = codegen.JitProgram(m)
>>> prog.function("add", "int64", "int64", "int64")(40, 2)
42
>>> codegen.emit_object(m, "aarch64-unknown-linux-gnu")[:4]
b'\\x7fELF'
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from typing import Any

import llvmlite.binding as llvm
from xdsl.backend.llvm.convert import convert_module
from xdsl.dialects.builtin import ModuleOp

from backline_core import get_library

llvm.initialize_native_target()
llvm.initialize_native_asmprinter()
llvm.initialize_all_targets()
llvm.initialize_all_asmprinters()

_CTYPES = {
    "void": None, "int8": ctypes.c_int8, "int32": ctypes.c_int32, "int64": ctypes.c_int64,
    "uint32": ctypes.c_uint32, "uint64": ctypes.c_uint64, "ptr": ctypes.c_void_p, "double": ctypes.c_double,
}


def to_llvm_ir(module: ModuleOp, triple: str | None = None) -> str:
    """LLVM IR text of a module in the llvm dialect."""
    return str(convert_module(module, fallback_target_triple=triple))


def _target_machine(triple: str | None, opt: int) -> llvm.TargetMachine:
    target = llvm.Target.from_triple(triple) if triple else llvm.Target.from_default_triple()
    return target.create_target_machine(opt=opt, reloc="pic", codemodel="default")


def _optimize(mod: llvm.ModuleRef, tm: llvm.TargetMachine, level: int) -> None:
    if level <= 0:
        return
    pto = llvm.create_pipeline_tuning_options(speed_level=level)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def compile_ir(ir: str, triple: str | None, opt: int) -> tuple[llvm.ModuleRef, llvm.TargetMachine]:
    mod = llvm.parse_assembly(ir)
    mod.verify()
    tm = _target_machine(triple, opt)
    if triple:
        mod.triple = triple
    _optimize(mod, tm, opt)
    return mod, tm


def emit_object(module: ModuleOp, triple: str, *, opt: int = 2, path: str | None = None) -> bytes:
    """An ELF/Mach-O/COFF object file of ``module`` for ``triple``; written to ``path`` if given."""
    mod, tm = compile_ir(to_llvm_ir(module, triple), triple, opt)
    data = tm.emit_object(mod)
    if path:
        with open(path, "wb") as fh:
            fh.write(data)
    return data


class UnresolvedSymbolError(LookupError):
    """The module calls a function that nothing it is linked against defines."""


def check_resolved(module: ModuleOp, libraries: Sequence[str]) -> None:
    """Raise :class:`UnresolvedSymbolError` for a declared function no loaded library or the
    process defines (MCJIT would bind it to address 0 and the first call would crash)."""
    from xdsl.dialects import llvm as llvm_dialect

    missing = [op.sym_name.data for op in module.ops
               if isinstance(op, llvm_dialect.FuncOp) and not op.body.blocks
               and not llvm.address_of_symbol(op.sym_name.data)]
    if missing:
        raise UnresolvedSymbolError(
            f"the compiled module calls {', '.join(missing)}, defined neither in it nor in "
            f"{', '.join([get_library(), *libraries])} nor in this process; pass the library that defines it"
        )


class JitProgram:
    """A module compiled in this process; external symbols resolve against ``libraries``
    (default: the core's runtime, libbackline) and this process."""

    def __init__(self, module: ModuleOp, *, libraries: Sequence[str] = (), opt: int = 2,
                 keep_intermediate: str | None = None) -> None:
        for lib in (get_library(), *libraries):
            llvm.load_library_permanently(lib)
        links = module.attributes.get("backline.link_objects")
        if links is None:  # symbols of linked objects are not known before linking
            check_resolved(module, libraries)
        ir = to_llvm_ir(module)
        self.ir_module, tm = compile_ir(ir, None, opt)
        if keep_intermediate:
            os.makedirs(keep_intermediate, exist_ok=True)
            with open(os.path.join(keep_intermediate, "program.ll"), "w") as fh:
                fh.write(ir)
            with open(os.path.join(keep_intermediate, "program.opt.ll"), "w") as fh:
                fh.write(str(self.ir_module))
            with open(os.path.join(keep_intermediate, "program.s"), "w") as fh:
                fh.write(tm.emit_assembly(self.ir_module))
        self.engine = llvm.create_mcjit_compiler(self.ir_module, tm)
        # objects of in-process targets (cross-compile-targets records them on the module)
        for path in (links.data if links is not None else ()):
            self.engine.add_object_file(path.data)
        self.engine.finalize_object()
        self._keep: list[Any] = []

    def address(self, name: str) -> int:
        """Address of a compiled function (raise KeyError if the module has none)."""
        addr = self.engine.get_function_address(name)
        if not addr:
            raise KeyError(f"the compiled module has no function {name!r}")
        return addr

    def function(self, name: str, restype: str, *argtypes: str) -> Any:
        """A ctypes callable for ``name``; types are names like "int64", "ptr", "void"."""
        try:
            proto = ctypes.CFUNCTYPE(_CTYPES[restype], *(_CTYPES[a] for a in argtypes))
        except KeyError as exc:
            raise ValueError(f"unknown ctypes type {exc}; choose from {', '.join(_CTYPES)}") from None
        fn = proto(self.address(name))
        self._keep.append(fn)
        return fn
