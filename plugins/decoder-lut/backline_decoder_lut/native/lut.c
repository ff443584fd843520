/*
 * lut.c -- the lookup-table decoder of lut.h. Written from the rules of CUDA-Q QEC's
 * libs/qec/lib/decoders/lut.cpp (NVIDIA/cudaqx), not from its code: see docs/decoder-lut.md.
 *
 * The table is an open-addressing hash (linear probing) from the packed syndrome, as
 * ceil(detectors / 64) 64-bit words, to the first error pattern that produced it. Patterns are
 * enumerated weight by weight, column tuples in lexicographic order (what cudaqx's
 * std::prev_permutation over a bitmask with the leading `w` bits set visits), and an entry is
 * never replaced, so the first pattern of a syndrome wins as in cudaqx.
 */
#include "lut.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <backline/sdk/dem_reply.h>

/* a syndrome key of up to this many words (32,768 detectors) lives on the stack; a longer one is
 * allocated per call */
#define KEY_STACK_WORDS 512

struct lut_table {
    uint32_t detectors, columns, depth;
    uint32_t syn_bytes; /* ceil(detectors / 8): one packed syndrome */
    uint32_t words;     /* ceil(detectors / 64): one key */
    uint8_t last_mask;  /* the bits of the last syndrome byte that are detectors */
    uint64_t entries, capacity;
    uint64_t *keys;     /* entries x words */
    uint32_t *patterns; /* entries x depth column indices, UINT32_MAX past the pattern's weight */
    uint32_t *slots;    /* slot_mask + 1 slots: entry index + 1, or 0 when empty */
    uint64_t slot_mask;
    uint32_t *reply_blob; /* this table's aligned copy of the reply map */
    bl_reply_map reply;
};

static _Thread_local char last_error[512];

static void set_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
}

const char *lut_last_error(void) { return last_error; }

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

static uint64_t sat_mul(uint64_t a, uint64_t b) {
    unsigned __int128 p = (unsigned __int128)a * b;
    return p > UINT64_MAX ? UINT64_MAX : (uint64_t)p;
}

/* C(n, k), saturating: each partial product C(n, i) is exact, so the division is too. */
static uint64_t binomial(uint64_t n, uint64_t k) {
    if (k > n) return 0;
    unsigned __int128 c = 1;
    for (uint64_t i = 0; i < k; i++) {
        c = c * (n - i) / (i + 1);
        if (c > UINT64_MAX) return UINT64_MAX;
    }
    return (uint64_t)c;
}

static uint64_t pow2_at_least(uint64_t x) {
    uint64_t p = 16;
    while (p < x && p <= UINT64_MAX / 2) p <<= 1;
    return p;
}

/* The most entries a table can hold: every pattern a distinct nonzero syndrome. */
static uint64_t entry_bound(uint32_t detectors, uint64_t patterns) {
    if (detectors < 64) {
        uint64_t syndromes = (UINT64_C(1) << detectors) - 1;
        if (syndromes < patterns) return syndromes;
    }
    return patterns;
}

uint64_t lut_estimate_bytes(uint32_t detectors, uint32_t columns, uint32_t depth, uint64_t *patterns) {
    uint64_t total = 0;
    for (uint32_t w = 1; w <= depth; w++) total = sat_add(total, binomial(columns, w));
    if (patterns) *patterns = total;
    uint64_t entries = entry_bound(detectors, total);
    uint64_t words = ((uint64_t)detectors + 63) / 64;
    /* keys and patterns, then the slots: a power of two, at most half full */
    uint64_t per_entry = 8 * words + 4 * (uint64_t)depth;
    uint64_t slots = entries > UINT64_MAX / 4 ? UINT64_MAX : pow2_at_least(2 * entries);
    return sat_add(sat_mul(entries, per_entry), sat_mul(slots, 4));
}

