// ggml's own training loop (ggml_opt_fit) on a fully connected net, for bench/training_step.py.
//
//   opt_fit DIR N_IN N_HIDDEN N_OUT N_TRAIN N_TEST BATCH_PHYSICAL BATCH_LOGICAL EPOCHS LR VAL_SPLIT THREADS
//
// DIR holds float32 files written by bench/training_step.py: train_x (N_TRAIN x N_IN), train_y (N_TRAIN x N_OUT,
// one-hot), test_x, test_y, w1 (N_HIDDEN x N_IN), b1, w2 (N_OUT x N_HIDDEN), b2: the initial weights. The net is
// logits = w2 relu(w1 x + b1) + b2, trained with AdamW at a constant learning rate (ggml_opt_fit's loop: its
// shuffles, its split), then evaluated forward only on the test split. Prints one line of key=value pairs:
// the fit's wall time, its optimizer steps, the test loss and accuracy.

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml-opt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static float g_lr;

static struct ggml_opt_optimizer_params constant_lr(void * userdata) {
    (void) userdata;  // ggml_opt_fit passes the epoch
    struct ggml_opt_optimizer_params p = ggml_opt_get_default_optimizer_params(NULL);
    p.adamw.alpha = g_lr;
    return p;
}

static void read_into(const char * dir, const char * name, void * dst, size_t nbytes) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE * f = fopen(path, "rb");
    if (!f || fread(dst, 1, nbytes, f) != nbytes) {
        fprintf(stderr, "cannot read %zu bytes from %s\n", nbytes, path);
        exit(1);
    }
    fclose(f);
}

static void read_tensor(const char * dir, const char * name, struct ggml_tensor * t) {
    void * buf = malloc(ggml_nbytes(t));
    read_into(dir, name, buf, ggml_nbytes(t));
    ggml_backend_tensor_set(t, buf, 0, ggml_nbytes(t));
    free(buf);
}

