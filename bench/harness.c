// The C side of bench/binding_overhead.py: the same three measurements done straight on
// ggml, linked against the ggml that pyggml built. Prints one JSON object.
//
//   build_us_per_op  building a graph of N ggml_add nodes (tensor creation + expand)
//   step_us          one graph-reuse step: set 16 floats, compute (1 thread), read 16 floats
//   compute_us       one compute of a mul_mat graph (512x512 by 512x64, then add), all threads

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int cmp_double(const void * a, const void * b) {
    const double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

static double median(double * v, int n) {
    qsort(v, n, sizeof(double), cmp_double);
    return v[n / 2];
}

static double bench_build(int n_ops, int repeat) {
    double t[64];
    for (int r = 0; r < repeat; r++) {
        struct ggml_init_params p = {
            (size_t) (n_ops + 16) * ggml_tensor_overhead() + ggml_graph_overhead_custom(2 * n_ops, false), NULL, true};
        struct ggml_context * ctx = ggml_init(p);
        const double t0 = now_us();
        struct ggml_tensor * a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 16);
        struct ggml_tensor * x = a;
        for (int i = 0; i < n_ops; i++) {
            x = ggml_add(ctx, x, a);
        }
        struct ggml_cgraph * gf = ggml_new_graph_custom(ctx, 2 * n_ops, false);
        ggml_build_forward_expand(gf, x);
        t[r] = (now_us() - t0) / n_ops;
        ggml_free(ctx);
    }
    return median(t, repeat);
}

static double bench_step(int steps) {
    struct ggml_init_params p = {16 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true};
    struct ggml_context * ctx = ggml_init(p);
    struct ggml_tensor * a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 16);
    ggml_set_input(a);
    struct ggml_tensor * y = ggml_scale(ctx, ggml_add(ctx, a, a), 0.5f);
    ggml_set_output(y);
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, y);
    ggml_backend_t cpu = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(cpu, 1);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, cpu);
    float in[16], out[16];
    for (int i = 0; i < 16; i++) in[i] = (float) i;
    for (int i = 0; i < 1000; i++) {  // warm up
        ggml_backend_tensor_set(a, in, 0, sizeof(in));
        ggml_backend_graph_compute(cpu, gf);
        ggml_backend_tensor_get(y, out, 0, sizeof(out));
    }
    const double t0 = now_us();
    for (int i = 0; i < steps; i++) {
        in[0] = (float) i;
        ggml_backend_tensor_set(a, in, 0, sizeof(in));
        ggml_backend_graph_compute(cpu, gf);
        ggml_backend_tensor_get(y, out, 0, sizeof(out));
    }
    const double per_step = (now_us() - t0) / steps;
    if (out[1] != 1.0f) {
        fprintf(stderr, "harness: wrong step result %f\n", out[1]);
        exit(1);
    }
    ggml_backend_buffer_free(buf);
    ggml_backend_free(cpu);
    ggml_free(ctx);
    return per_step;
}

static double bench_compute(int n_threads, int repeat) {
    struct ggml_init_params p = {16 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true};
    struct ggml_context * ctx = ggml_init(p);
    struct ggml_tensor * w = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 512, 512);
    struct ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 512, 64);
    struct ggml_tensor * y = ggml_mul_mat(ctx, w, x);
    struct ggml_tensor * z = ggml_add(ctx, y, y);
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, z);
    ggml_backend_t cpu = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(cpu, n_threads);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, cpu);
    ggml_backend_buffer_clear(buf, 0);
    double t[256];
    for (int i = 0; i < 5; i++) ggml_backend_graph_compute(cpu, gf);
    for (int r = 0; r < repeat; r++) {
        const double t0 = now_us();
        ggml_backend_graph_compute(cpu, gf);
        t[r] = now_us() - t0;
    }
    ggml_backend_buffer_free(buf);
    ggml_backend_free(cpu);
    ggml_free(ctx);
    return median(t, repeat);
}

int main(int argc, char ** argv) {
    const int n_ops = argc > 1 ? atoi(argv[1]) : 10000;
    const int n_threads = argc > 2 ? atoi(argv[2]) : 2;
    printf("{\"build_us_per_op\": %.4f, \"step_us\": %.4f, \"compute_us\": %.2f}\n",
           bench_build(n_ops, 21), bench_step(100000), bench_compute(n_threads, 101));
    return 0;
}
