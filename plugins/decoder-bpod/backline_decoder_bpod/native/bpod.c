/*
 * BP+OSD decoding of one binary parity-check matrix, allocation-free per decode.
 *
 * Belief propagation (min-sum or product-sum, flooding schedule) runs on the Tanner graph
 * in CSR form; if its hard decision does not satisfy the syndrome, ordered-statistics
 * decoding picks an information set greedily in order of the posterior log-likelihoods
 * (most-likely-flipped first), solves on it with bit-packed GF(2) elimination (OSD-0),
 * and optionally sweeps flips of the remaining columns (OSD-CS, OSD-E) for the solution
 * with the least cost sum(log 1/p_i). Floating-point sums follow a fixed order (see the
 * comments) so results are reproducible bit for bit.
 */
#define _GNU_SOURCE
#include "bpod.h"

#include <backline/sdk/dem_reply.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { BP_MIN_SUM = 0, BP_PRODUCT_SUM = 1 };
enum { OSD_NONE = 0, OSD_0 = 1, OSD_CS = 2, OSD_E = 3 };

struct bpod_decoder {
    uint32_t m, n, nnz;
    uint32_t bp_method, max_iter, osd_method, osd_order;
    double ms_scaling;
    /* Tanner graph: edge e = CSR position (row ascending, column ascending in a row). */
    uint32_t *row_ptr, *col_idx;   /* m+1, nnz */
    uint32_t *edge_row;            /* nnz */
    uint32_t *col_ptr, *col_edges; /* n+1, nnz: edges of each column, row ascending */
    double *init_llr, *cost;       /* n: log((1-p)/p), log(1/p) */
    /* BP state */
    double *b2c, *c2b, *llr, *aux; /* nnz, nnz, n, nnz (product-sum: tanh values) */
    uint8_t *syndrome, *hard;      /* m, n */
    uint8_t *parity;               /* m: the syndrome of the hard decision */
    double *colbuf;                /* the largest column degree: prefix sums of one column */
    uint32_t iterations;
    /* OSD state, bit-packed over rows (words_m) and over pivots (words_p) */
    uint32_t words_m, words_p, rank_cap;
    uint32_t rank;                 /* rank of H over GF(2): no column is independent of that many pivots */
    uint64_t *colbits;             /* n * words_m: column j of H */
    uint64_t *basis_vec;           /* rank_cap * words_m */
    uint64_t *basis_comb;          /* rank_cap * words_p: which pivots XOR to this vector */
    int32_t *basis_at;             /* m: basis index whose leading row is this row, or -1 */
    uint64_t *leading;             /* words_m: the rows that lead a basis vector */
    uint32_t *order, *sort_tmp;    /* n */
    uint32_t *pivots, *nonpivots;  /* rank_cap, n */
    uint32_t n_pivots, n_nonpivots;
    uint64_t *v, *comb, *target;   /* scratch: words_m, words_p, words_m */
    uint8_t *x, *best;             /* n */
    /* OSD-CS/OSD-E candidates in "sorted pivot space": bit q is the q-th pivot in column order */
    uint32_t *pos_of_slot, *col_at_pos; /* rank_cap: a pivot slot's position, a position's column */
    uint64_t *scomb;               /* rank_cap * words_p: basis_comb of each slot in sorted space */
    uint64_t *x0, *cand, *best_p;  /* words_p each: OSD-0's pivots, a candidate's, the best one's */
    uint64_t *wcomb;               /* 64 * words_p: the sorted combination of each of the first w non-pivots */
    uint32_t best_flips[64], best_count;
};

static __thread char last_error[512];

BL_API const char *bpod_last_error(void) { return last_error; }
BL_API uint32_t bpod_checks(const bpod_decoder *d) { return d->m; }
BL_API uint32_t bpod_bits(const bpod_decoder *d) { return d->n; }
BL_API uint32_t bpod_last_iterations(const bpod_decoder *d) { return d->iterations; }
BL_API const double *bpod_last_llr(const bpod_decoder *d) { return d->llr; }

static void *fail_null(const char *msg) {
    snprintf(last_error, sizeof last_error, "%s", msg);
    return NULL;
}

/* ---- construction ---------------------------------------------------------------------- */

struct reader {
    const uint8_t *p, *end;
};

static int take(struct reader *r, void *out, size_t bytes) {
    if ((size_t)(r->end - r->p) < bytes) return 0;
    memcpy(out, r->p, bytes);
    r->p += bytes;
    return 1;
}

BL_API void bpod_free(bpod_decoder *d) {
    if (!d) return;
    void *blocks[] = {d->row_ptr, d->col_idx, d->edge_row, d->col_ptr, d->col_edges, d->init_llr, d->cost,
                      d->b2c, d->c2b, d->llr, d->aux, d->syndrome, d->hard, d->colbits, d->basis_vec, d->leading,
                      d->basis_comb, d->basis_at, d->order, d->sort_tmp, d->pivots, d->nonpivots, d->v,
                      d->comb, d->target, d->x, d->best, d->pos_of_slot, d->col_at_pos,
                      d->scomb, d->x0, d->cand, d->best_p, d->wcomb, d->parity, d->colbuf};
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; ++i) free(blocks[i]);
    free(d);
}

