"""pyggml's differential suite, apart from the binding itself: the op database (`opdb`: one spec per
op, from which the cases, grad cases, bad calls, fuzz hints and node readers come), the NumPy oracles
(by op family), one verdict (`verdict`), every node of a graph against its oracle (`nodes`), `check`
(every case on every backend; `junit` writes its records as JUnit XML), `coverage` (which of ggml's ops the suite reaches), the fuzzers of the Python layer, the meta
backend's splits, the RPC server and GGUF files (`python -m pyggml fuzz`, `meta-fuzz`, `rpc-fuzz`,
`gguf-fuzz`; `child` runs their work that may die in a child process), the notebooks' re-execution
(`notebooks`), and pytest fixtures for your own ggml tests: `pytest_plugins =
["pyggml.testing.pytest_plugin"]` in a conftest.py gives `ggml_backend`, `ggml_meta_backend`,
`ggml_runner`, `ggml_ctx` and `ggml_assert_close` (see `pyggml.testing.pytest_plugin`);
`assert_close` is `check`'s comparison as an assertion, without pytest."""

from pyggml.testing.assertions import assert_close

__all__ = ["assert_close"]
