"""Runnable demonstrations (``backline demo NAME``); each module has ``main(argv) -> int``.

* ``ghz``: the paper's Listing 3 -- a logical GHZ state in the Steane code, decoded on a
  coprocessor (:mod:`.ghz_steane`).
"""

#: demo name -> module under backline_compiler.demos
DEMOS = {"ghz": "ghz_steane"}