static void choose_pivots(bpod_decoder *d);

static bpod_decoder *create_from(struct reader *r) {
    uint32_t head[8];
    double ms;
    if (!take(r, head, sizeof head) || !take(r, &ms, sizeof ms)) return fail_null("truncated decoder section");
    uint32_t m = head[0], n = head[1], nnz = head[2];
    if (n == 0 || m > (1u << 24) || n > (1u << 24) || nnz > (1u << 28))
        return fail_null("matrix dimensions out of range");
    if (head[3] > BP_PRODUCT_SUM || head[5] > OSD_E) return fail_null("unknown bp_method or osd_method");
    bpod_decoder *d = calloc(1, sizeof *d);
    if (!d) return fail_null("out of memory");
    d->m = m, d->n = n, d->nnz = nnz;
    d->bp_method = head[3], d->max_iter = head[4] ? head[4] : n, d->osd_method = head[5], d->osd_order = head[6];
    d->ms_scaling = ms;
    d->words_m = (m + 63) / 64 ? (m + 63) / 64 : 1;
    d->rank_cap = m < n ? m : n;
    d->words_p = (d->rank_cap + 63) / 64 ? (d->rank_cap + 63) / 64 : 1;
#define ALLOC(field, count)                                                              \
    do {                                                                                 \
        size_t count_ = (count);                                                         \
        if (!(d->field = calloc(count_ ? count_ : 1, sizeof *d->field))) goto oom;       \
    } while (0)
    ALLOC(row_ptr, m + 1);
    ALLOC(col_idx, nnz);
    ALLOC(edge_row, nnz);
    ALLOC(col_ptr, n + 1);
    ALLOC(col_edges, nnz);
    ALLOC(init_llr, n);
    ALLOC(cost, n);
    ALLOC(b2c, nnz);
    ALLOC(c2b, nnz);
    ALLOC(llr, n);
    ALLOC(aux, 2 * (size_t)nnz);
    ALLOC(syndrome, m);
    ALLOC(hard, n);
    ALLOC(colbits, (size_t)n * d->words_m);
    ALLOC(basis_vec, (size_t)d->rank_cap * d->words_m);
    ALLOC(basis_comb, (size_t)d->rank_cap * d->words_p);
    ALLOC(basis_at, m);
    ALLOC(leading, d->words_m);
    ALLOC(order, n);
    ALLOC(sort_tmp, n);
    ALLOC(pivots, d->rank_cap);
    ALLOC(nonpivots, n);
    ALLOC(v, d->words_m);
    ALLOC(comb, d->words_p);
    ALLOC(target, d->words_m);
    ALLOC(x, n);
    ALLOC(best, n);
    ALLOC(parity, m);
    ALLOC(pos_of_slot, d->rank_cap);
    ALLOC(col_at_pos, d->rank_cap);
    ALLOC(scomb, (size_t)d->rank_cap * d->words_p);
    ALLOC(x0, d->words_p);
    ALLOC(cand, d->words_p);
    ALLOC(best_p, d->words_p);
    ALLOC(wcomb, 64 * (size_t)d->words_p);
#undef ALLOC
    for (uint32_t j = 0; j < n; ++j) {
        double p;
        if (!take(r, &p, sizeof p)) goto truncated;
        if (!(p > 0.0 && p < 1.0)) {
            bpod_free(d);
            return fail_null("channel probabilities must lie in (0, 1)");
        }
        d->init_llr[j] = log((1.0 - p) / p);
        d->cost[j] = log(1.0 / p);
    }
    if (!take(r, d->row_ptr, sizeof(uint32_t) * (m + 1)) || !take(r, d->col_idx, sizeof(uint32_t) * (size_t)nnz))
        goto truncated;
    if (d->row_ptr[0] != 0 || d->row_ptr[m] != nnz) goto malformed;
    for (uint32_t i = 0; i < m; ++i) {
        if (d->row_ptr[i + 1] < d->row_ptr[i]) goto malformed;
        for (uint32_t e = d->row_ptr[i]; e < d->row_ptr[i + 1]; ++e) {
            if (d->col_idx[e] >= n || (e > d->row_ptr[i] && d->col_idx[e] <= d->col_idx[e - 1])) goto malformed;
            d->edge_row[e] = i;
            d->col_ptr[d->col_idx[e] + 1]++;
            d->colbits[(size_t)d->col_idx[e] * d->words_m + i / 64] |= 1ull << (i % 64);
        }
    }
    for (uint32_t j = 0; j < n; ++j) d->col_ptr[j + 1] += d->col_ptr[j];
    {
        uint32_t deg = 1;
        for (uint32_t j = 0; j < n; ++j)
            if (d->col_ptr[j + 1] - d->col_ptr[j] > deg) deg = d->col_ptr[j + 1] - d->col_ptr[j];
        if (!(d->colbuf = calloc(deg, sizeof *d->colbuf))) goto oom;
    }
    {
        /* Edges of each column in row order: CSR is row-major, so a running fill does it. */
        uint32_t *fill = d->order; /* borrowed scratch */
        memcpy(fill, d->col_ptr, sizeof(uint32_t) * n);
        for (uint32_t e = 0; e < nnz; ++e) d->col_edges[fill[d->col_idx[e]]++] = e;
    }
    /* H's rank, once: the greedy pivot choice in column order stops there on every decode */
    d->rank = d->rank_cap;
    for (uint32_t j = 0; j < n; ++j) d->order[j] = j;
    choose_pivots(d);
    d->rank = d->n_pivots;
    return d;
truncated:
    bpod_free(d);
    return fail_null("truncated decoder section");
malformed:
    bpod_free(d);
    return fail_null("malformed CSR matrix (row pointers or column indices)");
oom:
    bpod_free(d);
    return fail_null("out of memory");
}

