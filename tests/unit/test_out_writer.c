/*
 * test_out_writer.c - the double-buffered writer on a real io_uring and a
 * pipe, against a reference: the plain concatenation of every byte
 * appended.
 *
 * Random rounds append chunks to the writer, arm it, reap completions and
 * drain the pipe; at the end the bytes that came out of the pipe must be
 * exactly the bytes appended, in order (nothing lost, repeated or
 * reordered across the swaps of the two buffers), and a writer with
 * nothing in flight must have nothing pending.  The by-hand tests pin the
 * swap rule (no swap while an operation is in flight), the blocking
 * flush's order (older bytes first) and, on a socket, a partial send
 * (only the bytes sent are dropped) and a send to a closed peer (-EPIPE,
 * no SIGPIPE, nothing dropped).
 *
 * The random test prints its seed; SEED=<n> replays a run.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "io/io_ring.h"
#include "io/out_writer.h"
#include "util/strbuf.h"
#include "tests/unit/test_rng.h"

struct harness {
	struct io_ring ring;
	int fds[2];			/* the pipe: read end, write end */
	struct out_writer w;
	struct io_op op;
	uint32_t n_done;		/* completions seen */
	int32_t last_res;
	size_t n_written;		/* bytes the completions reported */
	struct strbuf got;		/* what came out of the pipe */
};

static void on_write(struct io_op *op, int32_t res)
{
	struct harness *h = op->arg;

	out_writer_done(&h->w, res);
	h->n_done++;
	h->last_res = res;
	assert_true(res > 0);
	h->n_written += (size_t)res;
}

static void harness_init(struct harness *h)
{
	memset(h, 0, sizeof(*h));
	assert_int_equal(io_ring_init(&h->ring, 8), 0);
	assert_int_equal(pipe2(h->fds, O_CLOEXEC), 0);
	assert_int_equal(fcntl(h->fds[0], F_SETFL, O_NONBLOCK), 0);
	h->op = (struct io_op){ on_write, h };
}

static void harness_release(struct harness *h)
{
	io_ring_exit(&h->ring);
	if (h->fds[0] >= 0)	/* the socket test closes it early */
		close(h->fds[0]);
	close(h->fds[1]);
	out_writer_release(&h->w);
	strbuf_release(&h->got);
}

/* Read whatever the pipe holds now. */
static void drain(struct harness *h)
{
	char buf[4096];
	ssize_t n;

	while ((n = read(h->fds[0], buf, sizeof(buf))) > 0)
		assert_int_equal(strbuf_append(&h->got, buf, (size_t)n), 0);
	assert_true(n < 0 && errno == EAGAIN);
}

/* Reap one completion if one comes within a millisecond. */
static void reap(struct harness *h)
{
	assert_true(io_ring_wait(&h->ring, 1000000) >= 0);
	while (io_ring_dispatch(&h->ring) > 0)
		;
}

static void test_swap_only_when_idle(void **state)
{
	struct harness h;

	harness_init(&h);
	assert_false(out_writer_arm(&h.w, &h.ring, h.fds[1], false, &h.op));
	assert_int_equal(strbuf_append(&h.w.fill, "abc", 3), 0);
	assert_true(out_writer_arm(&h.w, &h.ring, h.fds[1], false, &h.op));
	assert_int_equal(h.w.write.len, 3);
	assert_int_equal(h.w.fill.len, 0);
	/* appended while the write is in flight: stays in fill */
	assert_int_equal(strbuf_append(&h.w.fill, "def", 3), 0);
	assert_false(out_writer_arm(&h.w, &h.ring, h.fds[1], false, &h.op));
	assert_int_equal(out_writer_pending(&h.w), 6);
	while (!h.n_done)
		reap(&h);
	assert_int_equal(h.last_res, 3);
	assert_int_equal(out_writer_pending(&h.w), 3);
	assert_true(out_writer_arm(&h.w, &h.ring, h.fds[1], false, &h.op));
	while (h.n_done < 2)
		reap(&h);
	assert_int_equal(out_writer_pending(&h.w), 0);
	drain(&h);
	assert_int_equal(h.got.len, 6);
	assert_memory_equal(h.got.data, "abcdef", 6);
	harness_release(&h);
}

static void test_flush_sync_older_first(void **state)
{
	struct harness h;

	harness_init(&h);
	/* as after a loop that ended with a write half done */
	assert_int_equal(strbuf_append(&h.w.write, "older ", 6), 0);
	assert_int_equal(strbuf_append(&h.w.fill, "newer", 5), 0);
	assert_int_equal(out_writer_flush_sync(&h.w, h.fds[1], 1000), 0);
	assert_int_equal(out_writer_pending(&h.w), 0);
	drain(&h);
	assert_int_equal(h.got.len, 11);
	assert_memory_equal(h.got.data, "older newer", 11);
	harness_release(&h);
}