static inline uint64_t hash_key(const uint64_t *key, uint32_t words) {
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (uint32_t i = 0; i < words; i++) {
        h ^= key[i];
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    return h ^ (h >> 29);
}

/* The entry of `key`, or -1. */
static inline int64_t find(const lut_table *t, const uint64_t *key) {
    uint64_t i = hash_key(key, t->words) & t->slot_mask;
    for (;;) {
        uint32_t s = t->slots[i];
        if (s == 0) return -1;
        const uint64_t *k = t->keys + (uint64_t)(s - 1) * t->words;
        if (k[0] == key[0] && (t->words == 1 || memcmp(k + 1, key + 1, 8 * (size_t)(t->words - 1)) == 0))
            return (int64_t)(s - 1);
        i = (i + 1) & t->slot_mask;
    }
}

static int rehash(lut_table *t, uint64_t slots) {
    uint32_t *fresh = calloc(slots, sizeof *fresh);
    if (!fresh) return -1;
    for (uint64_t e = 0; e < t->entries; e++) {
        uint64_t i = hash_key(t->keys + e * t->words, t->words) & (slots - 1);
        while (fresh[i]) i = (i + 1) & (slots - 1);
        fresh[i] = (uint32_t)(e + 1);
    }
    free(t->slots);
    t->slots = fresh;
    t->slot_mask = slots - 1;
    return 0;
}

/* Add `key` -> pattern cols[0..w) unless the key is there: the first pattern wins. 0, or -1 (memory). */
static int insert(lut_table *t, const uint64_t *key, const uint32_t *cols, uint32_t w) {
    if (find(t, key) >= 0) return 0;
    if (t->entries == t->capacity) {
        uint64_t cap = t->capacity ? 2 * t->capacity : 64;
        uint64_t *keys = realloc(t->keys, cap * t->words * sizeof *keys);
        if (!keys) return -1;
        t->keys = keys;
        uint32_t *pats = realloc(t->patterns, cap * t->depth * sizeof *pats);
        if (!pats) return -1;
        t->patterns = pats;
        t->capacity = cap;
    }
    if (2 * (t->entries + 1) > t->slot_mask + 1 && rehash(t, 2 * (t->slot_mask + 1)) != 0) return -1;
    uint64_t e = t->entries++;
    memcpy(t->keys + e * t->words, key, 8 * (size_t)t->words);
    uint32_t *p = t->patterns + e * t->depth;
    for (uint32_t i = 0; i < t->depth; i++) p[i] = i < w ? cols[i] : UINT32_MAX;
    uint64_t i = hash_key(key, t->words) & t->slot_mask;
    while (t->slots[i]) i = (i + 1) & t->slot_mask;
    t->slots[i] = (uint32_t)(e + 1);
    return 0;
}

static int is_zero(const uint64_t *key, uint32_t words) {
    uint64_t any = 0;
    for (uint32_t i = 0; i < words; i++) any |= key[i];
    return any == 0;
}

/* Every pattern of weight 1..depth, in cudaqx's order. col_syn: each column's syndrome as a key. */
static int build(lut_table *t, const uint64_t *col_syn) {
    uint32_t n = t->columns, W = t->words;
    uint32_t idx[LUT_MAX_DEPTH];
    /* prefix[i] = XOR of the syndromes of idx[0..i) */
    uint64_t *prefix = calloc((size_t)(LUT_MAX_DEPTH + 1) * W, sizeof *prefix);
    if (!prefix) return -1;
    int rc = 0;
    for (uint32_t w = 1; w <= t->depth && rc == 0; w++) {
        for (uint32_t i = 0; i < w; i++) idx[i] = i;
        uint32_t changed = 0; /* first position whose prefix is stale */
        for (;;) {
            for (uint32_t i = changed; i < w; i++) {
                const uint64_t *a = prefix + (size_t)i * W, *c = col_syn + (size_t)idx[i] * W;
                uint64_t *b = prefix + (size_t)(i + 1) * W;
                for (uint32_t k = 0; k < W; k++) b[k] = a[k] ^ c[k];
            }
            const uint64_t *syn = prefix + (size_t)w * W;
            /* a zero syndrome is never looked up (decode answers it first): not stored */
            if (!is_zero(syn, W) && insert(t, syn, idx, w) != 0) {
                rc = -1;
                break;
            }
            /* next tuple in lexicographic order: bump the rightmost index that can move */
            int32_t i = (int32_t)w - 1;
            while (i >= 0 && idx[i] == n - w + (uint32_t)i) i--;
            if (i < 0) break;
            idx[i]++;
            for (uint32_t j = (uint32_t)i + 1; j < w; j++) idx[j] = idx[j - 1] + 1;
            changed = (uint32_t)i;
        }
    }
    free(prefix);
    return rc;
}

lut_table *lut_create(const uint8_t *blob, uint64_t len) {
    if (!blob || len < LUT_HEADER_BYTES) {
        set_error("the parameter blob is %llu bytes, shorter than its %u-byte header", (unsigned long long)len,
                  LUT_HEADER_BYTES);
        return NULL;
    }
    if (rd32(blob) != LUT_MAGIC || rd32(blob + 4) != LUT_VERSION) {
        set_error("not a version-%u LUT parameter blob", LUT_VERSION);
        return NULL;
    }
    uint32_t depth = rd32(blob + 8), detectors = rd32(blob + 12), columns = rd32(blob + 16), nnz = rd32(blob + 20);
    uint64_t max_bytes = rd64(blob + 24);
    if (depth < 1 || depth > LUT_MAX_DEPTH) {
        set_error("depth=%u: it must be in [1, %u]", depth, LUT_MAX_DEPTH);
        return NULL;
    }
    if (detectors == 0 || columns == 0 || detectors > (1u << 24) || columns > (1u << 28)) {
        set_error("H is %u x %u: it needs 1 to 2^24 detectors and 1 to 2^28 columns", detectors, columns);
        return NULL;
    }
    if (depth > columns) {
        set_error("depth=%u exceeds the %u columns of H", depth, columns);
        return NULL;
    }
    uint64_t patterns = 0, need = lut_estimate_bytes(detectors, columns, depth, &patterns);
    if (need > max_bytes) {
        set_error("depth %u over %u columns needs about %llu bytes (%llu patterns); the limit is "
                  "max_table_bytes=%llu", depth, columns, (unsigned long long)need, (unsigned long long)patterns,
                  (unsigned long long)max_bytes);
        return NULL;
    }
    if (entry_bound(detectors, patterns) >= UINT32_MAX) {
        set_error("depth %u over %u columns may give %llu entries; a table holds fewer than 2^32", depth, columns,
                  (unsigned long long)entry_bound(detectors, patterns));
        return NULL;
    }
    uint64_t h_bytes = 4 * ((uint64_t)columns + 1) + 4 * (uint64_t)nnz;
    if (len < LUT_HEADER_BYTES + h_bytes) {
        set_error("the parameter blob ends inside H");
        return NULL;
    }
    const uint8_t *cp = blob + LUT_HEADER_BYTES, *rows = cp + 4 * ((size_t)columns + 1);
    if (rd32(cp) != 0 || rd32(cp + 4 * (size_t)columns) != nnz) {
        set_error("H's column pointers do not span its %u entries", nnz);
        return NULL;
    }
    for (uint32_t j = 0; j < columns; j++)
        if (rd32(cp + 4 * (size_t)j) > rd32(cp + 4 * ((size_t)j + 1))) {
            set_error("H's column pointers decrease at column %u", j);
            return NULL;
        }
    for (uint32_t k = 0; k < nnz; k++)
        if (rd32(rows + 4 * (size_t)k) >= detectors) {
            set_error("H has a row index %u, beyond its %u detectors", rd32(rows + 4 * (size_t)k), detectors);
            return NULL;
        }

    lut_table *t = calloc(1, sizeof *t);
    if (!t) goto nomem;
    t->detectors = detectors, t->columns = columns, t->depth = depth;
    t->syn_bytes = (detectors + 7) / 8, t->words = (detectors + 63) / 64;
    t->last_mask = (uint8_t)(detectors % 8 ? (1u << (detectors % 8)) - 1 : 0xFF);

    /* the reply map is read in place, so it needs 4-byte alignment: keep a copy */
    uint64_t reply_len = len - LUT_HEADER_BYTES - h_bytes;
    t->reply_blob = malloc(reply_len ? reply_len : 1);
    if (!t->reply_blob) goto nomem;
    memcpy(t->reply_blob, blob + LUT_HEADER_BYTES + h_bytes, reply_len);
    size_t consumed = 0;
    if (bl_reply_map_parse((const uint8_t *)t->reply_blob, reply_len, &t->reply, &consumed) != 0 ||
        consumed != reply_len) {
        set_error("the reply map after H is malformed");
        lut_free(t);
        return NULL;
    }
    if (t->reply.columns != columns) {
        set_error("the reply map has %u columns but H has %u", t->reply.columns, columns);
        lut_free(t);
        return NULL;
    }

    uint64_t *col_syn = calloc((size_t)columns * t->words, sizeof *col_syn);
    t->slots = calloc(16, sizeof *t->slots);
    t->slot_mask = 15;
    if (!col_syn || !t->slots) {
        free(col_syn);
        goto nomem;
    }
    for (uint32_t j = 0; j < columns; j++) /* a repeated row index cancels, as XOR does in cudaqx */
        for (uint32_t k = rd32(cp + 4 * (size_t)j); k < rd32(cp + 4 * ((size_t)j + 1)); k++) {
            uint32_t r = rd32(rows + 4 * (size_t)k);
            col_syn[(size_t)j * t->words + r / 64] ^= UINT64_C(1) << (r % 64);
        }
    int rc = build(t, col_syn);
    free(col_syn);
    if (rc != 0) goto nomem;
    if (t->entries && t->entries < t->capacity) { /* give back what the doubling left unused */
        uint64_t *keys = realloc(t->keys, t->entries * t->words * sizeof *keys);
        if (keys) t->keys = keys;
        uint32_t *pats = realloc(t->patterns, t->entries * t->depth * sizeof *pats);
        if (pats) t->patterns = pats;
        t->capacity = t->entries;
    }
    return t;
nomem:
    set_error("out of memory building a depth-%u table over %u columns", depth, columns);
    lut_free(t);
    return NULL;
}

void lut_free(lut_table *t) {
    if (!t) return;
    free(t->keys);
    free(t->patterns);
    free(t->slots);
    free(t->reply_blob);
    free(t);
}

uint64_t lut_entries(const lut_table *t) { return t ? t->entries : 0; }

uint32_t lut_reply_bytes(const lut_table *t) { return t ? bl_reply_bytes(&t->reply) : 0; }

/* One syndrome -> its reply (reply_bytes, overwritten). 1 converged, 0 a miss. */
static inline int decode_one(const lut_table *t, const uint8_t *syn, uint8_t *out, uint64_t *key) {
    memset(out, 0, bl_reply_bytes(&t->reply));
    key[t->words - 1] = 0; /* the last word may be partly filled */
    memcpy(key, syn, t->syn_bytes);
    ((uint8_t *)key)[t->syn_bytes - 1] &= t->last_mask; /* padding bits are no detectors */
    if (is_zero(key, t->words)) return 1;
    int64_t e = find(t, key);
    if (e < 0) return 0;
    const uint32_t *p = t->patterns + (uint64_t)e * t->depth;
    for (uint32_t i = 0; i < t->depth && p[i] != UINT32_MAX; i++) bl_reply_add_column(&t->reply, p[i], out);
    return 1;
}

/* Keys are built in little-endian byte order, so the packed syndrome is copied as is. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "lut.c reads packed syndromes as little-endian words"
#endif

int64_t lut_decode_batch(const lut_table *t, const uint8_t *syndromes, uint64_t shots, uint8_t *replies,
                         uint8_t *converged) {
    if (!t || (shots && (!syndromes || !replies))) {
        set_error("lut_decode_batch: a NULL table or buffer");
        return -1;
    }
    uint64_t key_small[KEY_STACK_WORDS];
    uint64_t *key = t->words <= KEY_STACK_WORDS ? key_small : malloc(8 * (size_t)t->words);
    if (!key) {
        set_error("out of memory");
        return -1;
    }
    uint32_t rb = bl_reply_bytes(&t->reply);
    int64_t misses = 0;
    for (uint64_t s = 0; s < shots; s++) {
        int ok = decode_one(t, syndromes + s * t->syn_bytes, replies + s * rb, key);
        misses += !ok;
        if (converged) converged[s] = (uint8_t)ok;
    }
    if (key != key_small) free(key);
    return misses;
}

int32_t lut_init(const uint8_t *params, uint64_t len, void **ctx) {
    lut_table *t = lut_create(params, len);
    if (!t) return BL_EINVAL;
    *ctx = t;
    return BL_OK;
}

void lut_fini(void *ctx) { lut_free(ctx); }

int32_t lut_fn(void *ctx, uint32_t decoder_id, const uint8_t *in, uint32_t in_len, uint8_t *out, uint32_t out_cap,
               uint32_t *out_len) {
    const lut_table *t = ctx;
    uint32_t rb = bl_reply_bytes(&t->reply);
    if (in_len != t->syn_bytes) return LUT_EWIDTH;
    if (out_cap < rb) return LUT_ECAP;
    uint64_t key_small[KEY_STACK_WORDS];
    uint64_t *key = t->words <= KEY_STACK_WORDS ? key_small : malloc(8 * (size_t)t->words);
    if (!key) return BL_ENOMEM;
    decode_one(t, in, out, key);
    if (key != key_small) free(key);
    *out_len = rb;
    return 0;
}