static int read_header(struct reader *r, uint32_t *sections) {
    uint32_t h[4];
    if (!take(r, h, sizeof h)) return 0;
    if (h[0] != BPOD_MAGIC || h[1] != BPOD_VERSION) {
        snprintf(last_error, sizeof last_error, "not a version-%u BPOD parameter blob", BPOD_VERSION);
        return 0;
    }
    *sections = h[2];
    return 1;
}

BL_API bpod_decoder *bpod_create(const uint8_t *blob, uint64_t len) {
    struct reader r = {blob, blob + len};
    uint32_t sections;
    if (!blob || !read_header(&r, &sections)) return last_error[0] ? NULL : fail_null("truncated header");
    if (sections != 1) return fail_null("bpod_create takes exactly one decoder section");
    bpod_decoder *d = create_from(&r);
    if (d && r.p != r.end) {
        bpod_free(d);
        return fail_null("trailing bytes after the decoder section");
    }
    return d;
}

/* ---- belief propagation ----------------------------------------------------------------- */

/* One check's min-sum messages over its edges lo..lo+deg. Inlined with a constant deg for the common
 * small degrees (the same operations in the same order). */
static inline __attribute__((always_inline)) void check_min_sum(const double *b2c, double *c2b, uint32_t lo,
                                                                uint32_t deg, unsigned parity, double alpha) {
    double min1 = DBL_MAX, min2 = DBL_MAX;
    uint32_t arg1 = 0;
    for (uint32_t k = 0; k < deg; ++k) {
        /* the two smallest |messages|, without branches (|messages| are data-dependent): when
         * a < min1, min1 becomes the second smallest */
        double a = fabs(b2c[lo + k]);
        uint32_t lt = a < min1;
        double hi2 = min1 > a ? min1 : a; /* maxsd, minsd: no NaN here */
        arg1 ^= (arg1 ^ k) & (0u - lt);
        min2 = hi2 < min2 ? hi2 : min2;
        min1 = a < min1 ? a : min1;
        parity ^= b2c[lo + k] <= 0.0;
    }
    /* other * (sign * alpha) = (other * alpha) * sign exactly: multiplying by -1 only negates */
    static const double sign[2] = {1.0, -1.0};
    double m1 = min1 * alpha, m2 = min2 * alpha;
    for (uint32_t k = 0; k < deg; ++k) {
        double v = k == arg1 ? m2 : m1;
        /* the sign excludes this edge's own message */
        c2b[lo + k] = v * sign[parity ^ (b2c[lo + k] <= 0.0)];
    }
}

static void check_update_min_sum(bpod_decoder *d, double alpha) {
    const double *b2c = d->b2c;
    double *c2b = d->c2b;
    for (uint32_t i = 0; i < d->m; ++i) {
        uint32_t lo = d->row_ptr[i], deg = d->row_ptr[i + 1] - lo;
        unsigned s = d->syndrome[i];
        switch (deg) {
        case 3: check_min_sum(b2c, c2b, lo, 3, s, alpha); break;
        case 4: check_min_sum(b2c, c2b, lo, 4, s, alpha); break;
        case 6: check_min_sum(b2c, c2b, lo, 6, s, alpha); break;
        default: check_min_sum(b2c, c2b, lo, deg, s, alpha); break;
        }
    }
}

static void check_update_product_sum(bpod_decoder *d) {
    double *t = d->aux, *pre = d->aux + d->nnz;
    for (uint32_t e = 0; e < d->nnz; ++e) t[e] = tanh(d->b2c[e] / 2.0);
    for (uint32_t i = 0; i < d->m; ++i) {
        uint32_t lo = d->row_ptr[i], hi = d->row_ptr[i + 1];
        double acc = 1.0;
        for (uint32_t e = lo; e < hi; ++e) {
            pre[e] = acc;
            acc = acc * t[e];
        }
        acc = 1.0;
        double sign = d->syndrome[i] ? -1.0 : 1.0;
        for (uint32_t e = hi; e-- > lo;) {
            double x = pre[e] * acc;
            acc = acc * t[e];
            d->c2b[e] = sign * log((1.0 + x) / (1.0 - x));
        }
    }
}

/* One column's posterior, hard decision and next bit-to-check messages over its edges ce[0..deg) (row
 * order): llr = init + c2b[e0] + c2b[e1] + ...; b2c[e] = (init + the c2b before e) + (the c2b after
 * e, summed from the last, from 0.0). Inlined with a constant deg for the common small degrees, so
 * the compiler keeps the sums in registers; the operations and their order are the same. */
