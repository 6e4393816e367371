/* pyggml_copy_nodes: see node_copies.h. A source of the cffi module of its own (CMakeLists.txt), compiled at the
 * build type's optimization: the module's generated wrappers are compiled at -O1, and these loops copy and compare
 * every node of a conversation. */

#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-backend.h"
#include "ggml.h"
#include "node_copies.h"

#define PYGGML_COPY_SRC (GGML_MAX_SRC < 10 ? GGML_MAX_SRC : 10)
#define PYGGML_COPY_NAME (GGML_MAX_NAME < 64 ? GGML_MAX_NAME : 64)

static int pyggml_is_view_op(const struct ggml_tensor * t) {
    return t->op == GGML_OP_VIEW || t->op == GGML_OP_RESHAPE || t->op == GGML_OP_PERMUTE ||
           t->op == GGML_OP_TRANSPOSE || t->op == GGML_OP_NONE;
}

/* a node whose op writes into memory it shares with another tensor (pyggml.node_reader.writes_shared) */
static int pyggml_writes_shared(const struct ggml_tensor * t) {
    return t->view_src != NULL && !pyggml_is_view_op(t);
}

static int pyggml_grow(void ** p, size_t * cap, size_t need, size_t item) {
    if (need <= *cap) {
        return 1;
    }
    size_t n = *cap ? *cap : 64;
    while (n < need) {
        n *= 2;
    }
    void * q = realloc(*p, n * item);
    if (q == NULL) {
        return 0;
    }
    *p = q;
    *cap = n;
    return 1;
}

/* bytes [offset, offset + size) of t's memory into dst */
static void pyggml_read(const struct ggml_tensor * t, void * dst, size_t offset, size_t size) {
    if (t->buffer == NULL || ggml_backend_buffer_is_host(t->buffer)) {
        memcpy(dst, (const char *) t->data + offset, size);
    } else {
        ggml_backend_tensor_get(t, dst, offset, size);
    }
}

/* the rows of t its op writes: all of them, but a GATED_DELTA_NET of fewer tokens than its K snapshot slots
 * writes its attention rows and the first n_tokens slots only (ggml-cpu: "older slots are caller-owned") */
static int64_t pyggml_written_rows(const struct pyggml_node_copies * log, const struct ggml_tensor * t) {
    const struct ggml_tensor * v = t->src[2];
    if ((int32_t) t->op != log->op_gated_delta_net || v == NULL || !ggml_is_contiguous(t) || t->ne[2] * t->ne[3] != 1) {
        return t->ne[1];
    }
    const int64_t K = ((const int32_t *) t->op_params)[0];
    const int64_t slots = v->ne[2] < K ? v->ne[2] : K;
    const int64_t rows = v->ne[2] * v->ne[3] + slots * v->ne[0] * v->ne[3];
    return rows < t->ne[1] ? rows : t->ne[1];
}

