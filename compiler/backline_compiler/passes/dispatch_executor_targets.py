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

Asynchronous launches. A call carrying the unit attribute ``backline.async`` starts the
function and does not wait; a later call of the same function carrying ``backline.await``
waits for it::

    llvm.call @serve() {backline.async} : () -> i32   ->  %t = executor.launch_async %s("serve", obj)
                                                           (the token is kept in a module global)
    llvm.call @serve() {backline.await} : () -> i32   ->  executor.await %s, %t

The function must have the type ``() -> i32`` (the executor runs it as ``int32_t fn(void)``,
a ``bl_status``); its status is the await's, recorded like every executor status, so the
calls' own ``i32`` results must be unused. The token of each asynchronously launched
function lives in an ``i64`` module global ``@__bl_executor_token_<n>`` (zero until a launch),
so the await may be in another function -- if the two share a session (below).

Sessions (one choice, documented here):

* the *program session*: ``@backline_setup`` and ``@backline_teardown`` share one session per
  address, so that what setup starts in the executor (e.g. a coprocessor, see
  ``inject-transport-session``) lives until teardown: closing an executor session ends what
  its launches started. Setup opens it at its entry and keeps it in an ``i64`` module global
  ``@__bl_executor_session_<n>`` (zero-initialised: xDSL's LLVM backend has no null-pointer
  initialiser; the slot is read and written as a pointer), and sends every object either
  function launches; teardown reads it at its entry and closes it before each return, then
  zeroes the global. A module that calls remote targets from one of the two must define
  both;
* every other host function has its own sessions: one ``executor.open`` per address, at the
  start of its entry block, in the order the addresses are first called (several targets
  at one address share it); one ``executor.send_binary`` per object file per session, right
  after the opens, for the objects that function launches -- never one per call; and one
  ``executor.close`` per session before every ``llvm.return`` / ``func.return``, in the
  reverse order of the opens.

A close goes right before the return, or, when the return hands back the thread's status
(a ``transport.take_status`` or ``bl_status_take()`` call just before it, alone or in the
``select`` that ``inject-transport-session`` builds), before that take, so the close's
status is part of what the function returns.

Calls to functions of targets without an ``address`` are left as they are: that code runs
in the compiling process and is linked in (``convert-executor-to-llvm`` records its object
file). A host-level declaration of a dispatched function (``llvm.func @f(i64) -> i64``) is
erased once no host code refers to it any more.

Errors: a remote target without ``backline.object_file`` (run ``cross-compile-targets``
first); a function name declared by two target modules, or defined both in the host module
and in a target (the call would be ambiguous); a call whose operand or result types differ
from the target's declaration; an async or await call of a function that is not
``() -> i32``, whose result is used, that carries both attributes, or that is not remote;
an await of a function never launched asynchronously, or launched and awaited in functions
that do not share a session; remote calls in only one of ``@backline_setup`` /
``@backline_teardown`` without the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, SymbolRefAttr, i32, i64
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.utils.exceptions import PassFailedException

from ..dialects import executor
from .cross_compile_targets import Target, target_modules

_FUNCS = (llvm.FuncOp, func.FuncOp)
_RETURNS = (llvm.ReturnOp, func.ReturnOp)
PTR = llvm.LLVMPointerType()

#: unit attributes of a host ``llvm.call``: start the remote function / wait for that start
ASYNC_ATTR = "backline.async"
AWAIT_ATTR = "backline.await"
#: the functions that share the program session
SETUP, TEARDOWN = "backline_setup", "backline_teardown"
SESSION_GLOBAL = "__bl_executor_session_"
TOKEN_GLOBAL = "__bl_executor_token_"
STATUS_TAKE = "bl_status_take"


def _fail(message: str) -> PassFailedException:
    return PassFailedException(f"{DispatchExecutorTargets.name}: {message}")


def _signature(fn: llvm.FuncOp) -> tuple[tuple[Attribute, ...], tuple[Attribute, ...]]:
    ft = fn.function_type
    outputs = () if isinstance(ft.output, llvm.LLVMVoidType) else (ft.output,)
    return tuple(ft.inputs.data), outputs