static inline __attribute__((always_inline)) uint8_t column_pass(const uint32_t *ce, uint32_t deg, double init,
                                                                const double *c2b, double *b2c, double *pre,
                                                                double *llr) {
    double acc = init;
    for (uint32_t k = 0; k < deg; ++k) {
        pre[k] = acc;
        acc = acc + c2b[ce[k]];
    }
    *llr = acc;
    double suf = 0.0;
    for (uint32_t k = deg; k-- > 0;) {
        b2c[ce[k]] = pre[k] + suf;
        suf = suf + c2b[ce[k]];
    }
    return acc <= 0.0;
}

/* Posterior, hard decision and next bit-to-check messages of every column; the syndrome of the
 * hard decision is gathered on the way. 1 if it is the target: BP has converged (the b2c written
 * are then unused). */
static int posterior_and_check(bpod_decoder *d) {
    const uint32_t *col_ptr = d->col_ptr, *col_edges = d->col_edges, *edge_row = d->edge_row;
    const double *c2b = d->c2b;
    double *b2c = d->b2c, *buf = d->colbuf;
    uint8_t *par = d->parity;
    memset(par, 0, d->m);
    for (uint32_t j = 0; j < d->n; ++j) {
        uint32_t lo = col_ptr[j], deg = col_ptr[j + 1] - lo;
        const uint32_t *ce = col_edges + lo;
        double pre[4];
        uint8_t h;
        switch (deg) {
        case 1: h = column_pass(ce, 1, d->init_llr[j], c2b, b2c, pre, &d->llr[j]); break;
        case 2: h = column_pass(ce, 2, d->init_llr[j], c2b, b2c, pre, &d->llr[j]); break;
        case 3: h = column_pass(ce, 3, d->init_llr[j], c2b, b2c, pre, &d->llr[j]); break;
        case 4: h = column_pass(ce, 4, d->init_llr[j], c2b, b2c, pre, &d->llr[j]); break;
        default: h = column_pass(ce, deg, d->init_llr[j], c2b, b2c, buf, &d->llr[j]); break;
        }
        d->hard[j] = h;
        if (h) /* hard decisions are sparse: only flipped bits touch the parity */
            for (uint32_t k = 0; k < deg; ++k) par[edge_row[ce[k]]] ^= 1;
    }
    return memcmp(par, d->syndrome, d->m) == 0;
}

static int run_bp(bpod_decoder *d) {
    for (uint32_t e = 0; e < d->nnz; ++e) d->b2c[e] = d->init_llr[d->col_idx[e]];
    for (uint32_t it = 1; it <= d->max_iter; ++it) {
        d->iterations = it;
        if (d->bp_method == BP_PRODUCT_SUM) {
            check_update_product_sum(d);
        } else {
            double alpha = d->ms_scaling == 0.0 ? 1.0 - pow(2.0, -1.0 * it) : d->ms_scaling;
            check_update_min_sum(d, alpha);
        }
        if (posterior_and_check(d)) return 1;
    }
    return 0;
}

/* ---- ordered statistics ------------------------------------------------------------------ */

/* x sorts before y: ascending, NaN last (as numpy orders). Product-sum BP can produce a NaN
 * posterior when a bit receives +inf and -inf messages; ldpc 2.4.1 does the same. */
static inline int before(double x, double y) { return x < y || (!isnan(x) && isnan(y)); }

/* Stable ascending order of the posterior LLRs (most likely flipped first). */
static void sort_by_llr(bpod_decoder *d) {
    uint32_t n = d->n, *a = d->order, *b = d->sort_tmp;
    for (uint32_t j = 0; j < n; ++j) a[j] = j;
    for (uint32_t width = 1; width < n; width *= 2) {
        for (uint32_t lo = 0; lo < n; lo += 2 * width) {
            uint32_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            uint32_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) b[k++] = before(d->llr[a[j]], d->llr[a[i]]) ? a[j++] : a[i++];
            while (i < mid) b[k++] = a[i++];
            while (j < hi) b[k++] = a[j++];
        }
        uint32_t *t = a;
        a = b;
        b = t;
    }
    if (a != d->order) memcpy(d->order, a, sizeof(uint32_t) * n);
}

static int leading_row(const uint64_t *v, uint32_t words) {
    for (uint32_t w = words; w-- > 0;)
        if (v[w]) return (int)(w * 64 + 63 - __builtin_clzll(v[w]));
    return -1;
}

/* Reduce v (and its pivot combination) by the basis; return the leading row left, or -1.
 * The basis is kept fully reduced (no basis vector has a bit on another's leading row), so one
 * XOR clears each of v's bits on a leading row and adds none: the cost is v's weight there,
 * not the rank. The combination found is the unique one, whatever the basis vectors are. */
