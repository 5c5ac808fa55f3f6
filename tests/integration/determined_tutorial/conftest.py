# train.py is Determined's script (its data and model modules sit in examples/determined_mnist):
# tests/integration/test_determined_tutorial.py reads and imports it itself.
collect_ignore = ["train.py"]
