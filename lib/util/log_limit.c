/*
 * log_limit.c - see log_limit.h.
 */
#include "util/log_limit.h"

bool log_limit_pass(struct log_limit *l, uint64_t now_ns, uint64_t *n_held)
{
	if (l->n_passed >= LOG_LIMIT_BURST &&
	    now_ns - l->last_pass_ns < LOG_LIMIT_PERIOD_NS) {
		l->n_held++;
		return false;
	}
	if (l->n_passed < LOG_LIMIT_BURST)
		l->n_passed++;
	l->last_pass_ns = now_ns;
	*n_held = l->n_held;
	l->n_held = 0;
	return true;
}
