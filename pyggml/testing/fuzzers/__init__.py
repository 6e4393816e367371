"""The fuzzers and the RPC attacks, for `python -m pyggml fuzz | meta-fuzz | gguf-fuzz | rpc-fuzz` and pyggml's own
tests: random calls of the Python layer, random splits of a meta device, random GGUF files, random and hostile
graphs for ggml's RPC server (with the wire protocol they speak, rpc_wire). docs/fuzzing.md says what each finds.
"""
