/* pyggml's eval callback that copies every node llama.cpp's (or any) scheduler computes, in C.
 *
 * pyggml.drift.Recorder reads every node of a conversation to hold one run against another; in Python that cost a
 * comparison more than the two decodes it compares (about 100 us a node: 3,250 nodes for a 32-token prompt and
 * 4 steps of a 0.6B model). This callback does the reading without Python: it follows the protocol of
 * pyggml.node_reader.NodeReader (nodes the scheduler keeps, ggml patch 0034, are left for later and copied before
 * the next write into shared memory and at the end of each split; others are asked for one at a time) and appends
 * each node's bytes and layout to a log that Python reads once per decode (native/node_copies.c).
 *
 * This header is read by tools/gen_ffi.py for the cffi declarations: plain C, no ggml macro or enum member (64 is
 * the most of GGML_MAX_NAME it keeps, 10 of GGML_MAX_SRC), so that it builds against any ggml tree.
 */

struct pyggml_node_copy {
    const struct ggml_tensor * node;    /* its address: which later node reads it */
    const struct ggml_tensor * src[10]; /* its sources' addresses */
    const struct ggml_tensor * src_of_view[10]; /* where a source is a view, the tensor it views */
    char name[64];
    const char * kind;   /* ggml_op_desc: the op, or the unary or GLU op */
    int32_t op;          /* enum ggml_op */
    int32_t type;        /* enum ggml_type of the bytes copied */
    int64_t ne[4];       /* of the bytes copied (a SET_ROWS: ne[1] is the count of rows it wrote) */
    size_t nb[4];        /* their strides */
    size_t offset;       /* into the log's data */
    size_t nbytes;       /* copied */
    int32_t rows_only;   /* 1: a SET_ROWS's written rows, in the order of its indices */
    int32_t unread;      /* 1: not copied (no memory, or an index outside the destination) */
    const void * at;     /* where the bytes were left in place (in_place): the node's own memory; NULL: copied */
};

struct pyggml_node_copies {
    struct pyggml_node_copy * nodes;
    size_t n_nodes, cap_nodes;
    uint8_t * data;
    size_t n_data, cap_data;
    struct ggml_tensor ** later;        /* kept nodes not copied yet */
    size_t n_later, cap_later;
    int32_t kept_flag;                  /* GGML_TENSOR_FLAG_OBSERVED, 0 on a ggml without patch 0034 */
    int32_t op_set_rows;                /* GGML_OP_SET_ROWS and GGML_OP_GATED_DELTA_NET, from Python: -1 on a */
    int32_t op_gated_delta_net;         /* ggml that has no such op (this file builds against any tree) */
    int32_t out_of_memory;              /* set when a copy did not fit: the log stops growing */
    int32_t in_place;                   /* 1: a kept node in host memory is logged where it lies, not copied, and
                                         * copied before a node that writes into shared memory overwrites it: for a
                                         * comparison made before the next decode, of one ubatch (from Python) */
    size_t n_in_place;                  /* the entries left in place */
};

bool pyggml_copy_nodes(struct ggml_tensor * t, bool ask, void * user_data);
void pyggml_node_copies_clear(struct pyggml_node_copies * log);
/* the bytes of entry c of the log: in the node's memory (in_place) or the log's data */
const uint8_t * pyggml_node_copy_bytes(const struct pyggml_node_copies * log, const struct pyggml_node_copy * c);
/* the logged bytes, now the caller's (free them with pyggml_node_copies_release); the log starts a new buffer of
 * the same capacity, so the next decode's copies need no growing */
uint8_t * pyggml_node_copies_take(struct pyggml_node_copies * log);
void pyggml_node_copies_release(uint8_t * data);

/* the sums a comparison of float32 values b against the reference a reports (pyggml.drift.compare_values, and a
 * verdict's figures: pyggml.testing.engine.verdict.compare), in one pass, float64: out[0] = sum a^2,
 * out[1] = sum (b - a)^2, out[2] = sum b^2, out[3] = max |b - a|, out[4] = max |a|; returns 0 when a value of
 * either is not finite (the caller takes its slower path, which says where) */
int pyggml_compare_f32(const float * a, const float * b, size_t n, double * out);
/* for k < n: entry ia[k] of log a held against entry ib[k] of log b. Where both are float32 values in one dense
 * layout of the same extents: the sums of pyggml_compare_f32 (a the reference) into out[5k .. 5k + 4] and
 * status[k] = 1, or 0 when a value is not finite; otherwise status[k] = -1: the caller reads them. */
void pyggml_compare_logged(const struct pyggml_node_copies * a, const struct pyggml_node_copies * b, const int64_t * ia,
                           const int64_t * ib, size_t n, double * out, int32_t * status);
/* one output's logits b held against the reference's a, as pyggml.drift.logit_stats reports them, in one pass after
 * the maxima, float64: out[0] = KLD sum p_a (log p_a - log p_b), out[1] = max a, out[2] = sum exp(a - max a),
 * out[3] = max b, out[4] = sum exp(b - max b); returns 0 when a value of either is not finite (the caller takes
 * its NumPy path) */
int pyggml_kld_f32(const float * a, const float * b, size_t n, double * out);
void pyggml_node_copies_free(struct pyggml_node_copies * log);
