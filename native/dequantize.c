/* pyggml's own decoders of block types (native/dequantize.h). */

#include <stdint.h>

#include "ggml.h"
#include "dequantize.h"

enum { Q6_K_VALUES = 256, Q6_K_BYTES = 128 + 64 + 16 + 2 };

/* One Q6_K block: its 256 values in two halves of 128, each of four runs of 32 (ql's low then high nibbles of two
 * 32-byte runs, with qh's 2-bit pairs on top), each run two groups of 16 with a scale of their own. The scale
 * times d is one product, then times q: (d * scale) * q, the order in which ggml's expression `d * sc[is] * q`
 * multiplies. */
#define PYGGML_Q6_K_BLOCK(block, y)                                                                                  \
    do {                                                                                                             \
        const uint8_t * ql = (block);                                                                                \
        const uint8_t * qh = ql + 128;                                                                               \
        const int8_t * sc = (const int8_t *) (qh + 64);                                                              \
        ggml_fp16_t half;                                                                                            \
        __builtin_memcpy(&half, sc + 16, sizeof half);                                                               \
        const float d = ggml_fp16_to_fp32(half);                                                                     \
        float * out = (y);                                                                                           \
        for (int part = 0; part < 2; part++, out += 128, ql += 64, qh += 32, sc += 8) {                              \
            for (int group = 0; group < 2; group++) {                                                                \
                const float s0 = d * sc[group + 0], s1 = d * sc[group + 2];                                          \
                const float s2 = d * sc[group + 4], s3 = d * sc[group + 6];                                          \
                for (int l = 16 * group; l < 16 * group + 16; l++) {                                                 \
                    out[l + 0] = s0 * (float) ((int) ((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);         \
                    out[l + 32] = s1 * (float) ((int) ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);       \
                    out[l + 64] = s2 * (float) ((int) ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);         \
                    out[l + 96] = s3 * (float) ((int) ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);        \
                }                                                                                                    \
            }                                                                                                        \
        }                                                                                                            \
    } while (0)

static void pyggml_q6_k_plain(const uint8_t * blocks, float * y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        PYGGML_Q6_K_BLOCK(blocks + i * Q6_K_BYTES, y + i * Q6_K_VALUES);
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PYGGML_DEQUANTIZE_AVX2 1
/* the same loop, vectorized by the compiler for AVX2: 8 values a step where the plain build may use 4 (SSE2) */
__attribute__((target("avx2"))) static void pyggml_q6_k_avx2(const uint8_t * blocks, float * y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        PYGGML_Q6_K_BLOCK(blocks + i * Q6_K_BYTES, y + i * Q6_K_VALUES);
    }
}
#endif

int pyggml_dequantize_q6_k(const void * blocks, float * y, int64_t n) {
    if (n < 0 || n % Q6_K_VALUES) {
        return 0;
    }
#ifdef PYGGML_DEQUANTIZE_AVX2
    if (__builtin_cpu_supports("avx2")) {
        pyggml_q6_k_avx2((const uint8_t *) blocks, y, n / Q6_K_VALUES);
        return 1;
    }
#endif
    pyggml_q6_k_plain((const uint8_t *) blocks, y, n / Q6_K_VALUES);
    return 1;
}
