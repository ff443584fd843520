"""Runnable demonstrations (``backline demo NAME``); each module has ``main(argv) -> int``.

* ``ghz``: the paper's Listing 3 -- a logical GHZ state in the Steane code, decoded on a
  coprocessor (:mod:`.ghz_steane`).
"""

#: demo name -> module under backline_compiler.demos
DEMOS = {"ghz": "ghz_steane"}


def main(argv: list[str]) -> int:
    """``backline demo NAME ARGS``: the demo NAME's own command line."""
    import importlib
    import sys

    if not argv:
        print(f"backline: error: demo: give a demo: {', '.join(DEMOS)} (backline demo NAME --help)", file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help"):
        print(f"usage: backline demo NAME [ARGS]  (NAME: {', '.join(DEMOS)}; backline demo NAME --help)")
        return 0
    module = DEMOS.get(argv[0])
    if module is None:
        print(f"backline: error: demo: unknown demo {argv[0]!r}; available: {', '.join(DEMOS)}", file=sys.stderr)
        return 2
    return int(importlib.import_module(f"backline_compiler.demos.{module}").main(argv[1:]))
