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
#include "text/gguf_vocab_read.h"
#include "text/gguf_tokenizer.h"
#include "text/text_tokenizer.h"
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

/* The path of a gguf:PATH[,options] spec (malloc'd), or NULL. */
static char *gguf_spec_path(const char *spec)
{
	if (strncmp(spec, "gguf:", 5))
		return NULL;
	return strndup(spec + 5, strcspn(spec + 5, ","));
}

/* The GGUF file's own tokenizer and chat template, if it has them.
 * Returns an exit status. */
static int engine_open_gguf_tokenizer(struct engine *e, const char *path)
{
	struct gguf_tokenizer *g;
	char err[512];
	int ret = gguf_vocab_read_file(path, &g, &e->chat_template, err,
				       sizeof(err));

	if (ret) {
		fprintf(stderr, "dynbatch: %s\n", err);
		return ret == -ENOMEM ? ENGINE_EXIT_FAILED : ENGINE_EXIT_USAGE;
	}
	if (!g)
		return ENGINE_EXIT_OK;	/* token ids only, as with no tokenizer */
	if (gguf_tokenizer_vocab_size(g) != e->vocab) {
		fprintf(stderr, "dynbatch: gguf '%s': the tokenizer has %u tokens "
			"but the model's vocabulary is %u\n", path,
			gguf_tokenizer_vocab_size(g), e->vocab);
		gguf_tokenizer_free(g);
		return ENGINE_EXIT_USAGE;
	}
	if (text_tokenizer_from_gguf(g, &e->tok))
		return ENGINE_EXIT_FAILED;
	LOG(LOG_INFO, "tokenizer: %s's own, %u tokens%s", path, e->vocab,
	    e->chat_template ? ", with a chat template" : "");
	return ENGINE_EXIT_OK;
}

/*
 * Load the tokenizer: --tokenizer (a llama2.c tokenizer.bin), else the
 * one beside a llama checkpoint, else a GGUF file's own.  Returns an
 * exit status; none is fine.
 */
static int engine_open_tokenizer(struct engine *e)
{
	char *path = e->cfg->tokenizer_path ? strdup(e->cfg->tokenizer_path) :
		     tokenizer_beside(e->cfg->model_spec);
	struct tokenizer *tok;
	char err[512];
	int ret;

	if (!path && !e->cfg->tokenizer_path &&
	    (path = gguf_spec_path(e->cfg->model_spec))) {
		ret = engine_open_gguf_tokenizer(e, path);
		free(path);
		return ret;
	}
	if (!path)
		return e->cfg->tokenizer_path ? ENGINE_EXIT_FAILED : ENGINE_EXIT_OK;
	ret = tokenizer_load(path, e->vocab, &tok, err, sizeof(err));
	if (ret)
		fprintf(stderr, "dynbatch: --tokenizer: %s\n", err);
	else if (text_tokenizer_from_llama2c(tok, &e->tok))
		ret = -ENOMEM;
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
			e->kv_bytes_per_token = probe.kv_bytes_per_token;
			e->worker_spec = strdup(spec);
			if (!e->worker_spec) {
				fprintf(stderr, "dynbatch: out of memory\n");
				return ENGINE_EXIT_FAILED;
			}
			ret = engine_set_max_context(e, probe.max_context);
			/* a plugin's outputs per row are its workers' to
			 * clamp: the result rows are sized for the most */
			return ret == ENGINE_EXIT_OK ?
			       engine_spec_setup(e, false, MODEL_MAX_OUTPUTS) : ret;
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
	if (model_is_paged(e->model)) {
		uint64_t b = model_kv_bytes_per_token(e->model);

		if (b > PROBE_KV_BYTES_MAX) {
			fprintf(stderr, "dynbatch: --model: %llu KV bytes per "
				"position is more than %u\n",
				(unsigned long long)b, PROBE_KV_BYTES_MAX);
			model_close(e->model);
			e->model = NULL;
			return ENGINE_EXIT_USAGE;
		}
		e->kv_bytes_per_token = (uint32_t)b;
	}
	e->worker_spec = model_worker_spec(e->model, spec);
	ret = e->worker_spec ? engine_set_max_context(e, model_max_context(e->model)) :
			       ENGINE_EXIT_FAILED;
	if (ret == ENGINE_EXIT_OK)
		ret = engine_spec_setup(e, model_is_stateful(e->model),
					model_max_outputs(e->model));
	if (!e->in_process || ret != ENGINE_EXIT_OK) {	/* the workers run it */
		model_close(e->model);
		e->model = NULL;
	}
	return ret;
}