static void pyggml_copy_one(struct pyggml_node_copies * log, const struct ggml_tensor * t) {
    if (pyggml_is_view_op(t) || log->out_of_memory) {
        return;
    }
    if (!pyggml_grow((void **) &log->nodes, &log->cap_nodes, log->n_nodes + 1, sizeof(struct pyggml_node_copy))) {
        log->out_of_memory = 1;
        return;
    }
    struct pyggml_node_copy * c = &log->nodes[log->n_nodes];
    memset(c, 0, sizeof(*c));
    c->node = t;
    for (int i = 0; i < PYGGML_COPY_SRC; i++) {
        c->src[i] = t->src[i];
        c->src_of_view[i] = t->src[i] != NULL ? t->src[i]->view_src : NULL;
    }
    memcpy(c->name, t->name, PYGGML_COPY_NAME);
    c->name[sizeof(c->name) - 1] = 0;
    c->kind = ggml_op_desc(t);
    c->op = t->op;
    c->type = t->type;
    for (int i = 0; i < 4; i++) {
        c->ne[i] = t->ne[i];
        c->nb[i] = t->nb[i];
    }
    c->offset = log->n_data;
    if (t->data == NULL) {
        c->unread = 1;
        log->n_nodes++;
        return;
    }
    const struct ggml_tensor * idx = t->src[1];
    const int rows_only = (int32_t) t->op == log->op_set_rows && idx != NULL && t->ne[2] * t->ne[3] == 1 &&
                          idx->ne[1] * idx->ne[2] * idx->ne[3] == 1 && idx->data != NULL &&
                          (idx->type == GGML_TYPE_I64 || idx->type == GGML_TYPE_I32) && ggml_is_contiguous(idx);
    if (rows_only) {
        /* a KV cache layer: the rows this step wrote (pyggml.drift.node_values) */
        const int64_t n = idx->ne[0];
        const size_t width = ggml_row_size(t->type, t->ne[0]);
        const size_t isize = ggml_type_size(idx->type);
        if (!pyggml_grow((void **) &log->data, &log->cap_data, log->n_data + n * (width + isize), 1)) {
            log->out_of_memory = 1;
            return;
        }
        uint8_t * rows = log->data + log->n_data + n * width; /* the indices, read first, just past the rows */
        pyggml_read(idx, rows, 0, n * isize);
        for (int64_t i = 0; i < n; i++) {
            const int64_t r = idx->type == GGML_TYPE_I64 ? ((const int64_t *) rows)[i] : ((const int32_t *) rows)[i];
            if (r < 0 || r >= t->ne[1]) {
                c->unread = 1;
                log->n_nodes++;
                return;
            }
            pyggml_read(t, log->data + log->n_data + i * width, (size_t) r * t->nb[1], width);
        }
        c->rows_only = 1;
        c->ne[1] = n;
        c->nb[2] = c->nb[3] = n * width;
        c->nb[1] = width;
        c->nbytes = n * width;
    } else {
        size_t size = ggml_nbytes(t);
        const int64_t rows = pyggml_written_rows(log, t);
        if (rows < t->ne[1]) { /* the rows after are the caller's: as the memory was (pyggml.drift.written_rows) */
            c->ne[1] = rows;
            c->nb[2] = c->nb[3] = rows * t->nb[1];
            size = rows * t->nb[1];
        }
        c->nbytes = size;
        if (log->in_place && (t->flags & log->kept_flag) && t->buffer != NULL && ggml_backend_buffer_is_host(t->buffer) &&
            !pyggml_writes_shared(t)) {
            /* kept: no later node of this graph computes into its memory (patch 0034) */
            c->at = t->data;
            log->n_in_place++;
            log->n_nodes++;
            return;
        }
        if (!pyggml_grow((void **) &log->data, &log->cap_data, log->n_data + size, 1)) {
            log->out_of_memory = 1;
            return;
        }
        pyggml_read(t, log->data + log->n_data, 0, size);
    }
    log->n_data += c->nbytes;
    log->n_nodes++;
}

/* copy the entries left in place whose memory node t is about to write (a write into shared memory: an in-place
 * op over a kept node) */
static void pyggml_copy_overwritten(struct pyggml_node_copies * log, const struct ggml_tensor * t) {
    if (log->n_in_place == 0 || t->data == NULL || (t->buffer != NULL && !ggml_backend_buffer_is_host(t->buffer))) {
        return;
    }
    const uint8_t * lo = (const uint8_t *) t->data;
    const uint8_t * hi = lo + ggml_nbytes(t);
    for (size_t i = 0; i < log->n_nodes && log->n_in_place > 0; i++) {
        struct pyggml_node_copy * c = &log->nodes[i];
        const uint8_t * s = (const uint8_t *) c->at;
        if (s == NULL || !(s < hi && lo < s + c->nbytes)) {
            continue;
        }
        if (!pyggml_grow((void **) &log->data, &log->cap_data, log->n_data + c->nbytes, 1)) {
            log->out_of_memory = 1;
            return;
        }
        memcpy(log->data + log->n_data, s, c->nbytes);
        c->offset = log->n_data;
        c->at = NULL;
        log->n_data += c->nbytes;
        log->n_in_place--;
    }
}

static void pyggml_copy_later(struct pyggml_node_copies * log) {
    for (size_t i = 0; i < log->n_later; i++) {
        pyggml_copy_one(log, log->later[i]);
    }
    log->n_later = 0;
}

