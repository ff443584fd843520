"""``--code``: a CSS code's parity-check matrices Hx and Hz from an ``.npz`` file, checked
entry by entry (what a decoder built from them, such as bposd, takes as ``build(hx=, hz=)``)."""

from __future__ import annotations

import os
import zipfile

import numpy as np

from .._errors import BacklineError


def load_code(path: str) -> tuple[np.ndarray, np.ndarray]:
    """(Hx, Hz) of the ``.npz`` archive at ``path``, checked: 2-D, non-empty, only 0 and 1, as many columns.

    Nothing is cast before it is checked: a NaN, a 2 or a 0.5 in a matrix is refused,
    naming the entry, instead of becoming some other code.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise BacklineError(f"--code {path!r}: must be the path of a .npz file")
    if not os.path.exists(path):
        raise BacklineError(f"--code {path}: no such file")
    if os.path.isdir(path):
        raise BacklineError(f"--code {path}: is a directory, not a .npz file")
    how = "save one with numpy.savez(path, Hx=..., Hz=...)"
    try:
        with open(path, "rb") as fh:
            magic = fh.read(6)
    except OSError as exc:
        raise BacklineError(f"--code {path}: cannot be read ({exc.strerror or exc})") from None
    if magic == b"\x93NUMPY":
        raise BacklineError(f"--code {path}: holds a single .npy array, not an .npz archive of Hx and Hz; {how}")
    if not magic.startswith(b"PK"):
        raise BacklineError(f"--code {path}: is not an .npz archive (a zip of .npy arrays); {how}")
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise BacklineError(f"--code {path}: not a .npz archive of Hx and Hz ({first_line(exc)}); {how}") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise BacklineError(f"--code {path}: holds a single array, not an .npz archive of Hx and Hz; {how}")
    with data:
        missing = [name for name in ("Hx", "Hz") if name not in data.files]
        if missing:
            held = ", ".join(data.files) or "no arrays"
            raise BacklineError(f"--code {path}: has no {' or '.join(missing)} (it holds {held}); {how}")
        matrices = []
        for name in ("Hx", "Hz"):
            try:
                raw = data[name]
            except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
                raise BacklineError(f"--code {path}: {name} cannot be read as a numeric matrix "
                                    f"({first_line(exc)}; a ragged list of rows is stored as objects)") from None
            matrices.append(_binary_matrix(path, name, raw))
    hx, hz = matrices
    if hx.shape[1] != hz.shape[1]:
        raise BacklineError(f"--code {path}: Hx has {hx.shape[1]} columns and Hz {hz.shape[1]}; both have one "
                            "column per qubit")
    return hx, hz


def _binary_matrix(path: str, name: str, raw: np.ndarray) -> np.ndarray:
    if raw.dtype.kind not in "biuf":
        raise BacklineError(f"--code {path}: {name} holds {raw.dtype} values; a parity-check matrix holds 0 and 1")
    if raw.ndim != 2 or 0 in raw.shape:
        raise BacklineError(f"--code {path}: {name} must be a non-empty 2-D parity-check matrix, got shape "
                            f"{raw.shape}")
    bad = np.argwhere(~((raw == 0) | (raw == 1)))  # NaN equals neither
    if bad.size:
        r, c = (int(i) for i in bad[0])
        value = raw[r, c].item()
        more = f" (and {len(bad) - 1} more such entries)" if len(bad) > 1 else ""
        raise BacklineError(f"--code {path}: {name}[{r}, {c}] is {value!r}{more}; a parity-check matrix holds "
                            "only 0 and 1")
    return np.ascontiguousarray(raw, dtype=np.uint8)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