/* Completion for the socket test: errors are expected there. */
static void on_send(struct io_op *op, int32_t res)
{
	struct harness *h = op->arg;

	out_writer_done(&h->w, res);
	h->n_done++;
	h->last_res = res;
	if (res > 0)
		h->n_written += (size_t)res;
}

/*
 * What the HTTP server relies on: on a socket a send may take only part of
 * the bytes (the client reads slowly); exactly those are dropped and the
 * next send starts at the first byte not sent.  A send to a peer that has
 * gone fails with -EPIPE instead of raising SIGPIPE (which would end this
 * test) and drops nothing.
 */
static void test_socket_partial_send_then_epipe(void **state)
{
	enum { TOTAL = 1 << 20 };
	int small = 4096;
	struct harness h;
	struct strbuf want = STRBUF_INIT;
	size_t pending;

	harness_init(&h);
	close(h.fds[0]);
	close(h.fds[1]);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, h.fds), 0);
	assert_int_equal(fcntl(h.fds[0], F_SETFL, O_NONBLOCK), 0);
	assert_int_equal(setsockopt(h.fds[1], SOL_SOCKET, SO_SNDBUF, &small,
				    sizeof(small)), 0);
	h.op = (struct io_op){ on_send, &h };
	for (uint32_t i = 0; i < TOTAL; i++) {
		char b = (char)(i * 7 + i / 251);

		assert_int_equal(strbuf_append(&want, &b, 1), 0);
	}
	assert_int_equal(strbuf_append(&h.w.fill, want.data, want.len), 0);

	/* nobody reads yet: the first send cannot take the whole megabyte */
	assert_true(out_writer_arm(&h.w, &h.ring, h.fds[1], true, &h.op));
	while (!h.n_done)
		reap(&h);
	assert_true(h.last_res > 0 && h.last_res < TOTAL);
	assert_false(h.w.inflight);
	assert_int_equal(out_writer_pending(&h.w), TOTAL - (size_t)h.last_res);

	while (out_writer_pending(&h.w) || h.w.inflight) {
		out_writer_arm(&h.w, &h.ring, h.fds[1], true, &h.op);
		drain(&h);
		reap(&h);
		assert_true(h.last_res > 0);
	}
	drain(&h);
	assert_int_equal(h.got.len, want.len);
	assert_memory_equal(h.got.data, want.data, want.len);

	/* the peer is gone: an error code, nothing dropped */
	close(h.fds[0]);
	h.fds[0] = -1;
	assert_int_equal(strbuf_append(&h.w.fill, "lost", 4), 0);
	pending = out_writer_pending(&h.w);
	assert_true(out_writer_arm(&h.w, &h.ring, h.fds[1], true, &h.op));
	while (h.w.inflight)
		reap(&h);
	assert_int_equal(h.last_res, -EPIPE);
	assert_int_equal(out_writer_pending(&h.w), pending);
	strbuf_release(&want);
	harness_release(&h);
}

static void test_random_vs_reference(void **state)
{
	struct rng r = rng_for(3);
	struct harness h;
	struct strbuf want = STRBUF_INIT;
	char chunk[3000];

	harness_init(&h);
	for (uint32_t round = 0; round < 3000; round++) {
		switch (rng_below(&r, 4)) {
		case 0:
		case 1: {
			size_t n = 1 + rng_below(&r, sizeof(chunk));

			for (size_t i = 0; i < n; i++)
				chunk[i] = (char)rng_next(&r);
			assert_int_equal(strbuf_append(&h.w.fill, chunk, n), 0);
			assert_int_equal(strbuf_append(&want, chunk, n), 0);
			break;
		}
		case 2:
			out_writer_arm(&h.w, &h.ring, h.fds[1], false, &h.op);
			break;
		default:
			drain(&h);
			reap(&h);
			break;
		}
		/* every byte appended is either written or still held */
		assert_int_equal(h.n_written + out_writer_pending(&h.w), want.len);
		assert_true(h.got.len <= h.n_written);
	}
	while (out_writer_pending(&h.w) || h.w.inflight) {
		out_writer_arm(&h.w, &h.ring, h.fds[1], false, &h.op);
		drain(&h);
		reap(&h);
	}
	drain(&h);
	if (h.got.len != want.len || memcmp(h.got.data, want.data, want.len))
		fail_msg("pipe gave %zu bytes, %zu appended, or different bytes "
			 "(SEED=%llu)", h.got.len, want.len, test_seed);
	strbuf_release(&want);
	harness_release(&h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_swap_only_when_idle),
		cmocka_unit_test(test_flush_sync_older_first),
		cmocka_unit_test(test_socket_partial_send_then_epipe),
		cmocka_unit_test(test_random_vs_reference),
	};

	test_seed_init("test_out_writer");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
