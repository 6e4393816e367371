"""pyggml's differential suite, apart from the binding itself, in three groups by who uses them:

- here, the public helpers for your own ggml tests: `assert_close` (`check`'s comparison as an assertion,
  without pytest), the pytest plugin (`pytest_plugins = ["pyggml.testing.pytest_plugin"]` in a conftest.py
  gives `ggml_backend`, `ggml_meta_backend`, `ggml_runner`, `ggml_ctx` and `ggml_assert_close`), the
  notebooks' re-execution (`notebooks`), and the command lines `check` (every case on every backend) and
  `coverage` (which of ggml's ops the suite reaches);
- `pyggml.testing.engine`, the suite's engine behind `check`: the op database, the oracles, the cases and the
  one verdict, the node checker, workers, `check --model`, `check --repro`;
- `pyggml.testing.fuzzers`, the fuzzers and the RPC attacks (`python -m pyggml fuzz`, `meta-fuzz`,
  `gguf-fuzz`, `rpc-fuzz`).
"""

from pyggml.testing.assertions import assert_close

__all__ = ["assert_close"]
