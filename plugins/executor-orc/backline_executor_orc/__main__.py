"""``python -m backline_executor_orc serve ...``: the same as ``backline executor serve ...``."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
