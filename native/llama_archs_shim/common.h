// pyggml: the part of llama.cpp's common/common.h that tests/test-llama-archs.cpp uses (see log.h
// here for why): common_init and a batch of text tokens, one sequence, through llama.h's public
// batch API as common/common.cpp fills it.
#pragma once

#include "llama.h"
#include "llama-cpp.h"
#include "log.h"

#include <array>
#include <vector>

inline void common_init() {}

struct common_batch {
    struct token {
        llama_token id;
        std::array<llama_pos, GGML_MROPE_SECTIONS> pos;
        llama_seq_id seq_id;
        bool output;
    };
    std::vector<token> tokens;
    llama_batch_ext_ptr batch;

    common_batch(llama_context * ctx) : batch(llama_batch_ext_init(ctx)) {}

    int32_t size() const { return (int32_t) tokens.size(); }

    void clear() { tokens.clear(); }

    int32_t add(llama_token id, llama_pos pos, llama_seq_id seq_id, bool output) {
        tokens.push_back({ id, { pos, 0, 0, 0 }, seq_id, output });
        return size() - 1;
    }

    llama_batch_ext * get() {
        llama_batch_ext * res = batch.get();
        llama_batch_ext_clear(res);
        for (const token & t : tokens) {
            const int32_t idx = llama_batch_ext_add_token(res, t.seq_id, t.id);
            GGML_ASSERT(idx >= 0 && "llama_batch_ext_add_token failed");
            llama_batch_ext_set_pos(res, idx, t.pos.data());
            if (t.output) {
                llama_batch_ext_set_output_logits(res, idx, true);
            }
        }
        return res;
    }
};
