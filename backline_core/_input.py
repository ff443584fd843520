"""Reading a file a user names (``--fn @FILE``, ``--code FILE``, a window, an IR file): bounded
and never blocking, so a FIFO, ``/dev/zero`` or a directory is a clear error, not a hang or a
process that grows until it is killed."""

from __future__ import annotations

import os
import stat

from ._errors import BacklineError

__all__ = ["InputFileError", "read_input_file", "read_input_text"]


class InputFileError(BacklineError, ValueError):
    """An input file that is missing, not a regular file, too large or unreadable."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_input_file(path: str | os.PathLike[str], *, what: str, limit: int) -> bytes:
    """The bytes of the regular file ``path`` (``what``: what it is used for, for the error), at most
    ``limit`` bytes; an :class:`InputFileError` naming the path, its use, the problem and the fix."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise InputFileError(f"{what}: {path!r} is not a path; give the path of a file")
    shown = os.fspath(path)
    try:  # O_NONBLOCK: opening a FIFO must not wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputFileError(f"{what} {shown}: no such file; give the path of an existing file") from None
    except OSError as exc:
        raise InputFileError(f"{what} {shown}: cannot be opened ({exc.strerror or exc}); give a readable "
                             "regular file") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputFileError(f"{what} {shown}: is {_kind(st.st_mode)}, not a regular file; give a regular file")
        if st.st_size > limit:
            raise InputFileError(f"{what} {shown}: is {st.st_size:,} bytes, more than the {limit:,} allowed; "
                                 "give a smaller file")
        data = bytearray()
        while len(data) <= limit:  # one byte past the limit: a file that grew since fstat is refused too
            chunk = os.read(fd, limit + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        raise InputFileError(f"{what} {shown}: cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise InputFileError(f"{what} {shown}: is more than the {limit:,} bytes allowed; give a smaller file")
    return bytes(data)


def read_input_text(path: str | os.PathLike[str], *, what: str, limit: int) -> str:
    """:func:`read_input_file` decoded as UTF-8 (an :class:`InputFileError` if it is not)."""
    data = read_input_file(path, what=what, limit=limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{what} {os.fspath(path)}: is not UTF-8 text (byte {exc.start}); give a text "
                             "file") from None
