/*
 * metrics.c - see metrics.h.
 */
#include "engine/metrics.h"

#include <inttypes.h>

/* Bucket upper bounds, ns, and as Prometheus writes them, seconds. */
static const uint64_t bucket_ns[HISTOGRAM_BUCKETS] = {
	500000, 1000000, 2500000, 5000000, 10000000, 25000000, 50000000,
	100000000, 250000000, 500000000, 1000000000, 2500000000ull,
	5000000000ull, 10000000000ull, 30000000000ull, 60000000000ull,
};
static const char *const bucket_le[HISTOGRAM_BUCKETS] = {
	"0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1",
	"0.25", "0.5", "1", "2.5", "5", "10", "30", "60",
};

void histogram_record(struct histogram *h, uint64_t ns)
{
	unsigned i = 0;

	while (i < HISTOGRAM_BUCKETS && ns > bucket_ns[i])
		i++;
	h->counts[i]++;
	h->n++;
	h->sum_ns += ns;
}

static int metrics_head(struct strbuf *out, const char *name, const char *help,
			const char *type)
{
	if (!help)
		return 0;
	return strbuf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

int metrics_counter(struct strbuf *out, const char *name, const char *help,
		    const char *labels, uint64_t value)
{
	if (metrics_head(out, name, help, "counter"))
		return -1;
	if (labels)
		return strbuf_printf(out, "%s{%s} %" PRIu64 "\n", name, labels, value);
	return strbuf_printf(out, "%s %" PRIu64 "\n", name, value);
}

int metrics_gauge(struct strbuf *out, const char *name, const char *help,
		  uint64_t value)
{
	if (metrics_head(out, name, help, "gauge"))
		return -1;
	return strbuf_printf(out, "%s %" PRIu64 "\n", name, value);
}

int metrics_histogram(struct strbuf *out, const char *name, const char *help,
		      const struct histogram *h)
{
	uint64_t cum = 0;
	int ret = metrics_head(out, name, help, "histogram");

	for (unsigned i = 0; i < HISTOGRAM_BUCKETS && !ret; i++) {
		cum += h->counts[i];
		ret = strbuf_printf(out, "%s_bucket{le=\"%s\"} %" PRIu64 "\n", name,
				    bucket_le[i], cum);
	}
	if (!ret)
		ret = strbuf_printf(out, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n"
				    "%s_sum %.9f\n%s_count %" PRIu64 "\n", name, h->n,
				    name, (double)h->sum_ns / 1e9, name, h->n);
	return ret;
}
