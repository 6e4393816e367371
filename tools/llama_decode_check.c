// Load a GGUF model with llama.cpp (libllama), decode a prompt, then greedily decode a few tokens one
// at a time; print the logits' range and fail (exit 1) unless every logit is finite.
// Build against a llama.cpp build (see docs/make_model.md):
//   cc tools/llama_decode_check.c -I LLAMA/include -I LLAMA/ggml/include -L BUILD/bin -lllama -lggml -lggml-base -o check
// Usage: check MODEL.gguf [N_GENERATE]
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char * text, void * user_data) {
    (void) user_data;
    if (level >= GGML_LOG_LEVEL_WARN) {
        fputs(text, stderr);
    }
}

static bool no_progress(float progress, void * user_data) {
    (void) progress;
    (void) user_data;
    return true;
}

// the logits of batch row i: count the non-finite ones, track the range, return the argmax
static int scan(struct llama_context * ctx, int i, int n_vocab, int * bad, float * lo, float * hi) {
    const float * logits = llama_get_logits_ith(ctx, i);
    int best = 0;
    for (int j = 0; j < n_vocab; j++) {
        if (!isfinite(logits[j])) {
            (*bad)++;
            continue;
        }
        if (logits[j] < *lo) *lo = logits[j];
        if (logits[j] > *hi) *hi = logits[j];
        if (logits[j] > logits[best]) best = j;
    }
    return best;
}

int main(int argc, char ** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [N_GENERATE]\n", argv[0]);
        return 2;
    }
    const int n_gen = argc > 2 ? atoi(argv[2]) : 4;
    llama_log_set(quiet, NULL);
    llama_backend_init();

    struct llama_model_params mp = llama_model_default_params();
    mp.progress_callback = no_progress;  // no dots
    struct llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (model == NULL) {
        fprintf(stderr, "%s: llama.cpp could not load it\n", argv[1]);
        return 1;
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 128;
    cp.n_batch = 64;
    cp.n_threads = cp.n_threads_batch = 2;
    struct llama_context * ctx = llama_init_from_model(model, cp);
    if (ctx == NULL) {
        fprintf(stderr, "%s: llama.cpp could not make a context\n", argv[1]);
        return 1;
    }
    const struct llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    const char * text = "The quick brown fox jumps over the lazy dog.";
    llama_token tokens[64];
    const int n = llama_tokenize(vocab, text, (int) strlen(text), tokens, 64, true, false);
    if (n <= 0) {
        fprintf(stderr, "%s: tokenize failed (%d)\n", argv[1], n);
        return 1;
    }
    int bad = 0;
    float lo = INFINITY, hi = -INFINITY;
    if (llama_decode(ctx, llama_batch_get_one(tokens, n)) != 0) {
        fprintf(stderr, "%s: decoding the prompt failed\n", argv[1]);
        return 1;
    }
    llama_token next = scan(ctx, -1, n_vocab, &bad, &lo, &hi);
    printf("%s: n_vocab %d, prompt %d tokens, generated:", argv[1], n_vocab, n);
    for (int k = 0; k < n_gen; k++) {
        printf(" %d", next);
        if (llama_decode(ctx, llama_batch_get_one(&next, 1)) != 0) {
            fprintf(stderr, "\n%s: decoding token %d failed\n", argv[1], k);
            return 1;
        }
        next = scan(ctx, -1, n_vocab, &bad, &lo, &hi);
    }
    printf("\nlogits in [%g, %g], %d not finite: %s\n", lo, hi, bad, bad ? "FAIL" : "ok");
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return bad ? 1 : 0;
}
