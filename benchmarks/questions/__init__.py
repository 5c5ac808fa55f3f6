"""The questions of ``peers_table.py``, one module each (``q1_index`` ... ``q5_capability``).

Each module has ``KEY``, ``TITLE``, ``run(out, quick)`` that measures every peer able to
answer it side by side in this process and emits its tables, and ``plot(path, tables,
machine)`` that draws one figure.
"""
