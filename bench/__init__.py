"""quiver's benchmark suite: the Arrow Flight study of the paper, reproduced on one machine.

Run ``python -m bench --quick`` (or ``--full``) from the repository root. It starts
quiver, the Arrow C++ Flight server that pyarrow ships (:mod:`bench.peers.cpp_flight_server`)
and a JSON-over-socket peer (:mod:`bench.peers.json_socket`) on loopback, measures them
with the same clients and data, and writes ``results.csv``, plots and ``BENCHMARKS.md``.
"""
