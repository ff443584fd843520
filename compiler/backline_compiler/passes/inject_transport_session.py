"""inject-transport-session: the placement's session bring-up and teardown, as IR.

The pass reads the module attribute ``backline.placement`` (a ``#transport.backline<...>``
on the ``builtin.module``); without it the pass does nothing. It resolves the placement
(:func:`~.placement.module_resolution`), and for every coprocessor, keyed by its name (the
session registry key), it emits

* into ``llvm.func @backline_setup() -> i32`` the bring-up, and
* into ``llvm.func @backline_teardown() -> i32`` the teardown,

each function returning ``transport.take_status`` (the runtime's first failure recorded on
the calling thread, 0 if none). The functions are created if absent (external linkage).
An existing one must have the type ``() -> i32``; the bring-up is prepended to its entry
block, the teardown is inserted before each ``llvm.return``, and a return that does not
already return a ``transport.take_status`` returns its value only when the runtime
recorded no failure (``select(take_status == 0, value, take_status)``).

Bring-up of key ``K``:

* Co-located coprocessor -- it runs in the controller's process (resolved ``runs_in``
  ``controller-thread`` or ``thread``, ``ResolvedNode.in_controller_process``): its
  coprocessor session is brought up first, in setup::

      %cop = transport.create {..., key = K, config = <node config>, hardware, runs_in} : !transport.session<coprocessor>
      %t0 = transport.connect_async %cop ; transport.await %t0
      %t1 = transport.exchange_keys_async %cop ; transport.await %t1
      transport.establish_channel %cop
      transport.set_coprocessor_fn %cop {symbol, library, decoder_id, init_symbol?, fini_symbol?, context?}
          (one per decoder_id of the node's coprocessor_fn)
      transport.start %cop

  Each ``*_async`` step is awaited before the controller's ``connect``: a controller
  connects to a coprocessor that has exchanged keys (memcpy's controller waits for that),
  so awaiting later could hold the controller's connect until its deadline.
  The function is the resolution's built one; it must be native (library + symbol). A
  Python callable is an error: compiled code cannot bind a Python function.
* Always, the controller side, on the placement's controller node, expecting the
  coprocessor where it runs (``runs_in`` = the coprocessor's)::

      %ctl = transport.create {..., key = K, config = <controller config>, hardware, runs_in} : !transport.session<controller>
      transport.connect / exchange_keys / establish_channel %ctl
      transport.set_message_sizes %ctl {in_bytes, out_bytes}
      transport.start %ctl

A coprocessor with ``runs_in = "process"`` is brought up outside the program (``backline
coprocessor serve``), so only its controller side is emitted. ``backend_lib`` is the
resolution's backend library for (transport, hardware, role).

* Executor-run coprocessor (resolved ``runs_in = "executor"``; ``ResolvedNode.executor_options``
  has its ``address`` and ``triple``): its code becomes a target module of three functions,
  which ``cross-compile-targets`` compiles into one object and ``dispatch-executor-targets``
  launches in the executor (:func:`executor_target_module`)::

      builtin.module attributes {backline.target = {name = "coprocessor_K", triple = T, address = A}} {
        llvm.func @backline_coprocessor_up_K() -> i32 {       // the co-located bring-up, with
          transport.create ... ; transport.connect ; ...       // synchronous connect/exchange_keys
          transport.start %cop ; %st = transport.take_status ; llvm.return %st
        }
        llvm.func @backline_coprocessor_serve_K() -> i32 {    // parks until the session is stopped
          %cop = transport.get_session {key = K} ; transport.park %cop ; ...
        }
        llvm.func @backline_coprocessor_stop_K() -> i32 {     // stops and destroys it: serve returns
          %cop = transport.get_session {key = K} ; transport.stop %cop ; transport.destroy %cop ; ...
        }
      }

  and setup, before the controller side, starts it (each call a launch in the executor, the
  async ones and their awaits as ``dispatch-executor-targets`` defines them)::

      llvm.call @backline_coprocessor_up_K() {backline.async} : () -> i32
      llvm.call @backline_coprocessor_up_K() {backline.await} : () -> i32
      llvm.call @backline_coprocessor_serve_K() {backline.async} : () -> i32

  The bring-up is awaited at once, so it is finished before the controller connects; it is
  an asynchronous launch rather than a plain one because an await carries the executor's
  error text with its status. The serve launch runs until teardown. Host declarations of
  the three functions are added at the top level.

Message sizes: the pass options ``in-bytes`` / ``out-bytes`` (default 8 each) apply to every
key, unless the module attribute ``backline.message_sizes`` overrides a key::

    module attributes {backline.message_sizes = {dec = [16, 4]}, backline.placement = ...}

(a dictionary from coprocessor name to ``[in_bytes, out_bytes]``, positive integers; a
name that is not a coprocessor of the placement is an error).

Teardown of key ``K``: ``transport.get_session`` + ``transport.stop`` + ``transport.destroy``
of the controller, then of the co-located coprocessor; or, for an executor-run one, the stop
launch, its await and the serve launch's await::

      llvm.call @backline_coprocessor_stop_K() {backline.async} : () -> i32
      llvm.call @backline_coprocessor_stop_K() {backline.await} : () -> i32
      llvm.call @backline_coprocessor_serve_K() {backline.await} : () -> i32

so the controller is gone before its coprocessor stops (it never sees a vanished peer in a
round). ``dispatch-executor-targets`` closes the executor session after them: setup and
teardown share it, and closing it ends the executor's session process.

Idempotent: a side whose ``transport.create`` (same role and key) is already in
``@backline_setup`` is not brought up again, and a side whose session is already destroyed
in ``@backline_teardown`` is not torn down again; for an executor-run coprocessor, a call of
its up function in setup, of its stop function in teardown, and a target module named
``coprocessor_K`` count.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import llvm
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    UnitAttr,
    i32,
)
from xdsl.ir import Block, Operation, Region
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.utils.exceptions import PassFailedException

from backline_core._coprocessor_function import CoprocessorFunction
from backline_core._errors import PlacementError
from backline_core._placement import Endpoint, Placement
from backline_core._resolution import Resolution, ResolvedNode

from ..dialects import transport as t
from .cross_compile_targets import TARGET_ATTR, host_triple, parse_target, target_modules
from .dispatch_executor_targets import ASYNC_ATTR, AWAIT_ATTR, flat_callee
from .placement import PLACEMENT_ATTR, module_placement, module_resolution  # noqa: F401 (re-exported)

#: Module attribute with per-key message sizes: {key = [in_bytes, out_bytes]}.
MESSAGE_SIZES_ATTR = "backline.message_sizes"
SETUP = "backline_setup"
TEARDOWN = "backline_teardown"

_NAME = "inject-transport-session"
_ICMP_EQ = 0  # llvm.icmp predicate "eq"
#: the three functions of an executor-run coprocessor, by role (see executor_symbols)
EXECUTOR_FUNCTIONS = ("up", "serve", "stop")
_STATUS_FN = llvm.LLVMFunctionType([], i32)


def _names(placement: Placement) -> str:
    return ", ".join(repr(n.name) for n in placement.coprocessors) or "none"


def _message_sizes(module: ModuleOp, placement: Placement, in_bytes: int, out_bytes: int) -> dict[str, tuple[int, int]]:
    sizes = {node.name: (in_bytes, out_bytes) for node in placement.coprocessors}
    attr = module.attributes.get(MESSAGE_SIZES_ATTR)
    if attr is None:
        return sizes
    form = "{<coprocessor name> = [<in_bytes>, <out_bytes>]}"
    if not isinstance(attr, DictionaryAttr):
        raise PassFailedException(f"{_NAME}: module attribute {MESSAGE_SIZES_ATTR} must be a dictionary {form}, got {attr}")
    for key, value in attr.data.items():
        if key not in sizes:
            raise PassFailedException(
                f"{_NAME}: {MESSAGE_SIZES_ATTR} names {key!r}, which is not a coprocessor of the placement; "
                f"coprocessors: {_names(placement)}"
            )
        pair = list(value.data) if isinstance(value, ArrayAttr) else []
        numbers = [v.value.data for v in pair if isinstance(v, IntegerAttr)]
        if len(pair) != 2 or len(numbers) != 2 or min(numbers) <= 0:
            raise PassFailedException(
                f"{_NAME}: {MESSAGE_SIZES_ATTR}[{key!r}] must be [in_bytes, out_bytes], two positive integers, got {value}"
            )
        sizes[key] = (numbers[0], numbers[1])
    return sizes


def _native_function(node: ResolvedNode) -> CoprocessorFunction:
    function = node.function
    assert function is not None  # resolution builds every coprocessor's function
    if function.is_python:
        raise PassFailedException(
            f"{_NAME}: coprocessor {node.name!r} runs the Python callable {function.name!r} as its coprocessor_fn, "
            "and compiled code cannot bind a Python function. Use a native decoder: a decoder plugin name "
            "(e.g. coprocessor_fn = \"steane\" or \"echo\") or a CoprocessorFunction with library= and symbol=; "
            "or serve this coprocessor outside the program (runs_in = \"process\")"
        )
    return function


# -- the two functions ----------------------------------------------------------------------


def _existing_function(module: ModuleOp, name: str) -> llvm.FuncOp | None:
    """``@name`` of ``module`` if there is one; it must be an ``llvm.func () -> i32``."""
    for op in module.ops:
        sym = op.properties.get("sym_name") or op.attributes.get("sym_name")
        if not (isinstance(sym, StringAttr) and sym.data == name):
            continue
        if not isinstance(op, llvm.FuncOp):
            raise PassFailedException(f"{_NAME}: @{name} must be an llvm.func () -> i32, but it is a {op.name}")
        ftype = op.function_type
        if len(ftype.inputs.data) or ftype.output != i32 or ftype.is_variadic:
            raise PassFailedException(f"{_NAME}: @{name} must have the type () -> i32, not {ftype}")
        return op
    return None


def _function(module: ModuleOp, name: str) -> llvm.FuncOp:
    """``llvm.func @name() -> i32`` of ``module``; created (returning take_status) if absent,
    and given that body if it is only a declaration."""
    fn = _existing_function(module, name)
    if fn is None:
        fn = llvm.FuncOp(name, llvm.LLVMFunctionType([], i32), linkage=llvm.LinkageAttr("external"), body=Region())
        module.body.block.add_op(fn)
    if not fn.body.blocks:
        _returning_status(fn.body)
    return fn


def _returning_status(body: Region) -> None:
    status = t.TakeStatusOp()
    body.add_block(Block([status, llvm.ReturnOp(status.status)]))


def _returns(fn: llvm.FuncOp) -> list[llvm.ReturnOp]:
    return [op for op in fn.walk() if isinstance(op, llvm.ReturnOp)]


def _returns_status(ret: llvm.ReturnOp) -> bool:
    """Whether ``ret`` already returns a take_status, bare or as :func:`_report_status` builds it."""
    value = ret.arg
    if value is None:
        return False
    owner = value.owner
    if isinstance(owner, llvm.SelectOp):
        owner = owner.rhs.owner
    return isinstance(owner, t.TakeStatusOp)


def _before_status(ret: llvm.ReturnOp) -> InsertPoint:
    """Where teardown goes: before the take_status ``ret`` returns (so that it sees the
    teardown's failures), else right before ``ret``."""
    value = ret.arg
    if value is not None and isinstance(value.owner, t.TakeStatusOp) and value.owner.parent is ret.parent:
        return InsertPoint.before(value.owner)
    return InsertPoint.before(ret)


def _report_status(ret: llvm.ReturnOp) -> None:
    """Make ``ret`` return the runtime's first failure, or its own value if there is none."""
    if ret.arg is None or _returns_status(ret):
        return
    status = t.TakeStatusOp()
    zero = llvm.ConstantOp(IntegerAttr(0, i32), i32)
    ok = llvm.ICmpOp(status.status, zero.result, IntegerAttr(_ICMP_EQ, 64))
    pick = llvm.SelectOp(ok.res, ret.arg, status.status)
    Rewriter.insert_op([status, zero, ok, pick], InsertPoint.before(ret))
    ret.operands[0] = pick.res


def _role_keys(fn: llvm.FuncOp, teardown: bool) -> set[tuple[str, str]]:
    """(role, key) already brought up in setup (a transport.create) or torn down in teardown
    (a transport.get_session whose session is destroyed)."""
    out: set[tuple[str, str]] = set()
    for op in fn.walk():
        if teardown and isinstance(op, t.GetSessionOp):
            if any(isinstance(use.operation, t.DestroyOp) for use in op.session.uses):
                out.add((op.session.type.role_name, op.key.data))
        elif not teardown and isinstance(op, t.CreateOp):
            out.add((op.session.type.role_name, op.key.data))
    return out


# -- bring-up and teardown ops ---------------------------------------------------------------


def _create(side: ResolvedNode, cop: ResolvedNode) -> t.CreateOp:
    """``transport.create`` of ``side`` (the controller or ``cop`` itself) for the pair keyed by
    ``cop``: a controller says where it expects its coprocessor, a coprocessor where it runs."""
    config = cop.controller_config if side.role == "controller" else side.config
    return t.CreateOp(side.role, transport=side.transport.name, backend_lib=side.library, key=cop.name,
                      config=config, hardware=side.hardware, runs_in=cop.runs_in)


def _controller_bring_up(res: Resolution, cop: ResolvedNode, sizes: tuple[int, int]) -> list[Operation]:
    create = _create(res.controller, cop)
    s = create.session
    return [
        create,
        t.ConnectOp(s),
        t.ExchangeKeysOp(s),
        t.EstablishChannelOp(s),
        t.SetMessageSizesOp(s, sizes[0], sizes[1]),
        t.StartOp(s),
    ]


def _coprocessor_bring_up(node: ResolvedNode, function: CoprocessorFunction, *,
                          asynchronous: bool = True) -> list[Operation]:
    """The coprocessor side's bring-up; ``asynchronous``: connect and exchange keys on the
    runtime's worker thread, each awaited (co-located: the controller's thread must not block)."""
    create = _create(node, node)
    s = create.session
    ops: list[Operation] = [create]
    if asynchronous:
        connect = t.ConnectAsyncOp(s)
        keys = t.ExchangeKeysAsyncOp(s)
        ops += [connect, t.AwaitOp(connect.token), keys, t.AwaitOp(keys.token)]
    else:
        ops += [t.ConnectOp(s), t.ExchangeKeysOp(s)]
    ops.append(t.EstablishChannelOp(s))
    for decoder_id in function.decoder_ids:
        ops.append(
            t.SetCoprocessorFnOp(
                s,
                symbol=function.symbol or "",
                library=function.library or "",
                decoder_id=decoder_id,
                init_symbol=function.init_symbol,
                fini_symbol=function.fini_symbol,
                context=function.context.hex() if function.context else None,
            )
        )
    ops.append(t.StartOp(s))
    return ops


def _teardown(role: str, key: str) -> list[Operation]:
    get = t.GetSessionOp(role, key)
    return [get, t.StopOp(get.session), t.DestroyOp(get.session)]


# -- executor-run coprocessors ------------------------------------------------------------------


def executor_symbols(key: str) -> dict[str, str]:
    """The functions of executor-run coprocessor ``key``: ``{"up": "backline_coprocessor_up_<key>", ...}``."""
    return {role: f"backline_coprocessor_{role}_{key}" for role in EXECUTOR_FUNCTIONS}


def executor_target_name(key: str) -> str:
    """The target (and object file) name of executor-run coprocessor ``key``."""
    return f"coprocessor_{key}"


def executor_address(node: ResolvedNode) -> str:
    """``host:port`` the controller's process dials for ``node``'s executor."""
    opts = node.executor_options
    try:
        if "address" in opts:
            return str(Endpoint.parse(str(opts["address"])))
        if "host" in opts and "port" in opts:
            return str(Endpoint(host=str(opts["host"]), port=int(opts["port"])))
    except (PlacementError, ValueError) as exc:
        raise PassFailedException(f"{_NAME}: coprocessor {node.name!r}: executor {exc}") from None
    raise PassFailedException(
        f"{_NAME}: coprocessor {node.name!r} runs in an executor, but its executor_options give no address "
        "(address='host:port', or host= and port=); pass executor=Executor.local() or the executor's address")


def _status_function(name: str, ops: list[Operation]) -> llvm.FuncOp:
    """``llvm.func @name() -> i32`` running ``ops`` and returning the thread's first failure."""
    status = t.TakeStatusOp()
    return llvm.FuncOp(name, _STATUS_FN, linkage=llvm.LinkageAttr("external"),
                       body=Region(Block([*ops, status, llvm.ReturnOp(status.status)])))


def executor_target_module(node: ResolvedNode) -> ModuleOp:
    """The target module holding ``node``'s code for its executor (see the module docstring)."""
    if node.runs_in != "executor":
        raise PassFailedException(f"{_NAME}: coprocessor {node.name!r} runs in {node.runs_in!r}, not in an executor")
    names = executor_symbols(node.name)
    serve = t.GetSessionOp(t.COPROCESSOR, node.name)
    stop = t.GetSessionOp(t.COPROCESSOR, node.name)
    # The stop function destroys the session too, right after its stop: bl_park returns as soon
    # as the session is marked stopped, while bl_stop may still be stopping the backend (joining
    # memcpy's poller thread), so a destroy on the serve thread would race that stop.
    functions = [
        _status_function(names["up"], _coprocessor_bring_up(node, _native_function(node), asynchronous=False)),
        _status_function(names["serve"], [serve, t.ParkOp(serve.session)]),
        _status_function(names["stop"], [stop, t.StopOp(stop.session), t.DestroyOp(stop.session)]),
    ]
    triple = str(node.executor_options.get("triple") or host_triple())
    target = DictionaryAttr({"name": StringAttr(executor_target_name(node.name)), "triple": StringAttr(triple),
                             "address": StringAttr(executor_address(node))})
    module = ModuleOp(functions)
    module.attributes[TARGET_ATTR] = target
    parse_target(_NAME, module)  # the name, triple and address are well-formed
    return module


def _launch(name: str, mark: str | None = None) -> llvm.CallOp:
    call = llvm.CallOp(name, return_type=i32)
    if mark is not None:
        call.attributes[mark] = UnitAttr()
    return call


def _executor_bring_up(key: str) -> list[Operation]:
    names = executor_symbols(key)
    return [_launch(names["up"], ASYNC_ATTR), _launch(names["up"], AWAIT_ATTR), _launch(names["serve"], ASYNC_ATTR)]


def _executor_teardown(key: str) -> list[Operation]:
    names = executor_symbols(key)
    return [_launch(names["stop"], ASYNC_ATTR), _launch(names["stop"], AWAIT_ATTR),
            _launch(names["serve"], AWAIT_ATTR)]


def _calls(fn: llvm.FuncOp | None) -> set[str]:
    if fn is None:
        return set()
    return {name for op in fn.walk() if isinstance(op, llvm.CallOp) and (name := flat_callee(op)) is not None}


def _add_executor_code(module: ModuleOp, nodes: list[ResolvedNode]) -> None:
    """Target modules and host declarations of ``nodes``' functions, where the module has none."""
    present = {target.name for target in target_modules(_NAME, module)}
    symbols = {name.data for op in module.ops if isinstance(name := getattr(op, "sym_name", None), StringAttr)}
    new: list[Operation] = []
    for node in nodes:
        if executor_target_name(node.name) not in present:
            new.append(executor_target_module(node))
        for name in executor_symbols(node.name).values():
            if name not in symbols:
                new.append(llvm.FuncOp(name, _STATUS_FN, linkage=llvm.LinkageAttr("external")))
    if new:
        Rewriter.insert_op(new, InsertPoint.at_start(module.body.block))


def _prepend(fn: llvm.FuncOp, ops: list[Operation]) -> None:
    entry = fn.body.blocks.first
    assert entry is not None
    if entry.first_op is None:
        entry.add_ops(ops)
    else:
        Rewriter.insert_op(ops, InsertPoint.before(entry.first_op))


@dataclass(frozen=True)
class InjectTransportSession(ModulePass):
    """Bring-up into @backline_setup, teardown into @backline_teardown (see the module docstring).

    Options: ``in-bytes`` / ``out-bytes``, the request and reply size of every key's
    controller (``set_message_sizes``), unless ``backline.message_sizes`` overrides a key.
    """

    name = "inject-transport-session"

    in_bytes: int = 8
    out_bytes: int = 8

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        res = module_resolution(op, self.name)
        if res is None:
            return
        placement = res.placement
        for field in ("in_bytes", "out_bytes"):
            value = getattr(self, field)
            if value <= 0:
                raise PassFailedException(f"{self.name}: option {field.replace('_', '-')} must be positive, got {value}")
        sizes = _message_sizes(op, placement, self.in_bytes, self.out_bytes)

        # Everything is checked and built before the module changes.
        old_setup, old_teardown = _existing_function(op, SETUP), _existing_function(op, TEARDOWN)
        brought_up = _role_keys(old_setup, teardown=False) if old_setup else set()
        torn_down = _role_keys(old_teardown, teardown=True) if old_teardown else set()
        setup_calls, teardown_calls = _calls(old_setup), _calls(old_teardown)
        setup_ops: list[Operation] = []
        to_tear_down: list[tuple[str, str]] = []  # (role or "executor", key), in teardown order
        in_executors = [node for node in res.coprocessors if node.runs_in == "executor"]
        for node in in_executors:
            _native_function(node)
            executor_address(node)
        for node in res.coprocessors:
            key, local = node.name, node.in_controller_process
            remote = node.runs_in == "executor"
            if local and (t.COPROCESSOR, key) not in brought_up:
                setup_ops += _coprocessor_bring_up(node, _native_function(node))
            if remote and executor_symbols(key)["up"] not in setup_calls:
                setup_ops += _executor_bring_up(key)
            if (t.CONTROLLER, key) not in brought_up:
                setup_ops += _controller_bring_up(res, node, sizes[key])
            if (t.CONTROLLER, key) not in torn_down:
                to_tear_down.append((t.CONTROLLER, key))
            if local and (t.COPROCESSOR, key) not in torn_down:
                to_tear_down.append((t.COPROCESSOR, key))
            if remote and executor_symbols(key)["stop"] not in teardown_calls:
                to_tear_down.append(("executor", key))

        _add_executor_code(op, in_executors)
        if setup_ops:
            setup = _function(op, SETUP)
            _prepend(setup, setup_ops)
            for ret in _returns(setup):
                _report_status(ret)
        if to_tear_down:
            teardown = _function(op, TEARDOWN)
            for ret in _returns(teardown):  # before every return: each exit path tears down
                at = _before_status(ret)
                for role, key in to_tear_down:
                    Rewriter.insert_op(_executor_teardown(key) if role == "executor" else _teardown(role, key), at)
                _report_status(ret)