static int reduce(bpod_decoder *d, uint64_t *v, uint64_t *comb) {
    uint32_t wm = d->words_m, wp = d->words_p;
    for (uint32_t w = 0; w < wm; ++w) {
        for (uint64_t bits = v[w] & d->leading[w]; bits; bits &= bits - 1) {
            uint32_t row = w * 64 + (uint32_t)__builtin_ctzll(bits);
            const uint64_t *bv = d->basis_vec + (size_t)d->basis_at[row] * wm;
            const uint64_t *bc = d->basis_comb + (size_t)d->basis_at[row] * wp;
            for (uint32_t k = 0; k < wm; ++k) v[k] ^= bv[k];
            for (uint32_t k = 0; k < wp; ++k) comb[k] ^= bc[k];
        }
    }
    return leading_row(v, wm);
}

/* Add the reduced v (leading row h, combination comb) to the basis in `slot`, clearing row h from the
 * basis vectors that have it, so the basis stays fully reduced. */
static void insert(bpod_decoder *d, uint32_t slot, int h, const uint64_t *v, const uint64_t *comb) {
    uint32_t wm = d->words_m, wp = d->words_p, hw = (uint32_t)h / 64;
    uint64_t hb = 1ull << ((uint32_t)h % 64);
    for (uint32_t s = 0; s < slot; ++s) {
        uint64_t *bv = d->basis_vec + (size_t)s * wm, *bc = d->basis_comb + (size_t)s * wp;
        if (!(bv[hw] & hb)) continue;
        for (uint32_t k = 0; k < wm; ++k) bv[k] ^= v[k];
        for (uint32_t k = 0; k < wp; ++k) bc[k] ^= comb[k];
    }
    memcpy(d->basis_vec + (size_t)slot * wm, v, sizeof(uint64_t) * wm);
    memcpy(d->basis_comb + (size_t)slot * wp, comb, sizeof(uint64_t) * wp);
    d->basis_at[h] = (int32_t)slot;
    d->leading[hw] |= hb;
}

/* Greedy information set: columns in LLR order, kept when independent of those kept. */
static void choose_pivots(bpod_decoder *d) {
    uint32_t wm = d->words_m, wp = d->words_p;
    for (uint32_t i = 0; i < d->m; ++i) d->basis_at[i] = -1;
    memset(d->leading, 0, sizeof(uint64_t) * wm);
    d->n_pivots = d->n_nonpivots = 0;
    for (uint32_t k = 0; k < d->n; ++k) {
        uint32_t c = d->order[k];
        if (d->n_pivots == d->rank) { /* a basis of H's column space: every other column depends on it */
            d->nonpivots[d->n_nonpivots++] = c;
            continue;
        }
        memcpy(d->v, d->colbits + (size_t)c * wm, sizeof(uint64_t) * wm);
        memset(d->comb, 0, sizeof(uint64_t) * wp);
        int h = reduce(d, d->v, d->comb);
        if (h < 0) {
            d->nonpivots[d->n_nonpivots++] = c;
            continue;
        }
        uint32_t slot = d->n_pivots++;
        d->comb[slot / 64] ^= 1ull << (slot % 64);
        insert(d, slot, h, d->v, d->comb);
        d->pivots[slot] = c;
    }
}

/* x = the solution supported on the pivots for the packed syndrome `t`; 0 if none. */
static int solve(bpod_decoder *d, const uint64_t *t, uint8_t *x) {
    memcpy(d->v, t, sizeof(uint64_t) * d->words_m);
    memset(d->comb, 0, sizeof(uint64_t) * d->words_p);
    if (reduce(d, d->v, d->comb) >= 0) return 0;
    memset(x, 0, d->n);
    for (uint32_t s = 0; s < d->n_pivots; ++s)
        if (d->comb[s / 64] >> (s % 64) & 1) x[d->pivots[s]] = 1;
    return 1;
}

/* Every candidate of OSD-CS and OSD-E is OSD-0's solution x0 with some non-pivot columns flipped and
 * the pivots that restore the syndrome: solving is linear, so the pivots of a candidate are x0's XOR
 * the pivot combination of each flipped column. The basis is fully reduced, so the combination of
 * a column of H (always in the span) is the XOR of basis_comb over its bits on leading rows: no
 * elimination per candidate. Combinations are kept in "sorted pivot space" (bit q = the q-th pivot
 * in column order) so that a candidate's cost is summed over its columns in ascending order -- the
 * order of a sum over all n columns, hence the same double, bit for bit -- without touching n. */

/* Sorted pivot space: positions of the slots, and basis_comb of each slot carried over. */
static void sort_pivot_space(bpod_decoder *d) {
    uint32_t wp = d->words_p, r = d->n_pivots;
    memset(d->x, 0, d->n);
    for (uint32_t s = 0; s < r; ++s) d->x[d->pivots[s]] = 1;
    uint32_t *slot_of = d->sort_tmp; /* column -> slot, scratch (the sort is done) */
    for (uint32_t s = 0; s < r; ++s) slot_of[d->pivots[s]] = s;
    for (uint32_t j = 0, q = 0; j < d->n; ++j)
        if (d->x[j]) d->col_at_pos[q] = j, d->pos_of_slot[slot_of[j]] = q++;
    memset(d->scomb, 0, sizeof(uint64_t) * (size_t)r * wp);
    for (uint32_t s = 0; s < r; ++s) {
        const uint64_t *bc = d->basis_comb + (size_t)s * wp;
        uint64_t *out = d->scomb + (size_t)s * wp;
        for (uint32_t w = 0; w < wp; ++w)
            for (uint64_t bits = bc[w]; bits; bits &= bits - 1) {
                uint32_t q = d->pos_of_slot[w * 64 + (uint32_t)__builtin_ctzll(bits)];
                out[q / 64] |= 1ull << (q % 64);
            }
    }
}

