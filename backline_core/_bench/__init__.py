"""`backline bench`, by concern (import each name from its module; nothing is loaded here):

* :mod:`.config` -- :class:`BenchConfig`, the one source of the run's defaults, its checks, and
  the command line's options derived from its fields;
* :mod:`.runner` -- :func:`run` and :class:`RoundRunner` (the rounds and the floor, in
  interleaved blocks);
* :mod:`.payloads` -- requests and expected replies (a decoder's ``bench_payloads``);
* :mod:`.report` -- :class:`BenchResult`, :class:`Series`, the text, ``--json``, ``--plot``;
* :mod:`.stats` -- :func:`summary`, the one summary of a series every bench reports;
* :mod:`.progress` -- :class:`Progress`, drawn on a terminal only;
* :mod:`.protocols` -- the callbacks plugin records supply (bench floors, controller benches,
  payload generators);
* :mod:`.code` -- ``--code`` files.
"""
