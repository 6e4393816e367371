"""pyggml: drive the real ggml from Python."""
