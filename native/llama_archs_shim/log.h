// pyggml: the part of llama.cpp's common/log.h that tests/test-llama-archs.cpp uses.
//
// llama.cpp's generator of random models (tests/test-llama-archs.cpp, from the pinned sdist) is
// built by pyggml as `llama-archs` (native/llama_archs.cpp). Upstream links it with llama.cpp's
// `common` library (arg parsing, chat templates, downloads: minutes to compile); it needs only
// logging and a token batch, which this folder gives it in a few lines. Not a copy: the same
// names, printing plainly.
#pragma once

#include "ggml.h"

#include <cstdio>

#define LOG_LEVEL_DEBUG  5
#define LOG_LEVEL_TRACE  4
#define LOG_LEVEL_INFO   3
#define LOG_LEVEL_WARN   2
#define LOG_LEVEL_ERROR  1
#define LOG_LEVEL_OUTPUT 0

inline int & pyggml_log_thold() {
    static int thold = LOG_LEVEL_INFO;
    return thold;
}

inline void common_log_set_verbosity_thold(int verbosity) { pyggml_log_thold() = verbosity; }

// as common/log.cpp maps ggml's levels
inline int common_log_get_verbosity(enum ggml_log_level level) {
    switch (level) {
        case GGML_LOG_LEVEL_DEBUG: return LOG_LEVEL_DEBUG;
        case GGML_LOG_LEVEL_INFO:  return LOG_LEVEL_TRACE;
        case GGML_LOG_LEVEL_WARN:  return LOG_LEVEL_WARN;
        case GGML_LOG_LEVEL_ERROR: return LOG_LEVEL_ERROR;
        case GGML_LOG_LEVEL_CONT:  return LOG_LEVEL_TRACE;
        default:                   return LOG_LEVEL_OUTPUT;
    }
}

struct common_log {};
inline common_log * common_log_main() {
    static common_log log;
    return &log;
}
inline void common_log_flush(common_log *) {
    fflush(stdout);
    fflush(stderr);
}

// output (LOG) to stdout, the rest to stderr, as llama.cpp's common log does
#define LOG_TMPL(level, verbosity, ...) \
    do { \
        if ((verbosity) <= pyggml_log_thold()) { \
            fprintf((level) == GGML_LOG_LEVEL_NONE ? stdout : stderr, __VA_ARGS__); \
        } \
    } while (0)

#define LOG(...)     LOG_TMPL(GGML_LOG_LEVEL_NONE,  LOG_LEVEL_OUTPUT, __VA_ARGS__)
#define LOG_DBG(...) LOG_TMPL(GGML_LOG_LEVEL_DEBUG, LOG_LEVEL_DEBUG,  __VA_ARGS__)
#define LOG_INF(...) LOG_TMPL(GGML_LOG_LEVEL_INFO,  LOG_LEVEL_INFO,   __VA_ARGS__)
#define LOG_WRN(...) LOG_TMPL(GGML_LOG_LEVEL_WARN,  LOG_LEVEL_WARN,   __VA_ARGS__)
#define LOG_ERR(...) LOG_TMPL(GGML_LOG_LEVEL_ERROR, LOG_LEVEL_ERROR,  __VA_ARGS__)
