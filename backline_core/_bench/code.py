"""``--code``: a CSS code's parity-check matrices Hx and Hz from an ``.npz`` file, checked
entry by entry (what a decoder built from them, such as bposd, takes as ``build(hx=, hz=)``)."""

from __future__ import annotations

import io
import os
import zipfile

import numpy as np

from .._errors import BacklineError
from .._input import InputFileError, read_input_file

#: the largest --code file read (compressed .npz)
MAX_CODE_FILE_BYTES = 256 << 20
#: the most entries one matrix may have (e.g. 4,096 checks x 8,192 qubits); a larger one would take
#: minutes to check and gigabytes to hold
MAX_MATRIX_ENTRIES = 1 << 25


def load_code(path: str) -> tuple[np.ndarray, np.ndarray]:
    """(Hx, Hz) of the ``.npz`` archive at ``path``, checked: 2-D, non-empty, only 0 and 1, as many columns.

    Nothing is cast before it is checked: a NaN, a 2 or a 0.5 in a matrix is refused,
    naming the entry, instead of becoming some other code.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise BacklineError(f"--code {path!r}: must be the path of a .npz file")
    how = "save one with numpy.savez(path, Hx=..., Hz=...)"
    try:  # a regular file of bounded size: a FIFO or a device must not block or grow without end
        blob = read_input_file(path, what="--code", limit=MAX_CODE_FILE_BYTES)
    except InputFileError as exc:
        raise BacklineError(str(exc)) from None
    magic = blob[:6]
    if magic == b"\x93NUMPY":
        raise BacklineError(f"--code {path}: holds a single .npy array, not an .npz archive of Hx and Hz; {how}")
    if not magic.startswith(b"PK"):
        raise BacklineError(f"--code {path}: is not an .npz archive (a zip of .npy arrays); {how}")
    _check_shapes(path, blob, how)
    try:
        data = np.load(io.BytesIO(blob), allow_pickle=False)
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


def _check_shapes(path: str, blob: bytes, how: str) -> None:
    """Refuse a matrix too large to check before it is decompressed: its shape is in the .npy header."""
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as z:
            for name in ("Hx", "Hz"):
                if f"{name}.npy" not in z.namelist():
                    continue  # said below, with what the archive holds
                with z.open(f"{name}.npy") as fh:
                    version = np.lib.format.read_magic(fh)
                    if version not in ((1, 0), (2, 0)):
                        raise ValueError(f"{name}.npy has .npy format {version[0]}.{version[1]}; numpy.savez writes 1.0")
                    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                   else np.lib.format.read_array_header_2_0)
                    shape, _, _ = read_header(fh)
                entries = int(np.prod(shape, dtype=np.float64))
                if entries > MAX_MATRIX_ENTRIES:
                    raise BacklineError(f"--code {path}: {name} has shape {tuple(shape)}, {entries:,} entries; at "
                                        f"most {MAX_MATRIX_ENTRIES:,} are read (a code of a few thousand qubits)")
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise BacklineError(f"--code {path}: not a .npz archive of Hx and Hz ({first_line(exc)}); {how}") from None


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
