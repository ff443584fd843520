"""``dispatch-executor-targets``: host calls to remote kernels become executor ops.

Runs after ``cross-compile-targets``. A *remote* target is a target module whose
``backline.target`` has an ``address``; its functions run in the executor process at that
address. In every host function (a top-level ``llvm.func`` or ``func.func`` with a body), each
``llvm.call @f(...)`` where ``@f`` is declared in a remote target module becomes::

    %s = executor.open("decoder-host:9000") : !executor.session          // entry block
    executor.send_binary %s("<ws>/decoder.aarch64-unknown-linux-gnu.o") : !executor.session
    ...
    %r = executor.launch %s("f", "<ws>/decoder...o")(%args) : !executor.session, (i64) -> i64
    ...
    executor.close %s : !executor.session                                 // before each return

Placement of the session ops (one choice, documented here):

* one ``executor.open`` per address per host function, at the start of its entry block, in
  the order the addresses are first called; several targets at one address share it;
* one ``executor.send_binary`` per object file per session, right after the opens, for the
  objects that function launches -- never one per call;
* one ``executor.close`` per session before every ``llvm.return`` / ``func.return`` of the
  function, in the reverse order of the opens. (The executor runtime keeps one connection
  per address and counts opens, so two host functions that both dispatch to one address
  reuse the connection; see ``runtime/executor.h``.)

Calls to functions of targets without an ``address`` are left as they are: that code runs
in the compiling process and is linked in (``convert-executor-to-llvm`` records its object
file). A host-level declaration of a dispatched function (``llvm.func @f(i64) -> i64``) is
erased once no host code refers to it any more.

Errors: a remote target without ``backline.object_file`` (run ``cross-compile-targets``
first); a function name declared by two target modules, or defined both in the host module
and in a target (the call would be ambiguous); a call whose operand or result types differ
from the target's declaration.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import ModuleOp, SymbolRefAttr
from xdsl.ir import Attribute, Block, Operation
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from ..dialects import executor
from .cross_compile_targets import Target, target_modules

_FUNCS = (llvm.FuncOp, func.FuncOp)
_RETURNS = (llvm.ReturnOp, func.ReturnOp)


def _fail(message: str) -> PassFailedException:
    return PassFailedException(f"{DispatchExecutorTargets.name}: {message}")


def _signature(fn: llvm.FuncOp) -> tuple[tuple[Attribute, ...], tuple[Attribute, ...]]:
    ft = fn.function_type
    outputs = () if isinstance(ft.output, llvm.LLVMVoidType) else (ft.output,)
    return tuple(ft.inputs.data), outputs


def target_functions(pass_name: str, targets: list[Target]) -> dict[str, tuple[Target, llvm.FuncOp]]:
    """Function name -> (target, its declaration), for every target module; names are unique."""
    table: dict[str, tuple[Target, llvm.FuncOp]] = {}
    for target in targets:
        for op in target.module.ops:
            if not isinstance(op, llvm.FuncOp):
                continue
            name = op.sym_name.data
            if name in table:
                raise PassFailedException(
                    f"{pass_name}: function @{name} is declared by targets '{table[name][0].name}' and "
                    f"'{target.name}'; a host call to it would be ambiguous")
            table[name] = (target, op)
    return table


def flat_callee(call: llvm.CallOp) -> str | None:
    callee = call.callee
    if callee is None or not isinstance(callee, SymbolRefAttr) or callee.nested_references.data:
        return None
    return callee.root_reference.data


def host_functions(module: ModuleOp) -> list[Operation]:
    return [op for op in module.ops if isinstance(op, _FUNCS) and op.body.blocks]


@dataclass(frozen=True)
class DispatchExecutorTargets(ModulePass):
    """Rewrite host calls to remote target functions into executor open/send_binary/launch/close."""

    name = "dispatch-executor-targets"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        targets = target_modules(self.name, op)
        if not any(t.remote for t in targets):
            return
        for target in targets:
            if target.remote and target.object_file is None:
                raise _fail(f"target '{target.name}' has no backline.object_file: run cross-compile-targets first")
        table = target_functions(self.name, targets)
        hosts = host_functions(op)
        for fn in hosts:
            name = fn.sym_name.data
            if name in table:
                raise _fail(f"function @{name} is defined in the host module and declared by target "
                            f"'{table[name][0].name}'; rename one of them")
        dispatched: set[str] = set()
        for fn in hosts:
            dispatched |= self._dispatch_function(fn, table)
        self._erase_unused_declarations(op, dispatched)

    def _dispatch_function(self, fn: Operation, table: dict[str, tuple[Target, llvm.FuncOp]]) -> set[str]:
        calls: list[tuple[llvm.CallOp, Target, llvm.FuncOp]] = []
        for inner in fn.walk():
            if isinstance(inner, llvm.CallOp) and (callee := flat_callee(inner)) in table:
                target, decl = table[callee]
                if target.remote:
                    self._check_call(fn, inner, target, decl)
                    calls.append((inner, target, decl))
        if not calls:
            return set()

        # Sessions: one per address, opened in first-use order; objects sent once per session.
        addresses: list[str] = []
        objects: list[tuple[str, str]] = []
        for _call, target, _decl in calls:
            assert target.address is not None and target.object_file is not None
            if target.address not in addresses:
                addresses.append(target.address)
            if (target.address, target.object_file) not in objects:
                objects.append((target.address, target.object_file))
        opens = {address: executor.OpenOp(address) for address in addresses}
        sends = [executor.SendBinaryOp(opens[address], obj) for address, obj in objects]
        entry: Block = fn.body.blocks[0]
        prologue: list[Operation] = [*opens.values(), *sends]
        if entry.first_op is None:
            entry.add_ops(prologue)
        else:
            entry.insert_ops_before(prologue, entry.first_op)
        for session in opens.values():
            session.session.name_hint = "session"

        for call, target, decl in calls:
            assert target.address is not None and target.object_file is not None
            outputs = [call.returned.type] if call.returned is not None else []
            launch = executor.LaunchOp(opens[target.address], decl.sym_name.data, target.object_file,
                                       list(call.args), outputs)
            block = call.parent_block()
            assert block is not None
            block.insert_op_before(launch, call)
            if call.returned is not None:
                call.returned.replace_all_uses_with(launch.outputs[0])
                if call.returned.name_hint:
                    launch.outputs[0].name_hint = call.returned.name_hint
            block.erase_op(call)

        for block in fn.body.blocks:
            term = block.last_op
            if isinstance(term, _RETURNS):
                block.insert_ops_before([executor.CloseOp(opens[a]) for a in reversed(addresses)], term)
        return {decl.sym_name.data for _c, _t, decl in calls}

    def _check_call(self, fn: Operation, call: llvm.CallOp, target: Target, decl: llvm.FuncOp) -> None:
        inputs, outputs = _signature(decl)
        got_in = tuple(a.type for a in call.args)
        got_out = (call.returned.type,) if call.returned is not None else ()
        if call.var_callee_type is not None or got_in != inputs or got_out != outputs:
            def text(ins: tuple[Attribute, ...], outs: tuple[Attribute, ...]) -> str:
                return f"({', '.join(map(str, ins))}) -> ({', '.join(map(str, outs))})"

            raise _fail(f"in @{fn.sym_name.data}: the call to @{decl.sym_name.data} has type {text(got_in, got_out)} "
                        f"but target '{target.name}' declares it {text(inputs, outputs)}")

    @staticmethod
    def _erase_unused_declarations(module: ModuleOp, dispatched: set[str]) -> None:
        """Erase the host's declarations of dispatched functions nothing outside target modules names."""
        if not dispatched:
            return
        used: set[str] = set()
        for top in module.ops:
            if isinstance(top, ModuleOp):
                continue
            for inner in top.walk():
                for value in (*inner.properties.values(), *inner.attributes.values()):
                    if isinstance(value, SymbolRefAttr):
                        used.add(value.root_reference.data)
        for top in list(module.ops):
            if (isinstance(top, llvm.FuncOp) and not top.body.blocks and top.sym_name.data in dispatched
                    and top.sym_name.data not in used):
                module.body.block.erase_op(top)
