/*
 * engine_model.c - the engine's model at start: opening it (or probing a
 * plugin, docs/DESIGN.md 2.2), the workers' pinned --model, and the
 * context limit that follows from it (2.3).
 */
#include "engine/engine_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"
#include "util/log_escape.h"
#include "model/model_loader.h"
#include "engine/model_probe.h"
#include "text/tokenizer.h"

/*
 * The longest sequence: --max-context, which may not exceed the model's
 * own limit (model_limit, 0: none), or by default that limit (a
 * checkpoint's seq_len), else ENGINE_DEFAULT_MAX_CONTEXT.
 */
static int engine_set_max_context(struct engine *e, uint32_t model_limit)
{
	uint32_t want = e->cfg->max_context;

	if (want && model_limit && want > model_limit) {
		fprintf(stderr, "dynbatch: --max-context %u is larger than the "
			"model's own limit of %u tokens\n", want, model_limit);
		return ENGINE_EXIT_USAGE;
	}
	if (!want)
		want = model_limit ? model_limit : ENGINE_DEFAULT_MAX_CONTEXT;
	if (want > SHM_MAX_CONTEXT) {
		fprintf(stderr, "dynbatch: the model's limit of %u tokens is more "
			"than a slot can hold (%u): give --max-context\n", want,
			SHM_MAX_CONTEXT);
		return ENGINE_EXIT_USAGE;
	}
	e->max_context = want;
	return ENGINE_EXIT_OK;
}

/*
 * The tokenizer.bin beside a llama checkpoint ("llama:DIR/x.bin[,...]"),
 * malloc'd, when there is one; NULL otherwise.
 */
static char *tokenizer_beside(const char *spec)
{
	const char *path, *slash;
	char *out;
	size_t dir;

	if (strncmp(spec, "llama:", 6))
		return NULL;
	path = spec + 6;
	slash = memrchr(path, '/', strcspn(path, ","));
	dir = slash ? (size_t)(slash - path) + 1 : 0;
	if (asprintf(&out, "%.*stokenizer.bin", (int)dir, path) < 0)
		return NULL;
	if (access(out, F_OK)) {
		free(out);
		return NULL;
	}
	return out;
}

/*
 * Load the tokenizer (--tokenizer, or the one beside a llama checkpoint)
 * for the model's vocabulary.  Returns an exit status; none is fine.
 */
static int engine_open_tokenizer(struct engine *e)
{
	char *path = e->cfg->tokenizer_path ? strdup(e->cfg->tokenizer_path) :
		     tokenizer_beside(e->cfg->model_spec);
	char err[512];
	int ret;

	if (!path)
		return e->cfg->tokenizer_path ? ENGINE_EXIT_FAILED : ENGINE_EXIT_OK;
	ret = tokenizer_load(path, e->vocab, &e->tok, err, sizeof(err));
	if (ret)
		fprintf(stderr, "dynbatch: --tokenizer: %s\n", err);
	else
		LOG(LOG_INFO, "tokenizer %s: %u tokens", path, e->vocab);
	free(path);
	return ret == -ENOMEM ? ENGINE_EXIT_FAILED : ret ? ENGINE_EXIT_USAGE :
	       ENGINE_EXIT_OK;
}

/*
 * Learn the model's vocabulary.  A plugin's code never runs here when
 * workers run it (docs/DESIGN.md 12.1): its vocabulary comes from a
 * sandboxed probe (model_probe.h).  The sim model is our own code and
 * cheap to open; with --workers 0 the coordinator runs the model itself
 * by design, and keeps it open.  Returns an exit status.
 */
static int engine_open_model_only(struct engine *e);

int engine_open_model(struct engine *e)
{
	int ret = engine_open_model_only(e);

	return ret == ENGINE_EXIT_OK ? engine_open_tokenizer(e) : ret;
}

static int engine_open_model_only(struct engine *e)
{
	const char *spec = e->cfg->model_spec;
	char err[1024], esc[LOG_ESCAPE_MAX + 1];
	int ret;

	if (!e->in_process && model_spec_names_plugin(spec)) {
		struct model_probe probe;

		ret = model_probe_vocab(e->worker_path, spec, e->cfg->start_timeout_ms,
					&probe, err, sizeof(err));
		if (!ret) {
			e->vocab = probe.vocab;
			e->has_logits = probe.logits;
			e->worker_spec = strdup(spec);
			if (!e->worker_spec) {
				fprintf(stderr, "dynbatch: out of memory\n");
				return ENGINE_EXIT_FAILED;
			}
			return engine_set_max_context(e, probe.max_context);
		}
		fprintf(stderr, "dynbatch: --model %s: %s%s\n",
			log_escape(spec, esc, sizeof(esc)),
			ret > 0 ? "the model cannot be opened: " : "", err);
		return ret > 0 ? ENGINE_EXIT_USAGE : ENGINE_EXIT_FAILED;
	}
	e->model = model_open(spec, err, sizeof(err));
	if (!e->model) {
		fprintf(stderr, "dynbatch: --model: %s\n", err);
		return ENGINE_EXIT_USAGE;
	}
	e->vocab = model_vocab(e->model);
	e->has_logits = model_has_logits(e->model);
	e->worker_spec = model_worker_spec(e->model, spec);
	ret = e->worker_spec ? engine_set_max_context(e, model_max_context(e->model)) :
			       ENGINE_EXIT_FAILED;
	if (!e->in_process || ret != ENGINE_EXIT_OK) {	/* the workers run it */
		model_close(e->model);
		e->model = NULL;
	}
	return ret;
}
