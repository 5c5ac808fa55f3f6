"""The tables of ``samplers_table.py``, one module per question (a, b, c, d)."""
