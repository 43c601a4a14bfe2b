/*
 * test_ring_allreduce.c - unit tests of the group sum over shared memory
 * (lib/ipc/ring_allreduce.c).
 *
 * P ranks are forked processes sharing one MAP_SHARED segment, as a
 * tensor-parallel group's workers are.  Each rank draws its own inputs
 * from the printed seed (floats of mixed magnitudes, so that a change of
 * summation order shows in the bits), runs a plan of calls (lengths 0 to
 * 1000, below P and not multiples of it; RING, DIRECT and AUTO mixed in
 * one sequence of calls), and leaves its results in a second shared
 * mapping.  The parent, after every rank has exited, checks each result
 * against sums written here from the definition: bit for bit against the
 * canonical left fold (chunk c over ranks c+1, .., c mod P), which RING
 * and DIRECT must both give; within the forward error bound against a
 * double-precision sum; and the bytes each rank says it sent against
 * ring_allreduce.h's formula.  The same from a generation just before the
 * 32-bit count wraps.  Faults: a rank killed between calls makes the
 * others fail by their timeout, or at once when a supervisor aborts the
 * group, never hang; a rank that calls with another length makes the
 * call fail; a bad segment or rank is refused at attach.
 *
 * Seeds: SEED= replays a run (test_rng.h).
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "ipc/ring_allreduce.h"
#include "util/clock.h"
#include "tests/unit/test_rng.h"

#define MAX_P 8u
#define MAX_N 1000u
#define N_CALLS 40u
/* AUTO's threshold for these groups: 100 floats, so AUTO takes both */
#define DIRECT_MAX 400u

/* One call of the plan, the same for every rank. */
struct call {
	uint32_t n;
	uint32_t mode;		/* enum ring_ar_mode as passed */
};

/* What a rank leaves for the parent, per call. */
struct outcome {
	int32_t rc;
	uint64_t bytes;
	float v[MAX_N];
};

static void *map_shared(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	assert_true(p != MAP_FAILED);
	return p;
}

/* ------------------------------------------------------------ inputs */

/* Rank r's input for call k of group size p: floats of magnitudes 2^-12
 * .. 2^12, either sign, so that sums of them round differently in
 * different orders. */
static void input(float *v, uint32_t n, uint32_t p, uint32_t k, uint32_t r,
		  uint64_t salt)
{
	struct rng g = rng_for(salt * 1000003u + (uint64_t)p * 10007u +
			       (uint64_t)k * 101u + r);

	for (uint32_t i = 0; i < n; i++) {
		double u = (double)(rng_next(&g) >> 11) / 9007199254740992.0;
		int e = (int)rng_below(&g, 25) - 12;

		v[i] = (float)ldexp(2 * u - 1, e);
	}
}

/* The plan of group size p: the edge lengths, then random ones. */
static void make_plan(struct call *plan, uint32_t p)
{
	static const uint32_t modes[3] = { RING_AR_RING, RING_AR_DIRECT,
					   RING_AR_AUTO };
	uint32_t edge[] = { 0, 1, p - 1, p, p + 1, 2 * p - 1, MAX_N, MAX_N - 1 };
	struct rng g = rng_for(7000 + p);

	for (uint32_t k = 0; k < N_CALLS; k++) {
		plan[k].n = k < sizeof(edge) / sizeof(edge[0]) ? edge[k] :
			    rng_below(&g, MAX_N + 1);
		plan[k].mode = modes[(k + rng_below(&g, 2)) % 3];
	}
}

/* --------------------------------------------------------- references */

/* Canonical: chunk c's elements folded over ranks c+1, .., c (mod p),
 * each input redrawn here. */
static void ref_canonical(float *out, uint32_t n, uint32_t p, uint32_t k,
			  uint64_t salt)
{
	static float in[MAX_P][MAX_N];

	for (uint32_t r = 0; r < p; r++)
		input(in[r], n, p, k, r, salt);
	for (uint32_t c = 0; c < p; c++) {
		uint64_t lo = (uint64_t)n * c / p, hi = (uint64_t)n * (c + 1) / p;

		for (uint64_t i = lo; i < hi; i++) {
			float s = in[(c + 1) % p][i];

			for (uint32_t j = 2; j <= p; j++)
				s = s + in[(c + j) % p][i];
			out[i] = s;
		}
	}
}

/* |float sum - exact| <= (p - 1) u sum|x| (plus the double's own error):
 * returns whether out is within that of the double-precision sum. */
