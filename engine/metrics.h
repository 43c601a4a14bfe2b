/*
 * metrics.h - Prometheus text exposition (format 0.0.4) for GET /metrics:
 * counters, gauges, and a fixed-bucket latency histogram cheap enough to
 * record on every model step.
 */
#ifndef DYNBATCH_METRICS_H
#define DYNBATCH_METRICS_H

#include <stdint.h>

#include "util/strbuf.h"

#define HISTOGRAM_BUCKETS 16	/* finite upper bounds, 0.5 ms .. 60 s */

struct histogram {
	uint64_t counts[HISTOGRAM_BUCKETS + 1];	/* per bucket; last is +Inf */
	uint64_t n;
	uint64_t sum_ns;
};

void histogram_record(struct histogram *h, uint64_t ns);

/*
 * Append one sample.  With help non-NULL the "# HELP" and "# TYPE" lines
 * come first (once per metric family: pass NULL for its later samples).
 * labels is NULL or the text between the braces, e.g. "reason=\"stop\"".
 * 0 or -ENOMEM.
 */
int metrics_counter(struct strbuf *out, const char *name, const char *help,
		    const char *labels, uint64_t value);
int metrics_gauge(struct strbuf *out, const char *name, const char *help,
		  uint64_t value);
/* A histogram in seconds: cumulative _bucket{le=...}, _sum, _count. */
int metrics_histogram(struct strbuf *out, const char *name, const char *help,
		      const struct histogram *h);

#endif /* DYNBATCH_METRICS_H */
