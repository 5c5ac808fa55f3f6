"""The benchmark harness: what every table script shares.

- ``fmt``: numbers as text (times, rates, bytes, ratios, N);
- ``table``: a measured figure (``Cell``), a table of them and its text rendering;
- ``machine``: the machine and software line every table starts with, load average included;
- ``timing``: rates, time to a first batch, peak memory, medians and caps;
- ``output``: the raw figures as JSON and the plots (matplotlib);
- ``cli``: the ``--quick``/``--json``/``--plot`` command line and the run loop.

The scripts in ``benchmarks/`` import it as ``harness`` (their folder is on ``sys.path``
when they run); the peers they compare with are adapters in ``benchmarks/peers/``.
"""
