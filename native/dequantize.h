/* pyggml's own decoders of the block types whose ggml to_float is slow, for pyggml.types.decode.
 *
 * A check of a model decodes every weight once (pyggml.testing.engine.nodes): ggml's dequantize_row_q6_K is plain
 * C in ggml-base, built for any x86-64, and took 2.1-2.4 ns a value on the machine of bench/README.md, 0.8 s of a
 * 2.8 s `check --model` of a Q4_K_M model (its embedding and output are Q6_K). The same arithmetic, the same float
 * operations in the same order (so the same bits), written for the compiler to vectorize, and built a second time
 * for AVX2 where the CPU has it (native/dequantize.c).
 *
 * Only types whose decoding multiplies and never adds: Q4_K's d * q - m may be one fused multiply-add or two
 * roundings, as the compiler of ggml-base chose for its flags, and no decoder of ours could promise ggml's bits.
 *
 * This header is read by tools/gen_ffi.py for the cffi declarations: plain C, no ggml type.
 */

/* n values (a whole number of blocks of 256) of Q6_K blocks (210 bytes each: ql[128], qh[64], int8 scales[16],
 * F16 d) into y: y = d * scale * q, q the 6-bit value minus 32, as ggml's dequantize_row_q6_K. Returns 0 when n is
 * not a whole number of blocks (nothing written), else 1. */
int pyggml_dequantize_q6_k(const void * blocks, float * y, int64_t n);