def _text(ins: tuple[Attribute, ...], outs: tuple[Attribute, ...]) -> str:
    return f"({', '.join(map(str, ins))}) -> ({', '.join(map(str, outs))})"


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


@dataclass
class _Call:
    """One host call of a remote function."""

    op: llvm.CallOp
    target: Target
    decl: llvm.FuncOp
    kind: str  # "launch", "async" or "await"

    @property
    def symbol(self) -> str:
        return self.decl.sym_name.data

    @property
    def address(self) -> str:
        assert self.target.address is not None
        return self.target.address

    @property
    def object_file(self) -> str:
        assert self.target.object_file is not None
        return self.target.object_file


def _first_use_order(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _is_take(op: Operation) -> bool:
    if op.name == "transport.take_status":
        return True
    return isinstance(op, llvm.CallOp) and flat_callee(op) == STATUS_TAKE


def _close_point(ret: Operation) -> Operation:
    """What the closes go before: the status take the return hands back, else the return."""
    at = ret
    op = ret.prev_op
    while op is not None and (_is_take(op) or isinstance(op, llvm.ConstantOp | llvm.ICmpOp | llvm.SelectOp)):
        if _is_take(op):
            at = op
        op = op.prev_op
    return at


class _Symbols:
    """Fresh module-level names, and the globals made under them."""

    def __init__(self, module: ModuleOp) -> None:
        self.module = module
        self.taken = {name.data for op in module.walk()
                      if isinstance(name := getattr(op, "sym_name", None), StringAttr)}
        self.globals: list[llvm.GlobalOp] = []

    def i64_global(self, prefix: str) -> str:
        n = 0
        while f"{prefix}{n}" in self.taken:
            n += 1
        name = f"{prefix}{n}"
        self.taken.add(name)
        self.globals.append(llvm.GlobalOp(i64, name, "internal", value=IntegerAttr(0, i64)))
        return name

    def finish(self) -> None:
        if self.globals:
            Rewriter.insert_op(self.globals, InsertPoint.at_start(self.module.body.block))


def _address_of(name: str) -> llvm.AddressOfOp:
    return llvm.AddressOfOp(name, PTR)


@dataclass(frozen=True)
class DispatchExecutorTargets(ModulePass):
    """Rewrite host calls to remote target functions into executor ops (see the module docstring)."""

    name = "dispatch-executor-targets"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        targets = target_modules(self.name, op)
        if not any(t.remote for t in targets):
            self._check_no_marked_calls(op)
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

        # Everything is checked before the module changes.
        calls = {fn: self._remote_calls(fn, table) for fn in hosts}
        by_name = {fn.sym_name.data: fn for fn in hosts}
        program = [by_name[n] for n in (SETUP, TEARDOWN) if n in by_name and calls[by_name[n]]]
        if program:
            missing = [n for n in (SETUP, TEARDOWN) if n not in by_name]
            if missing:
                raise _fail(f"@{program[0].sym_name.data} calls executor targets, which run in a session opened in "
                            f"@{SETUP} and closed in @{TEARDOWN}; define @{missing[0]} too")
            program = [by_name[SETUP], by_name[TEARDOWN]]
        self._check_async_scopes(calls, program)

        symbols = _Symbols(op)
        tokens = {c.symbol: None for cs in calls.values() for c in cs if c.kind == "async"}
        token_globals = {symbol: symbols.i64_global(TOKEN_GLOBAL) for symbol in tokens}
        program_calls = [c for fn in program for c in calls[fn]]
        program_globals = {a: symbols.i64_global(SESSION_GLOBAL)
                           for a in _first_use_order([c.address for c in program_calls])}

        dispatched: set[str] = set()
        for fn in hosts:
            if not calls[fn]:
                continue
            if fn in program:
                sessions = self._program_sessions(fn, program_globals, program_calls, is_setup=fn is program[0])
            else:
                sessions = self._own_sessions(fn, calls[fn])
            for call in calls[fn]:
                self._rewrite(call, sessions[call.address], token_globals)
            dispatched |= {c.symbol for c in calls[fn]}
        symbols.finish()
        self._erase_unused_declarations(op, dispatched)

    # -- checks ----------------------------------------------------------------------------

    def _remote_calls(self, fn: Operation, table: dict[str, tuple[Target, llvm.FuncOp]]) -> list[_Call]:
        out: list[_Call] = []
        for inner in fn.walk():
            if not isinstance(inner, llvm.CallOp):
                continue
            marks = [a for a in (ASYNC_ATTR, AWAIT_ATTR) if a in inner.attributes]
            callee = flat_callee(inner)
            entry = table.get(callee) if callee is not None else None
            if entry is None or not entry[0].remote:
                if marks:
                    raise _fail(f"in @{fn.sym_name.data}: the call to @{callee} carries {marks[0]}, but @{callee} is "
                                "not a function of a target with an executor address")
                continue
            target, decl = entry
            if len(marks) == 2:
                raise _fail(f"in @{fn.sym_name.data}: the call to @{callee} carries both {ASYNC_ATTR} and "
                            f"{AWAIT_ATTR}; a call starts a launch or waits for one")
            self._check_call(fn, inner, target, decl)
            if marks:
                self._check_async(fn, inner, decl, marks[0])
            out.append(_Call(inner, target, decl, {ASYNC_ATTR: "async", AWAIT_ATTR: "await"}.get(
                marks[0] if marks else "", "launch")))
        return out

    def _check_call(self, fn: Operation, call: llvm.CallOp, target: Target, decl: llvm.FuncOp) -> None:
        inputs, outputs = _signature(decl)
        got_in = tuple(a.type for a in call.args)
        got_out = (call.returned.type,) if call.returned is not None else ()
        if call.var_callee_type is not None or got_in != inputs or got_out != outputs:
            raise _fail(f"in @{fn.sym_name.data}: the call to @{decl.sym_name.data} has type {_text(got_in, got_out)} "
                        f"but target '{target.name}' declares it {_text(inputs, outputs)}")

    def _check_async(self, fn: Operation, call: llvm.CallOp, decl: llvm.FuncOp, mark: str) -> None:
        where = f"in @{fn.sym_name.data}: the {mark} call to @{decl.sym_name.data}"
        if _signature(decl) != ((), (i32,)):
            raise _fail(f"{where}: an asynchronous launch runs a function of type () -> (i32) (the executor calls "
                        f"it as int32_t fn(void), a bl_status), but it is {_text(*_signature(decl))}")
        if call.returned is not None and call.returned.uses:
            raise _fail(f"{where}: its i32 result is used, but an asynchronous launch's status arrives at the await, "
                        "where it is recorded (transport.take_status / bl_status_take returns it); drop the use")

    def _check_async_scopes(self, calls: dict[Operation, list[_Call]], program: list[Operation]) -> None:
        """Each asynchronously launched function is launched and awaited in one session's scope."""
        scopes: dict[str, set[str]] = {}
        launched: set[str] = set()
        for fn, cs in calls.items():
            scope = "program" if fn in program else fn.sym_name.data
            for c in cs:
                if c.kind != "launch":
                    scopes.setdefault(c.symbol, set()).add(scope)
                if c.kind == "async":
                    launched.add(c.symbol)
        for symbol, where in scopes.items():
            if symbol not in launched:
                raise _fail(f"@{symbol} is awaited ({AWAIT_ATTR}) but never launched with {ASYNC_ATTR}")
            if len(where) > 1:
                names = sorted(f"@{SETUP}/@{TEARDOWN}" if w == "program" else f"@{w}" for w in where)
                raise _fail(f"@{symbol} is launched asynchronously and awaited in {', '.join(names)}, which do not "
                            f"share an executor session (only @{SETUP} and @{TEARDOWN} do); launch and await it in "
                            "one function")

    # -- sessions --------------------------------------------------------------------------

    @staticmethod
    def _prepend(fn: Operation, ops: list[Operation]) -> None:
        entry: Block = fn.body.blocks[0]
        if entry.first_op is None:
            entry.add_ops(ops)
        else:
            entry.insert_ops_before(ops, entry.first_op)

    def _own_sessions(self, fn: Operation, calls: list[_Call]) -> dict[str, SSAValue]:
        """Open, send and close this function's own sessions; address -> session."""
        addresses = _first_use_order([c.address for c in calls])
        opens = {address: executor.OpenOp(address) for address in addresses}
        sends = [executor.SendBinaryOp(opens[a], obj)
                 for a, obj in _first_use_order_pairs([(c.address, c.object_file) for c in calls])]
        self._prepend(fn, [*opens.values(), *sends])
        for session in opens.values():
            session.session.name_hint = "session"
        self._before_returns(fn, lambda: [executor.CloseOp(opens[a]) for a in reversed(addresses)])
        return {a: o.session for a, o in opens.items()}

    def _program_sessions(self, fn: Operation, globals_: dict[str, str], program_calls: list[_Call], *,
                          is_setup: bool) -> dict[str, SSAValue]:
        """The program session of each address: opened (and stored) by setup, read and closed by teardown."""
        ops: list[Operation] = []
        sessions: dict[str, SSAValue] = {}
        for address, name in globals_.items():
            slot = _address_of(name)
            if is_setup:
                session_op = executor.OpenOp(address)
                ops += [session_op, slot, llvm.StoreOp(session_op.session, slot)]
                session = session_op.session
            else:
                load = llvm.LoadOp(slot, executor.SESSION)
                ops += [slot, load]
                session = load.dereferenced_value
            session.name_hint = "session"
            sessions[address] = session
        if is_setup:
            ops += [executor.SendBinaryOp(sessions[a], obj)
                    for a, obj in _first_use_order_pairs([(c.address, c.object_file) for c in program_calls])]
        self._prepend(fn, ops)
        if not is_setup:
            def closes() -> list[Operation]:
                out: list[Operation] = []
                for address in reversed(list(globals_)):
                    slot, zero = _address_of(globals_[address]), llvm.ConstantOp(IntegerAttr(0, i64), i64)
                    out += [executor.CloseOp(sessions[address]), slot, zero, llvm.StoreOp(zero.result, slot)]
                return out

            self._before_returns(fn, closes)
        return sessions

    @staticmethod
    def _before_returns(fn: Operation, make: Callable[[], list[Operation]]) -> None:
        for block in fn.body.blocks:
            term = block.last_op
            if isinstance(term, _RETURNS):
                Rewriter.insert_op(make(), InsertPoint.before(_close_point(term)))

    # -- the calls -------------------------------------------------------------------------

    def _rewrite(self, call: _Call, session: SSAValue, token_globals: dict[str, str]) -> None:
        op = call.op
        block = op.parent_block()
        assert block is not None
        new: list[Operation]
        result: SSAValue | None = None
        if call.kind == "launch":
            outputs = [op.returned.type] if op.returned is not None else []
            launch = executor.LaunchOp(session, call.symbol, call.object_file, list(op.args), outputs)
            new = [launch]
            result = launch.outputs[0] if outputs else None
        elif call.kind == "async":
            start, slot = executor.LaunchAsyncOp(session, call.symbol, call.object_file), _address_of(
                token_globals[call.symbol])
            start.token.name_hint = "token"
            new = [start, slot, llvm.StoreOp(start.token, slot)]
        else:
            slot = _address_of(token_globals[call.symbol])
            load = llvm.LoadOp(slot, executor.TOKEN)
            load.dereferenced_value.name_hint = "token"
            new = [slot, load, executor.AwaitOp(session, load.dereferenced_value)]
        Rewriter.insert_op(new, InsertPoint.before(op))
        if op.returned is not None and result is not None:
            op.returned.replace_all_uses_with(result)
            if op.returned.name_hint:
                result.name_hint = op.returned.name_hint
        block.erase_op(op)

    def _check_no_marked_calls(self, module: ModuleOp) -> None:
        for fn in host_functions(module):
            for inner in fn.walk():
                if isinstance(inner, llvm.CallOp):
                    for mark in (ASYNC_ATTR, AWAIT_ATTR):
                        if mark in inner.attributes:
                            raise _fail(f"in @{fn.sym_name.data}: the call to @{flat_callee(inner)} carries {mark}, "
                                        "but no target module has an executor address")

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


def _first_use_order_pairs(items: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return list(dict.fromkeys(items))
