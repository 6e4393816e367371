"""llama.cpp's delta-net layer pieces modelled in pyggml: `conv_state` (the recurrent memory and the
conv-state write of `llm_build_delta_net_base`) and `delta_net` (a whole gated delta-net layer with rollback)."""