static bool ref_double_ok(const float *out, uint32_t n, uint32_t p, uint32_t k,
			  uint64_t salt)
{
	static float in[MAX_P][MAX_N];

	for (uint32_t r = 0; r < p; r++)
		input(in[r], n, p, k, r, salt);
	for (uint32_t i = 0; i < n; i++) {
		double s = 0, a = 0;

		for (uint32_t r = 0; r < p; r++) {
			s += in[r][i];
			a += fabs(in[r][i]);
		}
		if (fabs(out[i] - s) > (p - 1) * 0x1p-24 * a * 1.0001 + 1e-300)
			return false;
	}
	return true;
}

/* ring_allreduce.h's bytes for rank r. */
static uint64_t ref_bytes(uint32_t n, uint32_t p, uint32_t r, uint32_t mode)
{
	uint64_t own, next;

	if (p == 1)
		return 0;
	if (mode == RING_AR_AUTO)
		mode = n * 4u <= DIRECT_MAX ? RING_AR_DIRECT : RING_AR_RING;
	if (mode == RING_AR_DIRECT)
		return 4ull * n;
	own = (uint64_t)n * (r + 1) / p - (uint64_t)n * r / p;
	next = (uint64_t)n * ((r + 1) % p + 1) / p - (uint64_t)n * ((r + 1) % p) / p;
	return 4ull * (2ull * n - own - next);
}

/* --------------------------------------------------------- the group */

struct group {
	uint32_t p;
	void *seg;
	size_t seg_bytes;
	struct outcome *out;	/* (N_CALLS, p), shared */
	pid_t pid[MAX_P];
};

static void group_create(struct group *g, uint32_t p)
{
	memset(g, 0, sizeof(*g));
	g->p = p;
	g->seg_bytes = ring_ar_segment_bytes(p, MAX_N);
	assert_true(g->seg_bytes > 0);
	g->seg = map_shared(g->seg_bytes);
	assert_int_equal(ring_ar_format(g->seg, g->seg_bytes, p, MAX_N,
					DIRECT_MAX), 0);
	g->out = map_shared(sizeof(struct outcome) * N_CALLS * p);
}

static void group_destroy(struct group *g)
{
	munmap(g->seg, g->seg_bytes);
	munmap(g->out, sizeof(struct outcome) * N_CALLS * g->p);
}

/* Start every rank's handle at call number gen (every line's count as if
 * gen calls had been made, the last one a RING). */
static void start_at(struct ring_ar *ar, uint64_t gen)
{
	ar->n_calls = gen;
	ar->prev_mode = gen ? RING_AR_RING : 0;
}

static void preset_lines(struct group *g, uint64_t gen)
{
	struct ring_ar_line *lines = (struct ring_ar_line *)
		((char *)g->seg + sizeof(struct ring_ar_head));

	for (uint32_t r = 0; r < g->p && gen; r++)
		atomic_store(&lines[r].prog, (uint32_t)(gen * 2 * g->p - 1));
}

/* What rank r of a fault test does before each call k: 0 go on, or
 * a signal/length change (see the fault tests). */
typedef uint32_t (*rank_hook)(uint32_t r, uint32_t k, uint32_t n);

/* Rank r's life: attach, run the plan's calls, record, exit. */
static void rank_main(struct group *g, uint32_t r, const struct call *plan,
		      uint32_t n_calls, uint64_t gen, uint64_t salt,
		      uint64_t timeout_ns, rank_hook hook)
{
	struct ring_ar ar;
	char err[128];
	static float v[MAX_N];

	if (ring_ar_attach(&ar, g->seg, g->seg_bytes, r, err, sizeof(err)))
		_exit(3);
	start_at(&ar, gen);
	for (uint32_t k = 0; k < n_calls; k++) {
		struct outcome *o = &g->out[k * g->p + r];
		uint32_t n = plan[k].n;

		if (hook)
			n = hook(r, k, n);
		input(v, plan[k].n, g->p, k, r, salt);
		/* calls 0-2 of a fault test (its fault: call 2 or 3) get a
		 * long timeout: a loaded machine must not fail those */
		o->rc = ring_ar_reduce(&ar, v, n, plan[k].mode,
				       hook && k < 3 ? 20000000000ull : timeout_ns,
				       &o->bytes);
		memcpy(o->v, v, plan[k].n * sizeof(float));
	}
	_exit(0);
}

static void group_run(struct group *g, const struct call *plan,
		      uint32_t n_calls, uint64_t gen, uint64_t salt,
		      uint64_t timeout_ns, rank_hook hook)
{
	preset_lines(g, gen);
	for (uint32_t r = 0; r < g->p; r++) {
		g->pid[r] = fork();
		assert_true(g->pid[r] >= 0);
		if (g->pid[r] == 0)
			rank_main(g, r, plan, n_calls, gen, salt, timeout_ns, hook);
	}
}