bool pyggml_copy_nodes(struct ggml_tensor * t, bool ask, void * user_data) {
    struct pyggml_node_copies * log = (struct pyggml_node_copies *) user_data;
    if (ask) {
        if (log->n_later > 0 || (t->flags & log->kept_flag)) {
            if (!pyggml_writes_shared(t)) {
                if (!pyggml_grow((void **) &log->later, &log->cap_later, log->n_later + 1, sizeof(*log->later))) {
                    log->out_of_memory = 1;
                    return true; /* read nothing more, but let the compute go on node by node */
                }
                log->later[log->n_later++] = t;
                return false;
            }
            pyggml_copy_later(log); /* every node before t ran (patch 0034): copy them before t writes */
        }
        if (pyggml_writes_shared(t)) {
            pyggml_copy_overwritten(log, t);
        }
        return !pyggml_is_view_op(t);
    }
    if (log->n_later > 0) { /* the end of a split: t is among them */
        pyggml_copy_later(log);
        return true;
    }
    pyggml_copy_one(log, t);
    return true;
}

void pyggml_node_copies_clear(struct pyggml_node_copies * log) {
    log->n_nodes = log->n_data = log->n_later = log->n_in_place = 0;
}

const uint8_t * pyggml_node_copy_bytes(const struct pyggml_node_copies * log, const struct pyggml_node_copy * c) {
    return c->at != NULL ? (const uint8_t *) c->at : log->data + c->offset;
}

uint8_t * pyggml_node_copies_take(struct pyggml_node_copies * log) {
    uint8_t * data = log->data;
    log->data = log->cap_data ? (uint8_t *) malloc(log->cap_data) : NULL;
    if (log->data == NULL) {
        log->cap_data = 0;
    }
    log->n_data = 0;
    return data;
}

void pyggml_node_copies_release(uint8_t * data) {
    free(data);
}

/* the sums of pyggml_compare_f32 over a[from..n), b[from..n) added to s (sum a^2, sum d^2, sum b^2, max |d|,
 * max |a|), one value at a time; returns 0 when a value is not finite */
static int pyggml_compare_scalar(const float * a, const float * b, size_t from, size_t n, double * s) {
    int finite = 1;
    for (size_t i = from; i < n; i++) {
        const double x = a[i], y = b[i], d = y - x;
        finite &= (x - x == 0) & (y - y == 0); /* inf - inf and nan - nan are nan */
        s[0] += x * x;
        s[1] += d * d;
        s[2] += y * y;
        s[3] = fabs(d) > s[3] ? fabs(d) : s[3];
        s[4] = fabs(x) > s[4] ? fabs(x) : s[4];
    }
    return finite;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define PYGGML_COMPARE_AVX2 1

/* pyggml_compare_f32 in AVX2 and FMA, 8 values a step in two sets of 4 float64 lanes: the scalar loop's five
 * chains of dependent float64 sums ran at 4.2 ns a value on the machine of bench/README.md, NumPy's two dot
 * products over the same arrays at 0.7 (the scalar loop is what a build for any x86-64 compiles to). The order
 * of the sums differs from the scalar loop's: the last bits may. */
__attribute__((target("avx2,fma"))) static int pyggml_compare_f32_avx2(const float * a, const float * b, size_t n,
                                                                       double * out) {
    const __m256d sign = _mm256_set1_pd(-0.0);
    __m256d aa[2], dd[2], bb[2], worst[2], scale[2], bad[2];
    for (int j = 0; j < 2; j++) {
        aa[j] = dd[j] = bb[j] = worst[j] = scale[j] = bad[j] = _mm256_setzero_pd();
    }
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int j = 0; j < 2; j++) {
            const __m256d x = _mm256_cvtps_pd(_mm_loadu_ps(a + i + 4 * j));
            const __m256d y = _mm256_cvtps_pd(_mm_loadu_ps(b + i + 4 * j));
            const __m256d d = _mm256_sub_pd(y, x);
            /* x - x is 0 for a finite x, NaN for an infinity or NaN: the sum stays 0 while all are finite */
            bad[j] = _mm256_add_pd(bad[j], _mm256_add_pd(_mm256_sub_pd(x, x), _mm256_sub_pd(y, y)));
            aa[j] = _mm256_fmadd_pd(x, x, aa[j]);
            dd[j] = _mm256_fmadd_pd(d, d, dd[j]);
            bb[j] = _mm256_fmadd_pd(y, y, bb[j]);
            worst[j] = _mm256_max_pd(worst[j], _mm256_andnot_pd(sign, d));
            scale[j] = _mm256_max_pd(scale[j], _mm256_andnot_pd(sign, x));
        }
    }
    double lanes[6][8];
    _mm256_storeu_pd(lanes[0], aa[0]), _mm256_storeu_pd(lanes[0] + 4, aa[1]);
    _mm256_storeu_pd(lanes[1], dd[0]), _mm256_storeu_pd(lanes[1] + 4, dd[1]);
    _mm256_storeu_pd(lanes[2], bb[0]), _mm256_storeu_pd(lanes[2] + 4, bb[1]);
    _mm256_storeu_pd(lanes[3], worst[0]), _mm256_storeu_pd(lanes[3] + 4, worst[1]);
    _mm256_storeu_pd(lanes[4], scale[0]), _mm256_storeu_pd(lanes[4] + 4, scale[1]);
    _mm256_storeu_pd(lanes[5], bad[0]), _mm256_storeu_pd(lanes[5] + 4, bad[1]);
    double nonfinite = 0;
    for (int k = 0; k < 5; k++) {
        out[k] = 0;
    }
    for (int k = 0; k < 8; k++) {
        out[0] += lanes[0][k];
        out[1] += lanes[1][k];
        out[2] += lanes[2][k];
        out[3] = lanes[3][k] > out[3] ? lanes[3][k] : out[3];
        out[4] = lanes[4][k] > out[4] ? lanes[4][k] : out[4];
        nonfinite += lanes[5][k];
    }
    return pyggml_compare_scalar(a, b, i, n, out) & (nonfinite == 0);
}
#endif