/* out ^= the sorted pivot combination of column c (c depends on the pivots, or is one). */
static void add_column_comb(const bpod_decoder *d, uint32_t c, uint64_t *out) {
    uint32_t wm = d->words_m, wp = d->words_p;
    const uint64_t *col = d->colbits + (size_t)c * wm;
    for (uint32_t w = 0; w < wm; ++w)
        for (uint64_t bits = col[w] & d->leading[w]; bits; bits &= bits - 1) {
            const uint64_t *sc = d->scomb + (size_t)d->basis_at[w * 64 + (uint32_t)__builtin_ctzll(bits)] * wp;
            for (uint32_t k = 0; k < wp; ++k) out[k] ^= sc[k];
        }
}

/* The cost of the candidate with pivots p (sorted space) and the non-pivot columns flips[0..count)
 * (ascending), summed in column order; stops once it reaches `bound` (costs are positive, so the
 * sum can only grow: the candidate cannot be strictly better). */
static double candidate_cost(const bpod_decoder *d, const uint64_t *p, const uint32_t *flips, uint32_t count,
                             double bound) {
    double c = 0.0;
    uint32_t f = 0;
    for (uint32_t w = 0; w < d->words_p; ++w)
        for (uint64_t bits = p[w]; bits; bits &= bits - 1) {
            uint32_t col = d->col_at_pos[w * 64 + (uint32_t)__builtin_ctzll(bits)];
            while (f < count && flips[f] < col) c += d->cost[flips[f++]];
            c += d->cost[col];
            if (c >= bound) return c;
        }
    while (f < count) c += d->cost[flips[f++]];
    return c;
}

/* Keep the candidate (pivots in d->cand, flips ascending) if it is strictly cheaper. */
static void consider(bpod_decoder *d, const uint32_t *flips, uint32_t count, double *best_cost) {
    double c = candidate_cost(d, d->cand, flips, count, *best_cost);
    if (c < *best_cost) {
        *best_cost = c;
        memcpy(d->best_p, d->cand, sizeof(uint64_t) * d->words_p);
        memcpy(d->best_flips, flips, sizeof(uint32_t) * count);
        d->best_count = count;
    }
}

static int run_osd(bpod_decoder *d) {
    uint32_t wp = d->words_p;
    sort_by_llr(d);
    choose_pivots(d);
    memset(d->target, 0, sizeof(uint64_t) * d->words_m);
    for (uint32_t i = 0; i < d->m; ++i)
        if (d->syndrome[i]) d->target[i / 64] |= 1ull << (i % 64);
    if (!solve(d, d->target, d->best)) return 0; /* the syndrome is not in H's column space */
    if (d->osd_method == OSD_0 || d->osd_order == 0) return 1;
    sort_pivot_space(d);
    memset(d->x0, 0, sizeof(uint64_t) * wp);
    for (uint32_t s = 0; s < d->n_pivots; ++s)
        if (d->comb[s / 64] >> (s % 64) & 1) d->x0[d->pos_of_slot[s] / 64] |= 1ull << (d->pos_of_slot[s] % 64);
    memcpy(d->best_p, d->x0, sizeof(uint64_t) * wp);
    d->best_count = 0;
    double best_cost = candidate_cost(d, d->x0, NULL, 0, INFINITY);
    uint32_t k = d->n_nonpivots, w = d->osd_order < k ? d->osd_order : k, flips[64];
    for (uint32_t a = 0; a < w; ++a) { /* the first w non-pivots: flipped in pairs (CS) or subsets (E) */
        uint64_t *wc = d->wcomb + (size_t)a * wp;
        memset(wc, 0, sizeof(uint64_t) * wp);
        add_column_comb(d, d->nonpivots[a], wc);
    }
    if (d->osd_method == OSD_CS) {
        for (uint32_t a = 0; a < k; ++a) {
            memcpy(d->cand, d->x0, sizeof(uint64_t) * wp);
            if (a < w) {
                for (uint32_t t = 0; t < wp; ++t) d->cand[t] ^= d->wcomb[(size_t)a * wp + t];
            } else {
                add_column_comb(d, d->nonpivots[a], d->cand);
            }
            flips[0] = d->nonpivots[a];
            consider(d, flips, 1, &best_cost);
        }
        for (uint32_t a = 0; a < w; ++a)
            for (uint32_t b = a + 1; b < w; ++b) {
                const uint64_t *ca = d->wcomb + (size_t)a * wp, *cb = d->wcomb + (size_t)b * wp;
                for (uint32_t t = 0; t < wp; ++t) d->cand[t] = d->x0[t] ^ ca[t] ^ cb[t];
                uint32_t x = d->nonpivots[a], y = d->nonpivots[b];
                flips[0] = x < y ? x : y, flips[1] = x < y ? y : x;
                consider(d, flips, 2, &best_cost);
            }
    } else { /* OSD_E: every nonempty subset of the first w non-pivot columns */
        uint32_t by_col[64]; /* the first w non-pivots' positions, in column order */
        for (uint32_t a = 0; a < w; ++a) {
            uint32_t t = a;
            for (; t > 0 && d->nonpivots[by_col[t - 1]] > d->nonpivots[a]; --t) by_col[t] = by_col[t - 1];
            by_col[t] = a;
        }
        for (uint64_t mask = 1; mask < (1ull << w); ++mask) {
            uint32_t count = 0;
            memcpy(d->cand, d->x0, sizeof(uint64_t) * wp);
            for (uint32_t t = 0; t < w; ++t) {
                uint32_t a = by_col[t];
                if (!(mask >> a & 1)) continue;
                flips[count++] = d->nonpivots[a];
                for (uint32_t u = 0; u < wp; ++u) d->cand[u] ^= d->wcomb[(size_t)a * wp + u];
            }
            consider(d, flips, count, &best_cost);
        }
    }
    memset(d->best, 0, d->n);
    for (uint32_t t = 0; t < wp; ++t)
        for (uint64_t bits = d->best_p[t]; bits; bits &= bits - 1)
            d->best[d->col_at_pos[t * 64 + (uint32_t)__builtin_ctzll(bits)]] = 1;
    for (uint32_t f = 0; f < d->best_count; ++f) d->best[d->best_flips[f]] = 1;
    return 1;
}

