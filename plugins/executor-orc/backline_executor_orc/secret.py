"""The executor's shared secret: the trust kit's secret file (``backline_core.sdk``), or the environment.

The file is checked and read as every Backline server reads one (``read_secret_file``: a
regular file of this user with no group/other bits, 16..4096 bytes less one trailing
newline). Without a file, env BACKLINE_EXECUTOR_SECRET holds the secret itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from backline_core.sdk import SecretError, generate_secret_file, lib, read_secret_file

__all__ = ["ENV", "SecretError", "generate_secret_file", "load_secret", "read_secret_file"]

ENV = "BACKLINE_EXECUTOR_SECRET"


def load_secret(path: str | None, environ: Mapping[str, str] | None = None) -> bytes:
    """The file's secret, else env BACKLINE_EXECUTOR_SECRET's; SecretError when neither is usable."""
    if path:
        return read_secret_file(path)
    if environ is None:
        value = os.environb.get(ENV.encode())
    else:
        value = os.fsencode(environ[ENV]) if environ.get(ENV) else None
    if not value:
        raise SecretError(f"no secret: give --secret-file F (a file only you can read) or set {ENV}")
    lo, hi = lib.BL_TRUST_MIN_SECRET_BYTES, lib.BL_TRUST_MAX_SECRET_BYTES
    if not lo <= len(value) <= hi:
        raise SecretError(f"the secret in ${ENV} is {len(value)} bytes; a secret has {lo} to {hi} bytes")
    return value
