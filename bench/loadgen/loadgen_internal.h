/*
 * loadgen_internal.h - what the parts of bin/loadgen share (bench/loadgen.c:
 * connections, the run and its report; lg_workload.c: requests and the
 * checks of their answers; lg_opts.c: the command line).
 */
#ifndef DYNBATCH_LOADGEN_INTERNAL_H
#define DYNBATCH_LOADGEN_INTERNAL_H

#include <errno.h>
#include "bench/loadgen/lg_http.h"
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <jansson.h>
#include "util/clock.h"
#include "util/parse_num.h"
#include "model/sim_model.h"
#include "util/strbuf.h"

#define LG_MAX_PRINTED 1000	/* scripts count the lines: print them all, bar floods */
#define LG_READ_BYTES 65536
#define LG_MAX_RETRIES 200		/* 429s before we call the server stuck */
#define LG_STALL_RCVBUF 4096
#define LG_ABORT_WAIT_NS 20000000ull	/* plan (b) leaves within 20 ms */
#define LG_TICK_NS 1000000ull		/* timers are scanned once per ms */
#define LG_MAX_EVENTS 256

struct lg_opts {
	const char *host;
	const char *port;
	uint64_t n_requests;
	uint32_t concurrency;
	uint64_t seed;
	double stream_frac;
	double disconnect_frac;
	double stop_frac;
	uint32_t n_stall;		/* extra clients that never read */
	uint32_t max_prompt;		/* tokens */
	uint32_t max_tokens;
	uint32_t vocab;
	const char *api_key;		/* or NULL */
	const char *requests_out;	/* or NULL */
	const char *results_out;	/* or NULL */
	double duration_s;		/* 0: no limit */
	double timeout_s;		/* no progress this long: hung */
	double stall_wait_s;		/* wait this long for the server to
					 * close each stall client (0: look once) */
	bool quiet;
	bool strict;			/* a 500 is an error too */
	const char *input;		/* JSON Lines requests, or NULL */
	json_t **lines;			/* --input's requests */
	uint64_t n_lines;
};

struct tokvec {
	int32_t *v;
	size_t n, cap;
};

struct samples {
	double *v;
	size_t n, cap;
};

/* How (if at all) a client walks away from its request. */
enum lg_disc {
	DISC_NONE,
	DISC_PARTIAL,		/* (a) after part of the body */
	DISC_BEFORE_ANSWER,	/* (b) whole request sent, nothing read */
	DISC_MID_STREAM,	/* (c) after disc_at stream events */
};

/* One request and what came back for it so far. */
struct lg_req {
	char id[24];
	json_t *json;		/* a docs/DESIGN.md 3.1 line: no "stream" */
	uint32_t n_prompt;
	uint32_t max_tokens;
	bool stream;
	enum lg_disc disc;
	uint64_t disc_pick;	/* random: where plan (a) cuts the body */
	uint32_t disc_at;	/* plan (c): events before leaving */
	bool disc_rst;		/* leave with RST rather than FIN */
	uint32_t n_retries;	/* 429s taken */
	struct tokvec toks;
	uint32_t n_events;	/* JSON events of a stream */
	bool final_seen;	/* an answer with finish_reason */
	bool done_seen;		/* data: [DONE] */
	bool usage_seen;	/* a stream's usage event (choices []) */
	bool errored;		/* a stream error event */
	char finish[8];
	char err_msg[160];	/* of an error event */
	uint64_t t_start_ns;	/* first byte of this attempt written */
	uint64_t t_first_ns;	/* first event with tokens, or the final one */
	uint64_t t_first_tok_ns;
	uint64_t t_last_tok_ns;
};

enum conn_state {
	CS_IDLE,	/* between requests: the loop calls conn_next() */
	CS_CONNECTING,
	CS_SENDING,
	CS_RECEIVING,
	CS_BACKOFF,	/* a 429: the same request goes again at wake_ns */
	CS_ABORT_WAIT,	/* plan (b): sent, leaving at wake_ns unread */
	CS_STALLED,	/* a stall client: sent, never reads */
	CS_DONE,
};

struct lg_conn {
	int fd;				/* -1: not connected */
	uint32_t ev_mask;		/* what epoll watches, 0: not added */
	enum conn_state state;
	bool stall;
	bool has_req;
	struct lg_req req;
	struct strbuf out;		/* the request bytes */
	size_t out_off;			/* of them written */
	struct strbuf in;		/* received, not yet parsed */
	struct http_resp resp;
	uint64_t progress_ns;		/* last time a byte moved */
	uint64_t wake_ns;		/* CS_BACKOFF / CS_ABORT_WAIT deadline */
};

struct lg_stats {
	uint64_t started, completed, disconnected, failed, rejected429;
	uint64_t protocol_errors, connections, tokens;
	struct samples ttft_ms, tpot_ms, latency_ms, rate_tps;
};

struct lg {
	struct lg_opts o;
	int epfd;
	struct sockaddr_storage addr;
	socklen_t addrlen;
	uint64_t rng;
	uint64_t t0_ns, end_ns;		/* end_ns: stop starting requests */
	struct lg_conn *conns;		/* n_stall stall clients, then C */
	uint32_t n_conns;
	uint32_t n_busy;		/* conns not CS_DONE / CS_STALLED */
	FILE *req_out, *res_out;
	struct strbuf sse_data;		/* one event's data, reused */
	struct lg_stats st;
};


/* lg_workload.c: random numbers and samples */
uint64_t rnd(struct lg *lg);
uint32_t rnd_below(struct lg *lg, uint32_t n);
void samples_add(struct samples *s, double x);
double samples_pct(struct samples *s, double p);

/* lg_workload.c: the requests, and the checks of their answers */
int load_input(struct lg_opts *o);
int gen_request(struct lg *lg, struct lg_req *rq, bool stall,
		uint64_t n);
const char *error_message(json_t *obj);
int check_completion(struct lg *lg, struct http_resp *r,
		     struct lg_req *rq, json_t *obj, bool stream);
int sse_event(struct lg *lg, struct lg_conn *c, const char *s,
	      size_t n, struct strbuf *data);

/* lg_opts.c */
int parse_opts(int argc, char **argv, struct lg_opts *o);

#endif /* DYNBATCH_LOADGEN_INTERNAL_H */
