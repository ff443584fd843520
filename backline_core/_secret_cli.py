"""``backline secret new PATH``: a secret file for nodes started by hand (docs/architecture.md, "Trust model")."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ._cli import Parser, run_command
from ._trust import generate_secret_file


def _new(args: argparse.Namespace) -> int:
    path = generate_secret_file(args.path)
    print(f"wrote a new secret to {path} (mode 0600): give both ends secret_file={path}, and copy it (privately) to "
          "the other host for nodes there")
    return 0


def secret_main(argv: Sequence[str]) -> int:
    """``backline secret``."""
    p = Parser(prog="backline secret", description="Secret files: what both ends of a networked transport, and an "
               "executor and its clients, prove they hold.")
    sub = p.add_subparsers(dest="what", required=True, parser_class=Parser)
    new = sub.add_parser("new", help="write a new random secret to PATH (which must not exist), mode 0600")
    new.add_argument("path", metavar="PATH")
    new.set_defaults(func=_new)
    return run_command(p, argv)