int pyggml_compare_f32(const float * a, const float * b, size_t n, double * out) {
#ifdef PYGGML_COMPARE_AVX2
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        return pyggml_compare_f32_avx2(a, b, n, out);
    }
#endif
    for (int k = 0; k < 5; k++) {
        out[k] = 0;
    }
    return pyggml_compare_scalar(a, b, 0, n, out);
}

/* entry c holds float32 values in one dense layout, all of them read */
static int pyggml_dense_f32(const struct pyggml_node_copy * c) {
    return !c->unread && c->type == GGML_TYPE_F32 && c->nb[0] == 4 && c->nb[1] == 4 * (size_t) c->ne[0] &&
           c->nb[2] == c->nb[1] * (size_t) c->ne[1] && c->nb[3] == c->nb[2] * (size_t) c->ne[2] &&
           c->nbytes == c->nb[3] * (size_t) c->ne[3];
}

void pyggml_compare_logged(const struct pyggml_node_copies * a, const struct pyggml_node_copies * b, const int64_t * ia,
                           const int64_t * ib, size_t n, double * out, int32_t * status) {
    for (size_t k = 0; k < n; k++) {
        const struct pyggml_node_copy * x = &a->nodes[ia[k]];
        const struct pyggml_node_copy * y = &b->nodes[ib[k]];
        int same = pyggml_dense_f32(x) && pyggml_dense_f32(y) && x->rows_only == y->rows_only;
        for (int i = 0; i < 4 && same; i++) {
            same = x->ne[i] == y->ne[i];
        }
        status[k] = -1;
        if (same) {
            const float * va = (const float *) pyggml_node_copy_bytes(a, x);
            const float * vb = (const float *) pyggml_node_copy_bytes(b, y);
            status[k] = pyggml_compare_f32(va, vb, x->nbytes / 4, out + 5 * k) ? 1 : 0;
        }
    }
}

int pyggml_kld_f32(const float * a, const float * b, size_t n, double * out) {
    double ma = -INFINITY, mb = -INFINITY;
    int finite = 1;
    for (size_t i = 0; i < n; i++) {
        const double x = a[i], y = b[i];
        finite &= (x - x == 0) & (y - y == 0);
        ma = x > ma ? x : ma;
        mb = y > mb ? y : mb;
    }
    if (!finite || n == 0) {
        return 0;
    }
    double sa = 0, sb = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        const double la = a[i] - ma, lb = b[i] - mb, ea = exp(la);
        sa += ea;
        sb += exp(lb);
        s += ea * (la - lb);
    }
    /* sum p_a (log p_a - log p_b), with log p = l - log(sum exp l) and sum p_a = 1; >= 0 as a KLD is */
    const double kld = s / sa - log(sa) + log(sb);
    out[0] = kld > 0 ? kld : 0;
    out[1] = ma;
    out[2] = sa;
    out[3] = mb;
    out[4] = sb;
    return 1;
}

void pyggml_node_copies_free(struct pyggml_node_copies * log) {
    free(log->nodes);
    free(log->data);
    free(log->later);
    memset(log, 0, sizeof(*log));
}
