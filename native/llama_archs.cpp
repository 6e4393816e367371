// pyggml's `llama-archs`: llama.cpp's own generator of random models, tests/test-llama-archs.cpp
// from the pinned sdist (or the user's llama.cpp tree), built as it is, with one option added.
//
//   llama-archs --list          the models `-o DIR` would write, one `ARCH dense|moe` per line
//   llama-archs ARGS...         upstream's program (`-a ARCH -s SEED -o DIR` saves models)
//
// pyggml.models.llama_archs runs it; `python -m pyggml make-model ARCH FILE` is the way in.

#include <cinttypes>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <regex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

// upstream's main, renamed so that ours can add --list in front of it
#define main llama_archs_upstream_main
#include "test-llama-archs.cpp"
#undef main

// The (arch, moe) pairs save_models writes: the same tests, in the same order (keep in step with
// save_models in test-llama-archs.cpp; tests/test_make_model.py checks a file exists for each).
static void list_models() {
    for (const llm_arch & arch : llm_arch_all()) {
        if (arch == LLM_ARCH_UNKNOWN || arch == LLM_ARCH_GEMMA4 || arch == LLM_ARCH_GEMMA4_ASSISTANT ||
                arch == LLM_ARCH_EAGLE3 || arch == LLM_ARCH_DFLASH) {
            continue;
        }
        for (bool moe : {false, true}) {
            if ((moe && !moe_implemented(arch)) || (!moe && moe_mandatory(arch))) {
                continue;
            }
            if (!llama_model_saver_supports_arch(arch) || !arch_supported(arch)) {
                continue;
            }
            printf("%s %s\n", llm_arch_name(arch), moe ? "moe" : "dense");
        }
    }
}

int main(int argc, char ** argv) {
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        list_models();
        return 0;
    }
    return llama_archs_upstream_main(argc, argv);
}