static ggml_opt_dataset_t dataset(const char * dir, const char * x, const char * y, int64_t n_in, int64_t n_out, int64_t n) {
    ggml_opt_dataset_t ds = ggml_opt_dataset_init(GGML_TYPE_F32, GGML_TYPE_F32, n_in, n_out, n, 1);
    read_into(dir, x, ggml_opt_dataset_data(ds)->data, ggml_nbytes(ggml_opt_dataset_data(ds)));
    read_into(dir, y, ggml_opt_dataset_labels(ds)->data, ggml_nbytes(ggml_opt_dataset_labels(ds)));
    return ds;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char ** argv) {
    if (argc != 13) {
        fprintf(stderr, "usage: %s DIR N_IN N_HIDDEN N_OUT N_TRAIN N_TEST BATCH_PHYSICAL BATCH_LOGICAL EPOCHS LR VAL_SPLIT THREADS\n", argv[0]);
        return 2;
    }
    const char * dir = argv[1];
    const int64_t n_in = atoll(argv[2]), n_hidden = atoll(argv[3]), n_out = atoll(argv[4]);
    const int64_t n_train = atoll(argv[5]), n_test = atoll(argv[6]);
    const int64_t batch = atoll(argv[7]), batch_logical = atoll(argv[8]), epochs = atoll(argv[9]);
    g_lr = (float) atof(argv[10]);
    const float val_split = (float) atof(argv[11]);
    const int n_threads = atoi(argv[12]);

    ggml_backend_t cpu = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(cpu, n_threads);
    ggml_backend_sched_t sched = ggml_backend_sched_new(&cpu, NULL, 1, 4 * GGML_DEFAULT_GRAPH_SIZE, false, true);

    // the weights and the input batch: allocated up front (ggml-opt's static graphs need the inputs so)
    struct ggml_init_params sp = {16 * ggml_tensor_overhead(), NULL, true};
    struct ggml_context * ctx_static = ggml_init(sp);
    struct ggml_tensor * w1 = ggml_new_tensor_2d(ctx_static, GGML_TYPE_F32, n_in, n_hidden);
    struct ggml_tensor * b1 = ggml_new_tensor_1d(ctx_static, GGML_TYPE_F32, n_hidden);
    struct ggml_tensor * w2 = ggml_new_tensor_2d(ctx_static, GGML_TYPE_F32, n_hidden, n_out);
    struct ggml_tensor * b2 = ggml_new_tensor_1d(ctx_static, GGML_TYPE_F32, n_out);
    struct ggml_tensor * x = ggml_new_tensor_2d(ctx_static, GGML_TYPE_F32, n_in, batch);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx_static, cpu);
    read_tensor(dir, "w1", w1);
    read_tensor(dir, "b1", b1);
    read_tensor(dir, "w2", w2);
    read_tensor(dir, "b2", b2);
    ggml_set_param(w1);
    ggml_set_param(b1);
    ggml_set_param(w2);
    ggml_set_param(b2);

    // the forward pass, in a context ggml-opt allocates (and builds its graphs in)
    const size_t size_compute = 3 * ggml_graph_overhead_custom(GGML_DEFAULT_GRAPH_SIZE, true) +
                                3 * GGML_DEFAULT_GRAPH_SIZE * ggml_tensor_overhead();
    struct ggml_init_params cp = {size_compute, NULL, true};
    struct ggml_context * ctx_compute = ggml_init(cp);
    struct ggml_tensor * h = ggml_relu(ctx_compute, ggml_add(ctx_compute, ggml_mul_mat(ctx_compute, w1, x), b1));
    struct ggml_tensor * logits = ggml_add(ctx_compute, ggml_mul_mat(ctx_compute, w2, h), b2);

    ggml_opt_dataset_t train = dataset(dir, "train_x", "train_y", n_in, n_out, n_train);
    ggml_opt_dataset_t test = dataset(dir, "test_x", "test_y", n_in, n_out, n_test);

    const double t0 = now_s();
    ggml_opt_fit(sched, ctx_compute, x, logits, train, GGML_OPT_LOSS_TYPE_CROSS_ENTROPY, GGML_OPT_OPTIMIZER_TYPE_ADAMW,
                 constant_lr, epochs, batch_logical, val_split, /*silent =*/ true);
    const double fit_s = now_s() - t0;
    const int64_t nbatches_logical = n_train / batch_logical;
    const int64_t steps = epochs * (int64_t) ((1.0f - val_split) * nbatches_logical);

    // the test split, forward only (ggml_opt_epoch with everything on the evaluation side)
    struct ggml_context * ctx_eval = ggml_init(cp);
    struct ggml_tensor * h_eval = ggml_relu(ctx_eval, ggml_add(ctx_eval, ggml_mul_mat(ctx_eval, w1, x), b1));
    struct ggml_tensor * logits_eval = ggml_add(ctx_eval, ggml_mul_mat(ctx_eval, w2, h_eval), b2);
    struct ggml_opt_params op = ggml_opt_default_params(sched, GGML_OPT_LOSS_TYPE_CROSS_ENTROPY);
    op.ctx_compute = ctx_eval;
    op.inputs = x;
    op.outputs = logits_eval;
    op.build_type = GGML_OPT_BUILD_TYPE_FORWARD;
    ggml_opt_context_t octx = ggml_opt_init(op);
    ggml_opt_result_t result = ggml_opt_result_init();
    ggml_opt_epoch(octx, test, NULL, result, 0, NULL, NULL);
    double loss, loss_unc, acc, acc_unc;
    ggml_opt_result_loss(result, &loss, &loss_unc);
    ggml_opt_result_accuracy(result, &acc, &acc_unc);

    printf("fit_s=%.6f steps=%lld test_loss=%.9f test_accuracy=%.9f\n", fit_s, (long long) steps, loss, acc);

    ggml_opt_result_free(result);
    ggml_opt_free(octx);
    ggml_opt_dataset_free(train);
    ggml_opt_dataset_free(test);
    ggml_free(ctx_eval);
    ggml_free(ctx_compute);
    ggml_backend_buffer_free(buf);
    ggml_free(ctx_static);
    ggml_backend_sched_free(sched);
    ggml_backend_free(cpu);
    return 0;
}
