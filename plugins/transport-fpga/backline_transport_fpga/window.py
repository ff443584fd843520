"""A read-only look at an engine window from Python (``backline fpga status``, the bench's report).

The same checks as the driver's (native/window.c): a regular file of this user's with no group
or other access, large enough, with the model's magic.
"""

from __future__ import annotations

import mmap
import os
import stat
import struct

from backline_core import BacklineError

from .native import hwhs


class WindowView:
    """The window at ``path``, mapped read-only; ``u32(off)`` reads a word, ``text(off, n)`` a C string."""

    def __init__(self, path: str) -> None:
        h = hwhs()
        try:
            # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below)
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            raise BacklineError(f"window {path}: no such file; start the engine model (backline fpga model --window "
                                f"{path})") from None
        except OSError as exc:
            raise BacklineError(f"window {path}: {exc.strerror or exc}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise BacklineError(f"window {path}: not a regular file (an engine window is a file in /dev/shm); "
                                    f"give the --window the engine model was started with")
            if st.st_uid != os.geteuid() or st.st_mode & 0o077:
                raise BacklineError(f"window {path}: owned by uid {st.st_uid} with mode {st.st_mode & 0o777:o}; a "
                                    "window must be this user's and 0600")
            if st.st_size < h.HWHS_WIN_MEM:
                raise BacklineError(f"window {path}: {st.st_size} bytes, too small for an engine window")
            self._map = mmap.mmap(fd, h.HWHS_WIN_MEM, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        if self.u32(h.HWHS_WIN_INFO + h.HWHS_INFO_MAGIC) != h.HWHS_MAGIC:
            self.close()
            raise BacklineError(f"window {path}: not an engine model's window (no magic)")

    def u32(self, off: int) -> int:
        return int(struct.unpack_from("<I", self._map, off)[0])

    def text(self, off: int, n: int) -> str:
        return bytes(self._map[off:off + n]).split(b"\0")[0].decode(errors="replace")

    def device(self) -> str:
        h = hwhs()
        return self.text(h.HWHS_WIN_INFO + h.HWHS_INFO_DEVICE, 64)

    def close(self) -> None:
        self._map.close()

    def __enter__(self) -> WindowView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
