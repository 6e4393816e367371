"""pyggml's differential suite, apart from the binding itself: registered cases and their NumPy
oracles (by op family), `check` (every case on every backend), `coverage` (which of ggml's ops
the suite reaches), and the fuzzers of the Python layer and of the meta backend's splits."""
