"""conv_state cases: the seed's delta-net conv-state rollback (registered by pyggml.conv_state)."""
