"""What the core asks of this executor plugin: its command line and running a coprocessor.

``plugins.get("executor", "orc").load()`` returns this module. ``deploy`` calls
:func:`start_coprocessor` for every coprocessor resolved to ``runs_in == "executor"``:

1. the compiler builds the node's code for the executor's triple (one object with
   ``backline_coprocessor_up_K``, ``_serve_K`` and ``_stop_K``; see docs/executors.md), the
   same generator the compiled path uses;
2. the host's C client (libbackline, ``backline/executor.h``) opens an authenticated session
   with the executor, ships the object, runs ``up`` (bring-up; its failure comes back with
   the executor's error text) and starts ``serve`` with ``launch_async``;
3. :meth:`ExecutorRun.stop` runs ``stop`` (stop and destroy the session there), awaits
   ``serve`` (parked until then) and closes the executor session.

The executor session stays open in between: closing it ends the executor's session process,
and with it the coprocessor.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from typing import Any

from backline_core import PlacementError, ResolvedNode, TransportError, plugins
from backline_core.sdk import check, ffi, lib, private_tempdir


def cli(argv: Sequence[str]) -> int:
    """``backline executor ARGS`` (the core CLI forwards here)."""
    from .cli import main

    return main(list(argv))


def local_executor() -> Any:
    """A fresh ``Executor.local()`` (``backline bench --runs-in executor``); a context manager."""
    from .handle import Executor

    return Executor.local()


def open_session(address: str) -> Any:
    """An authenticated C-client session with the executor at ``address`` (configured first)."""
    session = lib.bl_executor_open(address.encode())
    if session == ffi.NULL:
        check(lib.bl_status_take())  # bl_executor_open recorded its failure (status and text)
        raise TransportError(f"cannot open a session with the executor at {address}")
    return session


def await_launch(session: Any, token: int, what: str) -> None:
    """Wait for an async launch; its failure (status and the executor's text) is raised, saying ``what``."""
    try:
        check(lib.bl_executor_await(session, token))
    except TransportError as exc:
        raise type(exc)(f"{what}: {exc}", code=exc.code, status=exc.status) from None


def launch_status(session: Any, symbol: str, obj: str, what: str) -> None:
    """Run ``int32_t symbol(void)`` of ``obj`` there and wait: raise its failure with its text."""
    token = ffi.new("int64_t *")
    check(lib.bl_executor_launch_async(session, symbol.encode(), obj.encode(), token))
    await_launch(session, token[0], what)


class ExecutorRun:
    """A coprocessor running in an executor: ``stop()`` ends it and the executor session."""

    def __init__(self, node: ResolvedNode, *, in_bytes: int, out_bytes: int) -> None:
        self.node = node
        options = node.executor_options
        self.address = str(options["address"])
        self._session: Any = None
        self._serve_token = 0
        # the node's object: removed at stop, or by this process's reaper if it dies first
        self._workspace = private_tempdir(f"backline-exec-{node.name}-")
        try:
            from .handle import configure_client

            configure_client(self.address, str(options["secret_file"]))
            self.object_path, self.symbols = build_object(node, in_bytes=in_bytes, out_bytes=out_bytes,
                                                          workspace=self._workspace)
            self._session = open_session(self.address)
            check(lib.bl_executor_send_binary(self._session, self.object_path.encode()))
            launch_status(self._session, self.symbols["up"], self.object_path,
                          f"bring-up of coprocessor {node.name!r} in the executor at {self.address}")
            token = ffi.new("int64_t *")
            check(lib.bl_executor_launch_async(self._session, self.symbols["serve"].encode(),
                                               self.object_path.encode(), token))
            self._serve_token = token[0]
        except BaseException:
            self._close_session()
            raise

    def stop(self) -> None:
        """Stop the coprocessor there, wait for its serve launch, close the session (idempotent)."""
        if self._session is None:
            return
        try:
            if self._serve_token:
                where = f"coprocessor {self.node.name!r} in the executor at {self.address}"
                launch_status(self._session, self.symbols["stop"], self.object_path, f"stopping {where}")
                token, self._serve_token = self._serve_token, 0
                await_launch(self._session, token, f"serving {where}")
        finally:
            self._close_session()

    def _close_session(self) -> None:
        session, self._session = self._session, None
        try:
            if session is not None:
                check(lib.bl_executor_close(session))
        finally:
            shutil.rmtree(self._workspace, ignore_errors=True)

    def __repr__(self) -> str:
        return f"ExecutorRun({self.node.name!r} at {self.address})"


def start_coprocessor(node: ResolvedNode, *, in_bytes: int, out_bytes: int) -> ExecutorRun:
    """Build, ship and bring up ``node`` in its executor; the returned run's ``stop()`` ends it."""
    return ExecutorRun(node, in_bytes=in_bytes, out_bytes=out_bytes)


def build_object(node: ResolvedNode, *, in_bytes: int, out_bytes: int, workspace: str) -> tuple[str, dict[str, str]]:
    """The node's object, from the installed object builder (backline-compiler registers one)."""
    builders = list(plugins.names("builder"))
    if not builders:
        raise PlacementError(
            f"coprocessor {node.name!r} runs in an executor: building its code needs an object builder on this "
            "machine (pip install backline-compiler, which registers one; the executor's machine does not need it)")
    if len(builders) > 1:
        raise PlacementError(f"several object builders are installed ({', '.join(builders)}); keep one")
    build = plugins.get("builder", builders[0]).load()
    return build(node, in_bytes=in_bytes, out_bytes=out_bytes, workspace=workspace)