/* ---- decoding ------------------------------------------------------------------------------ */

static void pack(const uint8_t *bits, uint32_t n, uint8_t *out) {
    memset(out, 0, (n + 7) / 8);
    for (uint32_t j = 0; j < n; ++j) out[j / 8] |= (uint8_t)(bits[j] << (j % 8));
}

/* The decode proper on d->syndrome (one byte per check); the result is in *bits. */
static int32_t decode_loaded(bpod_decoder *d, uint32_t any, const uint8_t **bits) {
    if (!any) { /* the zero syndrome: zero correction, BP not run */
        d->iterations = 0;
        memset(d->best, 0, d->n);
        *bits = d->best;
        return BPOD_BP_CONVERGED;
    }
    *bits = d->hard;
    if (run_bp(d)) return BPOD_BP_CONVERGED;
    if (d->osd_method == OSD_NONE || !run_osd(d)) return BPOD_BP_FAILED;
    *bits = d->best;
    return BPOD_OSD;
}

BL_API int32_t bpod_decode(bpod_decoder *d, const uint8_t *syndrome, uint8_t *correction) {
    uint32_t m = d->m, bytes = (m + 7) / 8, any = 0;
    if (m % 8 && (syndrome[bytes - 1] >> (m % 8))) {
        snprintf(last_error, sizeof last_error, "syndrome has bits set beyond its %u checks", m);
        return BPOD_EINVAL;
    }
    for (uint32_t i = 0; i < m; ++i) any |= d->syndrome[i] = (syndrome[i / 8] >> (i % 8)) & 1;
    const uint8_t *bits;
    int32_t rc = decode_loaded(d, any, &bits);
    pack(bits, d->n, correction);
    return rc;
}

BL_API int32_t bpod_decode_bits(bpod_decoder *d, const uint8_t *syndrome, uint8_t *correction) {
    uint32_t any = 0;
    for (uint32_t i = 0; i < d->m; ++i) {
        if (syndrome[i] > 1) {
            snprintf(last_error, sizeof last_error, "syndrome entry %u is %u, not 0 or 1", i, syndrome[i]);
            return BPOD_EINVAL;
        }
        any |= d->syndrome[i] = syndrome[i];
    }
    const uint8_t *bits;
    int32_t rc = decode_loaded(d, any, &bits);
    memcpy(correction, bits, d->n);
    return rc;
}

BL_API int32_t bpod_decode_batch(bpod_decoder *d, const uint8_t *syndromes, uint64_t shots, uint8_t *corrections) {
    size_t in = (d->m + 7) / 8, out = (d->n + 7) / 8;
    for (uint64_t s = 0; s < shots; ++s) {
        int32_t rc = bpod_decode(d, syndromes + s * in, corrections + s * out);
        if (rc < 0) return rc;
    }
    return 0;
}

BL_API int32_t bpod_time_decodes(bpod_decoder *d, const uint8_t *syndromes, uint64_t shots, uint8_t *corrections,
                                 uint64_t *ns) {
    size_t in = (d->m + 7) / 8, out = (d->n + 7) / 8;
    for (uint64_t s = 0; s < shots; ++s) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int32_t rc = bpod_decode(d, syndromes + s * in, corrections + s * out);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (rc < 0) return rc;
        ns[s] = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000ull + (uint64_t)(t1.tv_nsec - t0.tv_nsec);
    }
    return 0;
}

/* ---- the Backline coprocessor function ------------------------------------------------------ */

struct css {
    bpod_decoder *dec[2]; /* decoder_id 0: Hx, 1: Hz */
};