/* Wait for every rank; returns how many were killed by a signal. */
static uint32_t group_wait(struct group *g)
{
	uint32_t killed = 0;

	for (uint32_t r = 0; r < g->p; r++) {
		int st;

		assert_int_equal(waitpid(g->pid[r], &st, 0), g->pid[r]);
		if (WIFSIGNALED(st))
			killed++;
		else
			assert_int_equal(WEXITSTATUS(st), 0);
	}
	return killed;
}

/* Every call of the plan right on every rank. */
static void check_plan(const struct group *g, const struct call *plan,
		       uint64_t salt)
{
	static float want[MAX_N];

	for (uint32_t k = 0; k < N_CALLS; k++) {
		uint32_t n = plan[k].n;

		ref_canonical(want, n, g->p, k, salt);
		for (uint32_t r = 0; r < g->p; r++) {
			const struct outcome *o = &g->out[k * g->p + r];

			if (o->rc != 0 || o->bytes != ref_bytes(n, g->p, r, plan[k].mode) ||
			    memcmp(o->v, want, n * sizeof(float)) ||
			    !ref_double_ok(o->v, n, g->p, k, salt))
				fail_msg("P=%u call %u n=%u mode=%u rank %u: rc %d, "
					 "bytes %llu (want %llu), canonical %s, "
					 "double %s", g->p, k, n, plan[k].mode, r,
					 o->rc, (unsigned long long)o->bytes,
					 (unsigned long long)ref_bytes(n, g->p, r,
								     plan[k].mode),
					 memcmp(o->v, want, n * sizeof(float)) ?
					 "differs" : "same",
					 ref_double_ok(o->v, n, g->p, k, salt) ?
					 "ok" : "off");
		}
	}
}

/* -------------------------------------------------------------- tests */

/* P = 1..8, the plan from call 0 and from a generation whose 32-bit
 * count wraps within the plan. */
static void run_all(uint64_t (*gen_of)(uint32_t p), uint64_t salt)
{
	for (uint32_t p = 1; p <= MAX_P; p++) {
		struct call plan[N_CALLS];
		struct group g;

		make_plan(plan, p);
		group_create(&g, p);
		group_run(&g, plan, N_CALLS, gen_of(p), salt, 20000000000ull, NULL);
		assert_int_equal(group_wait(&g), 0);
		check_plan(&g, plan, salt);
		group_destroy(&g);
	}
}

static uint64_t gen_zero(uint32_t p)
{
	return 0;
}

static uint64_t gen_wrap(uint32_t p)
{
	return (1ull << 32) / (2 * p) - N_CALLS / 2;
}

static void test_sums_canonical(void **state)
{
	run_all(gen_zero, 1);
}

static void test_count_wraps(void **state)
{
	run_all(gen_wrap, 2);
}

/* Rank 1 dies before call 3. */
static uint32_t hook_kill(uint32_t r, uint32_t k, uint32_t n)
{
	if (r == 1 && k == 3)
		raise(SIGKILL);
	return n;
}

