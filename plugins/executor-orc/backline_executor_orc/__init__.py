"""Backline's executor server: an llvmlite ORC JIT behind an authenticated TCP protocol.

``backline executor serve`` (:mod:`.cli`) starts the supervisor (:mod:`.server`), which
authenticates each connection (:mod:`.wire`, :mod:`.secret`) and forks one session
process per client (:mod:`.session`) that links the client's object files and calls
their functions. Nothing heavy is imported here.
"""