BL_API int32_t bpod_css_init(const uint8_t *params, uint64_t len, void **ctx) {
    struct reader r = {params, params + len};
    uint32_t sections;
    if (!params || !read_header(&r, &sections) || sections != 2) return 1;
    struct css *c = calloc(1, sizeof *c);
    if (!c) return 2;
    for (int i = 0; i < 2; ++i) {
        if (!(c->dec[i] = create_from(&r))) {
            bpod_css_fini(c);
            return 3;
        }
    }
    if (r.p != r.end || c->dec[0]->n != c->dec[1]->n) {
        bpod_css_fini(c);
        return 4;
    }
    *ctx = c;
    return 0;
}

BL_API void bpod_css_fini(void *ctx) {
    struct css *c = ctx;
    if (!c) return;
    bpod_free(c->dec[0]);
    bpod_free(c->dec[1]);
    free(c);
}

BL_API int32_t bpod_css_fn(void *ctx, uint32_t decoder_id, const uint8_t *in, uint32_t in_len, uint8_t *out,
                           uint32_t out_cap, uint32_t *out_len) {
    struct css *c = ctx;
    if (decoder_id > 1) return 10;
    bpod_decoder *d = c->dec[decoder_id];
    uint32_t need = (d->n + 7) / 8;
    if (in_len != (d->m + 7) / 8) return 11; /* wrong syndrome length: an error reply, not a crash */
    if (out_cap < need) return 12;
    if (bpod_decode(d, in, out) < 0) return 13;
    *out_len = need;
    return 0;
}

/* -- a decoder of detection events: H's decoder and the reply map R --------------------------- */

struct dem {
    bpod_decoder *dec;
    uint32_t *map_blob; /* the reply map, copied so that it is aligned */
    bl_reply_map map;
    uint8_t *e;         /* the packed estimate, ceil(n/8) bytes */
};

BL_API int32_t bpod_dem_init(const uint8_t *params, uint64_t len, void **ctx) {
    struct reader r = {params, params + len};
    uint32_t sections;
    if (!params || !ctx || !read_header(&r, &sections) || sections != 1) return 1;
    struct dem *c = calloc(1, sizeof *c);
    if (!c) return 2;
    size_t rest;
    if (!(c->dec = create_from(&r))) goto fail;
    rest = (size_t)(r.end - r.p);
    c->map_blob = malloc(rest + 4);
    c->e = calloc((c->dec->n + 7) / 8 + 1, 1);
    if (!c->map_blob || !c->e) goto fail;
    memcpy(c->map_blob, r.p, rest);
    size_t used = 0;
    if (bl_reply_map_parse((const uint8_t *)c->map_blob, rest, &c->map, &used) || used != rest ||
        c->map.columns != c->dec->n) {
        snprintf(last_error, sizeof last_error, "the reply map does not fit this H");
        goto fail;
    }
    *ctx = c;
    return 0;
fail:
    bpod_dem_fini(c);
    return 3;
}

BL_API void bpod_dem_fini(void *ctx) {
    struct dem *c = ctx;
    if (!c) return;
    bpod_free(c->dec);
    free(c->map_blob);
    free(c->e);
    free(c);
}

/* out = R e for the decode of `in` (ceil(m/8) bytes); the decode's status */
static int32_t dem_decode(struct dem *c, const uint8_t *in, uint8_t *out) {
    uint32_t in_bytes = (c->dec->m + 7) / 8, reply = bl_reply_bytes(&c->map);
    memset(out, 0, reply);
    int any = 0;
    for (uint32_t i = 0; i < in_bytes; i++) any |= in[i];
    if (!any) return BPOD_BP_CONVERGED; /* no detection event: no error */
    int32_t rc = bpod_decode(c->dec, in, c->e);
    if (rc < 0) return rc;
    for (uint32_t b = 0; b < (c->dec->n + 7) / 8; b++) {
        for (uint32_t bits = c->e[b]; bits; bits &= bits - 1)
            bl_reply_add_column(&c->map, 8u * b + (uint32_t)__builtin_ctz(bits), out);
    }
    return rc;
}

BL_API int32_t bpod_dem_fn(void *ctx, uint32_t decoder_id, const uint8_t *in, uint32_t in_len, uint8_t *out,
                           uint32_t out_cap, uint32_t *out_len) {
    struct dem *c = ctx;
    if (decoder_id != 0) return 10;
    if (in_len != (c->dec->m + 7) / 8) return 11; /* wrong width: an error reply, not a crash */
    if (out_cap < bl_reply_bytes(&c->map)) return 12;
    if (dem_decode(c, in, out) < 0) return 13;
    *out_len = bl_reply_bytes(&c->map);
    return 0;
}

BL_API int64_t bpod_dem_batch(void *ctx, const uint8_t *in, uint64_t shots, uint8_t *out) {
    struct dem *c = ctx;
    uint32_t in_bytes = (c->dec->m + 7) / 8, reply = bl_reply_bytes(&c->map);
    int64_t hard = 0;
    for (uint64_t s = 0; s < shots; s++) {
        int32_t rc = dem_decode(c, in + s * in_bytes, out + s * reply);
        if (rc < 0) return rc;
        hard += rc != BPOD_BP_CONVERGED;
    }
    return hard;
}