/*
 * --speculate: how many tokens a row may get in one result
 * (e->spec_emit; docs/DESIGN.md 2.7).  A stateful model checks a row's
 * guesses in one step, so it must give the logits of several positions
 * (max_outputs(), ABI version 5); one that gives one position's is a
 * usage error rather than a quiet "off".  A token model's runner checks
 * each guessed prefix as a row of its own.
 */
int engine_spec_setup(struct engine *e, bool stateful, uint32_t max_outputs)
{
	const struct spec_config *sc = &e->cfg->spec;
	uint32_t k = sc->mode == SPEC_OFF ? 0 : sc->max_draft;

	if (k > SPEC_MAX_DRAFT)
		k = SPEC_MAX_DRAFT;
	if (k && stateful && max_outputs < 2) {
		fprintf(stderr, "dynbatch: --speculate ngram needs a model that "
			"gives the logits of several positions of a row in one "
			"step (model ABI version 5, max_outputs()); this one "
			"gives one\n");
		return ENGINE_EXIT_USAGE;
	}
	if (k && stateful && k > max_outputs - 1)
		k = max_outputs - 1;
	e->spec_emit = 1 + k;
	return ENGINE_EXIT_OK;
}

/* Bytes in human units for the line engine_size_kv() prints. */
static const char *engine_bytes_str(uint64_t b, char *buf, size_t len)
{
	if (b >= (1ull << 30))
		snprintf(buf, len, "%.1f GiB", (double)b / (1ull << 30));
	else
		snprintf(buf, len, "%.1f MiB", (double)b / (1ull << 20));
	return buf;
}

int engine_size_kv(struct engine *e)
{
	const struct engine_config *cfg = e->cfg;
	uint32_t bt = cfg->block_tokens ? cfg->block_tokens : ENGINE_DEFAULT_BLOCK_TOKENS;
	uint32_t per_shard = (cfg->n_slots + e->n_shards - 1) / e->n_shards;
	uint64_t block_bytes = (uint64_t)bt * e->kv_bytes_per_token;
	uint64_t full = (uint64_t)per_shard * ((e->max_context + bt - 1) / bt);
	uint64_t blocks, budget;
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	char a[32], b[32];

	if (!e->kv_bytes_per_token)
		return ENGINE_EXIT_OK;
	if (cfg->kv_memory) {
		blocks = cfg->kv_memory / e->n_shards / block_bytes;
		if (!blocks) {
			fprintf(stderr, "dynbatch: --kv-memory %s holds no KV block "
				"of %llu bytes (%u tokens) per shard (%u shards)\n",
				engine_bytes_str(cfg->kv_memory, a, sizeof(a)),
				(unsigned long long)block_bytes, bt, e->n_shards);
			return ENGINE_EXIT_USAGE;
		}
	} else {
		/* the batch at full context, or half the machine */
		budget = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 2 :
			 (1ull << 30);
		blocks = budget / e->n_shards / block_bytes;
		if (blocks > full)
			blocks = full;
		if (!blocks)
			blocks = 1;
	}
	if (blocks > UINT32_MAX / 2)
		blocks = UINT32_MAX / 2;
	e->kv_blocks = (uint32_t)blocks;
	/* on stderr whatever the log level: the user should know what the
	 * default chose */
	fprintf(stderr, "dynbatch: kv: %u shard pool%s of %llu blocks of %u "
		"tokens (%s each); the batch at full context needs %llu a shard "
		"(%s)%s\n", e->n_shards, e->n_shards > 1 ? "s" : "",
		(unsigned long long)blocks, bt,
		engine_bytes_str(blocks * block_bytes, a, sizeof(a)),
		(unsigned long long)full,
		engine_bytes_str(full * block_bytes, b, sizeof(b)),
		cfg->kv_memory ? ", from --kv-memory" :
		blocks < full ? ", capped at half the machine's memory" : "");
	return ENGINE_EXIT_OK;
}
