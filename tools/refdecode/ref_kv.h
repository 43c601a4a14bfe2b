/*
 * ref_kv.h - a naive model of kv/kv_manager.h's block bookkeeping, for
 * tests/unit/test_kv_manager.c only; written apart from kv/ and never
 * linked into it.
 *
 * Same semantics (kv/kv_manager.h), read literally: plain arrays and
 * linear scans, no lists and no hash map.  A registered block records
 * the whole token prefix it ends, and a lookup compares prefixes: block
 * k of a hit is the registered, reachable block whose prefix is
 * tokens[0 .. (k + 1) * block_tokens).  When a reachable block is
 * unregistered, every registered block whose prefix extends its prefix
 * becomes unreachable (an orphan: still registered and cached, never
 * hit).  The LRU is a release stamp per block; an allocation takes the
 * lowest-numbered free block, else the cached block with the oldest
 * stamp.  Block ids are the model's own: only counts, hit lengths and
 * return codes are comparable with the real manager.
 */
#ifndef DYNBATCH_REF_KV_H
#define DYNBATCH_REF_KV_H

#include <stdint.h>

struct ref_kv;

struct ref_kv_counts {
	uint32_t used, cached, peak_used;
	uint64_t hit_tokens, cow_copies, evictions;
};

/* Arguments as kv_manager_create()'s (no hash: prefixes are compared). */
struct ref_kv *ref_kv_create(uint32_t n_blocks, uint32_t block_tokens,
			     uint32_t n_tables, uint32_t max_blocks);
void ref_kv_destroy(struct ref_kv *r);

/* As kv_available(), kv_lookup(), kv_table_open(), kv_table_fork(),
 * kv_table_grow(); return codes and results the same. */
uint32_t ref_kv_available(const struct ref_kv *r);
uint32_t ref_kv_lookup(const struct ref_kv *r, const int32_t *tokens,
		       uint32_t n, uint32_t max_tokens);
int ref_kv_open(struct ref_kv *r, uint32_t t, const int32_t *tokens,
		uint32_t n, uint32_t max_hit, uint32_t reserve, uint32_t *hit);
int ref_kv_fork(struct ref_kv *r, uint32_t dst, uint32_t src,
		uint32_t n_tokens);
int ref_kv_grow(struct ref_kv *r, uint32_t t, uint32_t positions);

/* As kv_table_make_writable(), but only the number of copies it would
 * append is added to *n_copies. */
int ref_kv_make_writable(struct ref_kv *r, uint32_t t, uint32_t from,
			 uint32_t to, uint32_t *n_copies);

/* As kv_table_commit(), kv_table_close(), kv_forget_cache(). */
void ref_kv_commit(struct ref_kv *r, uint32_t t, const int32_t *tokens,
		   uint32_t n_computed);
void ref_kv_close(struct ref_kv *r, uint32_t t);
void ref_kv_forget(struct ref_kv *r);

/* As kv_counts() (without the pool size). */
void ref_kv_counts(const struct ref_kv *r, struct ref_kv_counts *out);

#endif /* DYNBATCH_REF_KV_H */