/* The others' calls from 3 on fail; with abort, supervisor aborts. */
static void killed_rank(uint32_t p, bool supervise)
{
	struct call plan[N_CALLS];
	struct group g;
	uint64_t t0 = clock_now_ns(), took_ns;
	uint64_t timeout_ns = supervise ? 60000000000ull : 300000000ull;
	int st;

	make_plan(plan, p);
	group_create(&g, p);
	group_run(&g, plan, 6, 0, 3, timeout_ns, hook_kill);
	if (supervise) {
		assert_int_equal(waitpid(g.pid[1], &st, 0), g.pid[1]);
		assert_true(WIFSIGNALED(st));
		ring_ar_abort(g.seg, ECONNRESET);
		g.pid[1] = 0;
	}
	for (uint32_t r = 0; r < p; r++) {
		if (!g.pid[r])
			continue;
		assert_int_equal(waitpid(g.pid[r], &st, 0), g.pid[r]);
		if (r == 1)
			assert_true(WIFSIGNALED(st));
		else
			assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	took_ns = clock_now_ns() - t0;
	/* far below the 60 s timeout when supervised; a few timeouts else */
	assert_true(took_ns < 10000000000ull);
	for (uint32_t r = 0; r < p; r++) {
		if (r == 1)
			continue;
		for (uint32_t k = 0; k < 3; k++)
			assert_int_equal(g.out[k * p + r].rc, 0);
		for (uint32_t k = 3; k < 6; k++) {
			int rc = g.out[k * p + r].rc;

			if (k > 3 || supervise)
				assert_int_equal(rc, -ECANCELED);
			else
				assert_true(rc == -ETIMEDOUT || rc == -ECANCELED);
		}
	}
	group_destroy(&g);
}

static void test_killed_rank_times_out(void **state)
{
	killed_rank(2, false);
	killed_rank(3, false);
	killed_rank(8, false);
}

static void test_killed_rank_supervisor_aborts(void **state)
{
	killed_rank(2, true);
	killed_rank(5, true);
}

/* Rank 0 calls with one element fewer at call 2: the call fails. */
static uint32_t hook_short(uint32_t r, uint32_t k, uint32_t n)
{
	return r == 0 && k == 2 && n > 0 ? n - 1 : n;
}

static void test_mismatched_call_fails(void **state)
{
	struct call plan[N_CALLS];
	struct group g;
	uint32_t p = 3, saw_proto = 0;

	make_plan(plan, p);
	plan[2].n = 500;
	group_create(&g, p);
	group_run(&g, plan, 4, 0, 4, 5000000000ull, hook_short);
	assert_int_equal(group_wait(&g), 0);
	for (uint32_t r = 0; r < p; r++) {
		int rc = g.out[2 * p + r].rc;

		assert_int_equal(g.out[0 * p + r].rc, 0);
		assert_true(rc == -EPROTO || rc == -ECANCELED);
		saw_proto += rc == -EPROTO;
		assert_int_equal(g.out[3 * p + r].rc, -ECANCELED);
	}
	assert_true(saw_proto > 0);
	group_destroy(&g);
}

static void test_attach_refuses(void **state)
{
	size_t bytes = ring_ar_segment_bytes(4, 100);
	void *seg = map_shared(bytes);
	struct ring_ar ar;
	char err[128] = "";
	float v[200] = { 0 };

	assert_int_equal(ring_ar_segment_bytes(0, 10), 0);
	assert_int_equal(ring_ar_segment_bytes(RING_AR_MAX_RANKS + 1, 10), 0);
	assert_int_equal(ring_ar_segment_bytes(2, RING_AR_MAX_FLOATS + 1), 0);
	assert_int_equal(ring_ar_format(seg, bytes - 1, 4, 100, 0), -EINVAL);
	/* unformatted */
	assert_int_equal(ring_ar_attach(&ar, seg, bytes, 0, err, sizeof(err)),
			 -EPROTO);
	assert_non_null(strstr(err, "magic"));
	assert_int_equal(ring_ar_format(seg, bytes, 4, 100, 0), 0);
	assert_int_equal(ring_ar_attach(&ar, seg, bytes - 64, 0, err, sizeof(err)),
			 -EPROTO);
	assert_non_null(strstr(err, "segment has"));
	assert_int_equal(ring_ar_attach(&ar, seg, 8, 0, err, sizeof(err)), -EPROTO);
	assert_int_equal(ring_ar_attach(&ar, seg, bytes, 4, err, sizeof(err)),
			 -EPROTO);
	assert_non_null(strstr(err, "rank 4"));
	((struct ring_ar_head *)seg)->n_ranks = 1000;
	assert_int_equal(ring_ar_attach(&ar, seg, bytes, 0, err, sizeof(err)),
			 -EPROTO);
	assert_int_equal(ring_ar_format(seg, bytes, 4, 100, 0), 0);
	assert_int_equal(ring_ar_attach(&ar, seg, bytes, 3, err, sizeof(err)), 0);
	assert_int_equal(ring_ar_choose(&ar, RING_AR_DIRECT_MAX_BYTES / 4),
			 RING_AR_DIRECT);
	assert_int_equal(ring_ar_choose(&ar, RING_AR_DIRECT_MAX_BYTES / 4 + 1),
			 RING_AR_RING);
	/* too long: refused, and the group is failed for everyone */
	assert_int_equal(ring_ar_reduce(&ar, v, 101, RING_AR_RING, 1000, NULL),
			 -EINVAL);
	assert_int_equal(ring_ar_reduce(&ar, v, 1, RING_AR_RING, 1000, NULL),
			 -ECANCELED);
	munmap(seg, bytes);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sums_canonical),
		cmocka_unit_test(test_count_wraps),
		cmocka_unit_test(test_killed_rank_times_out),
		cmocka_unit_test(test_killed_rank_supervisor_aborts),
		cmocka_unit_test(test_mismatched_call_fails),
		cmocka_unit_test(test_attach_refuses),
	};

	test_seed_init("test_ring_allreduce");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
