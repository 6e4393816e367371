"""The differential suite's engine, for `python -m pyggml check` (pyggml.testing.check) and pyggml's own tests:
the op database (opdb) and its NumPy oracles, the cases and the one verdict, the node checker (nodes), the
session that runs cases on backends, worker processes, `check --model`, `check --repro`, grad and perf modes,
guard bytes, JUnit reports and the child-process runner. Not an API of its own: use it through `check`.
"""
