/*
 * model_loader.c - turn a --model SPEC into a callable model; see
 * model_loader.h for the spec grammar.
 *
 * NOTES ON THE DESIGN
 *
 * Both backends go through the same struct dynbatch_model_api table: the
 * sim model's comes from sim_model_api(), a plugin's from the one symbol it
 * exports.  The rest of the engine only sees struct model, so it cannot
 * tell them apart.
 *
 * A plugin is third-party code, so everything it hands back is checked
 * before it is trusted: the table must exist, carry an ABI version we
 * read (1 to DYNBATCH_MODEL_ABI_VERSION) and the callbacks its kind of
 * model needs (destroy is optional), and the model must report a
 * vocabulary of at least one token.  Only as much of the table as its
 * version defines is read: an older plugin's table is shorter than ours,
 * and what follows it in its memory is not ours to read.  A stateful
 * table that also sets logits() is refused rather than half-used: its
 * author expects the hook to be called, and it never would be.  A paged
 * table (version 4, step_paged set) needs kv_bytes_per_token() and
 * bind_paged(), and kv_bytes_per_token() must give more than 0 once the
 * model is created (the engine sizes its pool from it); it may also set
 * step(), bind() and release() (a model that runs either way), which are
 * then checked as any stateful table's.  After
 * each step model_next() checks every token against that vocabulary, so
 * a buggy plugin fails the step instead of feeding out-of-range tokens
 * onward.
 *
 * A plugin path without a '/' ("my.so") is opened as "./my.so": the user
 * named a file, and dlopen() would otherwise search the library path for
 * it instead.  Plugins are opened RTLD_NOW (a missing symbol fails here,
 * not mid-run in a worker) and RTLD_LOCAL (two plugins cannot collide).
 */
#include "model/model_loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dynbatch/model.h"
#include "model/llama_model.h"
#include "model/sim_model.h"
#include "model/simkv_model.h"

/* What the coordinator appends to a file-backed model's spec for its
 * workers: the identity of the file it opened (model_worker_spec()). */
#define MODEL_PIN_KEY ",pin="
#define MODEL_PIN_MAX 96

#define MODEL_SPEC_HELP \
	"(expected sim, sim:key=value,..., simkv[2]:key=value,..., " \
	"llama:CHECKPOINT[,key=value], gguf:FILE[,key=value] or path/to/plugin.so[:args])"

struct model {
	/* Our copy of the plugin's table: only as much of it as its version
	 * defines is read (model_table_size()), and the rest stays NULL. */
	struct dynbatch_model_api table;
	const struct dynbatch_model_api *api;	/* &table */
	void *handle;		/* what api->create() returned */
	void *dl;		/* dlopen() handle; NULL for the sim model */
	uint32_t vocab;		/* api->vocab(handle), read once at open */
	uint32_t max_context;	/* api->max_context(handle) or 0, read once */
	uint64_t kv_bytes_per_token;	/* paged: read once at open; else 0 */
	uint32_t max_outputs;	/* output rows per row of a step, >= 1,
				 * read once at open (model.h, version 5) */
	char pin[MODEL_PIN_MAX];	/* a file-backed model's file identity */
};

/* Does name[0..len) name a plugin file rather than a built-in model? */
static bool model_spec_is_path(const char *name, size_t len)
{
	return memchr(name, '/', len) != NULL ||
	       (len >= 3 && memcmp(name + len - 3, ".so", 3) == 0);
}

/*
 * dlopen() the plugin at path and return its API table in *api (not yet
 * checked: model_take_table() does that for every table).
 * Returns the dlopen() handle, or NULL after writing err (nothing open).
 */
static void *model_load_plugin(const char *path,
			       const struct dynbatch_model_api **api,
			       char *err, size_t err_len)
{
	dynbatch_model_plugin_fn entry;
	const struct dynbatch_model_api *a;
	const char *why;
	void *dl, *sym;

	dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		why = dlerror();
		snprintf(err, err_len, "cannot load model plugin '%s': %s",
			 path, why ? why : "unknown dlopen error");
		return NULL;
	}
	dlerror();
	sym = dlsym(dl, DYNBATCH_MODEL_PLUGIN_SYMBOL);
	if (!sym) {
		why = dlerror();
		snprintf(err, err_len, "model plugin '%s' has no %s(): %s",
			 path, DYNBATCH_MODEL_PLUGIN_SYMBOL,
			 why ? why : "symbol is NULL");
		goto out_dlclose;
	}
	entry = (dynbatch_model_plugin_fn)sym;
	a = entry();
	if (!a) {
		snprintf(err, err_len, "model plugin '%s': %s() returned NULL",
			 path, DYNBATCH_MODEL_PLUGIN_SYMBOL);
		goto out_dlclose;
	}
	*api = a;
	return dl;

out_dlclose:
	dlclose(dl);
	return NULL;
}

/*
 * Split spec into the API table to use and the args for its create().
 * Returns the dlopen() handle for a plugin (NULL for sim) in *dl.
 * Returns 0, or a negative errno after writing err (nothing open).
 */
static int model_resolve(const char *spec,
			 const struct dynbatch_model_api **api,
			 const char **args, void **dl, char *err,
			 size_t err_len)
{
	const char *colon = strchr(spec, ':');
	size_t name_len = colon ? (size_t)(colon - spec) : strlen(spec);
	char *path;

	*args = colon ? colon + 1 : "";
	*dl = NULL;
	if (name_len == 3 && memcmp(spec, "sim", 3) == 0) {
		*api = sim_model_api();
		return 0;
	}
	if (name_len == 5 && memcmp(spec, "simkv", 5) == 0) {
		*api = simkv_model_api();
		return 0;
	}
	if (name_len == 6 && memcmp(spec, "simkv2", 6) == 0) {
		*api = simkv_v2_model_api();
		return 0;
	}
	/* gguf:FILE is llama:FILE: the file's first bytes pick its reader
	 * (llama_checkpoint.c), a GGUF file's or a llama2.c one's */
	if ((name_len == 5 && memcmp(spec, "llama", 5) == 0) ||
	    (name_len == 4 && memcmp(spec, "gguf", 4) == 0)) {
		*api = llama_model_api();
		return 0;
	}
	if (!model_spec_is_path(spec, name_len)) {
		snprintf(err, err_len, "unknown model '%.*s' " MODEL_SPEC_HELP,
			 (int)name_len, spec);
		return -EINVAL;
	}
	/* "./" + name + NUL; see the file comment for why "./" */
	path = malloc(name_len + 3);
	if (!path) {
		snprintf(err, err_len, "out of memory opening model '%s'", spec);
		return -ENOMEM;
	}
	if (memchr(spec, '/', name_len))
		snprintf(path, name_len + 3, "%.*s", (int)name_len, spec);
	else
		snprintf(path, name_len + 3, "./%.*s", (int)name_len, spec);
	*dl = model_load_plugin(path, api, err, err_len);
	free(path);
	return *dl ? 0 : -ENOENT;
}

/* How many bytes of a table of ABI version `version` (1 .. ours) exist. */
static size_t model_table_size(uint32_t version)
{
	switch (version) {
	case 1:
		return offsetof(struct dynbatch_model_api, max_context);
	case 2:
		return offsetof(struct dynbatch_model_api, logits);
	case 3:
		return offsetof(struct dynbatch_model_api, kv_bytes_per_token);
	case 4:
		return offsetof(struct dynbatch_model_api, max_outputs);
	default:
		return sizeof(struct dynbatch_model_api);
	}
}

/*
 * Copy the table at a into m->table, only as much of it as its version
 * has, and check that the callbacks its kind of model needs are there.
 * name[0..name_len) names the model in messages.  Returns 0, or -EINVAL
 * after writing err.
 */
static int model_take_table(struct model *m, const struct dynbatch_model_api *a,
			    const char *name, int name_len, char *err,
			    size_t err_len)
{
	const char *missing = NULL;

	if (a->abi_version < 1 || a->abi_version > DYNBATCH_MODEL_ABI_VERSION) {
		snprintf(err, err_len,
			 "model '%.*s' has ABI version %u, this dynbatch reads versions 1 to %u (rebuild it against this model.h)",
			 name_len, name, (unsigned)a->abi_version,
			 (unsigned)DYNBATCH_MODEL_ABI_VERSION);
		return -EINVAL;
	}
	memset(&m->table, 0, sizeof(m->table));
	memcpy(&m->table, a, model_table_size(a->abi_version));
	m->api = &m->table;
	if ((m->table.step || m->table.step_paged) && m->table.logits) {
		snprintf(err, err_len,
			 "model '%.*s' sets both %s and logits() in its API table (logits() is for token models only: a stateful model's %s writes logits itself)",
			 name_len, name, m->table.step ? "step()" : "step_paged()",
			 m->table.step ? "step()" : "step_paged()");
		return -EINVAL;
	}
	if (!a->create)
		missing = "create";
	else if (!a->vocab)
		missing = "vocab";
	else if (m->table.step && !m->table.bind)
		missing = "bind";
	else if (m->table.step && !m->table.release)
		missing = "release";
	else if (m->table.step_paged && !m->table.kv_bytes_per_token)
		missing = "kv_bytes_per_token";
	else if (m->table.step_paged && !m->table.bind_paged)
		missing = "bind_paged";
	else if (!m->table.step && !m->table.step_paged && !a->next)
		missing = "next";
	if (missing) {
		snprintf(err, err_len,
			 "model '%.*s' leaves %s() NULL in its API table%s",
			 name_len, name, missing,
			 !strcmp(missing, "next") ? " (and has no step())" :
			 !strcmp(missing, "kv_bytes_per_token") ||
				 !strcmp(missing, "bind_paged") ?
				 " (a paged model, one with step_paged(), needs it)" : "");
		return -EINVAL;
	}
	return 0;
}

/*
 * A built-in model read from a file (llama): its args start with the
 * file's path, up to the first comma.  Workers open the path again, each
 * at its own start, so the coordinator pins the file it opened (device,
 * inode, size, modification time) and a worker refuses another file:
 * a checkpoint replaced under a running engine must not mix two models.
 */
static bool model_is_file_backed(const struct dynbatch_model_api *api)
{
	/* api may be our copy of the table (struct model.table) */
	return api->create == llama_model_api()->create;
}

/* The identity of the file whose path is path[0..len), into out. */
static int model_file_pin(const char *path, size_t len, char *out, size_t out_len)
{
	char p[PATH_MAX];
	struct stat st;

	if (len >= sizeof(p))
		return -ENAMETOOLONG;
	memcpy(p, path, len);
	p[len] = '\0';
	if (stat(p, &st))
		return -errno;
	snprintf(out, out_len, "%llx:%llx:%llx:%llx.%lx",
		 (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
		 (unsigned long long)st.st_size,
		 (unsigned long long)st.st_mtim.tv_sec,
		 (unsigned long)st.st_mtim.tv_nsec);
	return 0;
}

/*
 * args of a file-backed model may end in MODEL_PIN_KEY and a pin: check
 * the file against it and cut it off (*cut: the args without it, to
 * free).  0, or -ESTALE after writing err.
 */
static int model_check_pin(const char *args, char **cut, char *err, size_t err_len)
{
	const char *at = NULL, *p;
	size_t path_len = strcspn(args, ",");
	char now[MODEL_PIN_MAX];

	*cut = NULL;
	for (p = strstr(args, MODEL_PIN_KEY); p; p = strstr(p + 1, MODEL_PIN_KEY))
		at = p;
	if (!at)
		return 0;
	if (model_file_pin(args, path_len, now, sizeof(now)) ||
	    strcmp(now, at + strlen(MODEL_PIN_KEY))) {
		snprintf(err, err_len, "the checkpoint '%.*s' is not the file the "
			 "engine started with (replaced or changed since): not "
			 "serving another model", (int)path_len, args);
		return -ESTALE;
	}
	*cut = strndup(args, (size_t)(at - args));
	return *cut ? 0 : -ENOMEM;
}

char *model_worker_spec(const struct model *m, const char *spec)
{
	size_t n = strlen(spec) + strlen(MODEL_PIN_KEY) + strlen(m->pin) + 1;
	char *out = malloc(n);

	if (out)
		snprintf(out, n, "%s%s%s", spec, m->pin[0] ? MODEL_PIN_KEY : "", m->pin);
	return out;
}

bool model_spec_names_plugin(const char *spec)
{
	return spec && model_spec_is_path(spec, strcspn(spec, ":"));
}

/*
 * Create the model of m's table (taken) with args, and read its
 * vocabulary and context limit.  name[0..name_len) names it in messages.
 * 0, or -EINVAL after writing err (nothing created).
 */
static int model_create(struct model *m, const char *name, int name_len,
			const char *args, char *err, size_t err_len)
{
	char why[256] = "";

	m->handle = m->api->create(args, why, sizeof(why));
	if (!m->handle) {
		/* the built-in models prefix their reasons with their name */
		if (m->dl)
			snprintf(err, err_len, "model plugin '%.*s': %s",
				 name_len, name, why[0] ? why : "create() failed");
		else if (why[0])
			snprintf(err, err_len, "%s", why);
		else
			snprintf(err, err_len, "model '%.*s': create() failed",
				 name_len, name);
		return -EINVAL;
	}
	m->vocab = m->api->vocab(m->handle);
	/* Tokens are int32_t: a vocabulary past 2^31 could not be stored. */
	if (m->vocab == 0 || m->vocab > (uint32_t)INT32_MAX + 1) {
		snprintf(err, err_len,
			 "model '%.*s' reports a vocabulary of %u tokens (must be "
			 "1 .. 2^31)", name_len, name, m->vocab);
		if (m->api->destroy)
			m->api->destroy(m->handle);
		return -EINVAL;
	}
	if (m->api->max_context)
		m->max_context = m->api->max_context(m->handle);
	m->max_outputs = 1;
	if ((m->api->step || m->api->step_paged) && m->api->max_outputs) {
		uint32_t w = m->api->max_outputs(m->handle);

		/* more than the engine ever asks is as good as its most */
		m->max_outputs = w < 1 ? 1 : w > MODEL_MAX_OUTPUTS ? MODEL_MAX_OUTPUTS : w;
	}
	if (m->api->step_paged) {
		/* the engine sizes the pool and its blocks from it */
		m->kv_bytes_per_token = m->api->kv_bytes_per_token(m->handle);
		if (m->kv_bytes_per_token == 0) {
			snprintf(err, err_len,
				 "model '%.*s' sets step_paged() but its kv_bytes_per_token() gives 0 (a paged model must say how many bytes of KV a position takes)",
				 name_len, name);
			if (m->api->destroy)
				m->api->destroy(m->handle);
			return -EINVAL;
		}
	}
	return 0;
}

/* err, or a one-byte buffer when the caller gave none: every failure
 * writes its reason unconditionally. */
static void model_err_buf(char **err, size_t *err_len, char *dummy)
{
	if (!*err || !*err_len) {
		*err = dummy;
		*err_len = 1;
	}
	(*err)[0] = '\0';
}

struct model *model_open(const char *spec, char *err, size_t err_len)
{
	char dummy[1], *unpinned = NULL;
	const char *args;
	struct model *m;
	int name_len, ret;

	model_err_buf(&err, &err_len, dummy);
	if (!spec || !*spec) {
		snprintf(err, err_len, "empty model spec " MODEL_SPEC_HELP);
		return NULL;
	}
	name_len = (int)strcspn(spec, ":");
	m = calloc(1, sizeof(*m));
	if (!m) {
		snprintf(err, err_len, "out of memory opening model '%s'", spec);
		return NULL;
	}
	if (model_resolve(spec, &m->api, &args, &m->dl, err, err_len))
		goto out_free;
	if (model_take_table(m, m->api, spec, name_len, err, err_len))
		goto out_dlclose;
	if (model_is_file_backed(m->api)) {
		if (model_check_pin(args, &unpinned, err, err_len))
			goto out_dlclose;
		if (unpinned)
			args = unpinned;
	}
	ret = model_create(m, spec, name_len, args, err, err_len);
	if (!ret && model_is_file_backed(m->api))
		model_file_pin(args, strcspn(args, ","), m->pin, sizeof(m->pin));
	free(unpinned);
	if (ret)
		goto out_dlclose;
	return m;

out_dlclose:
	if (m->dl)
		dlclose(m->dl);
out_free:
	free(m);
	return NULL;
}

struct model *model_open_table(const struct dynbatch_model_api *api,
			       const char *args, char *err, size_t err_len)
{
	char dummy[1];
	const char *name;
	struct model *m;

	model_err_buf(&err, &err_len, dummy);
	if (!api) {
		snprintf(err, err_len, "no model API table");
		return NULL;
	}
	name = api->name ? api->name : "(unnamed)";
	m = calloc(1, sizeof(*m));
	if (!m) {
		snprintf(err, err_len, "out of memory opening model '%s'", name);
		return NULL;
	}
	if (model_take_table(m, api, name, (int)strlen(name), err, err_len) ||
	    model_create(m, name, (int)strlen(name), args ? args : "", err,
			 err_len)) {
		free(m);
		return NULL;
	}
	return m;
}

uint32_t model_vocab(const struct model *m)
{
	return m->vocab;
}

int model_next(struct model *m, uint32_t n_rows, const int32_t *const *prefixes,
	       const uint32_t *lengths, int32_t *next_tokens)
{
	int ret;

	ret = m->api->next(m->handle, n_rows, prefixes, lengths, next_tokens);
	if (ret)
		return ret < 0 ? ret : -EIO;
	for (uint32_t i = 0; i < n_rows; i++)
		if (next_tokens[i] < 0 || (uint32_t)next_tokens[i] >= m->vocab)
			return -ERANGE;
	return 0;
}

bool model_has_logits(const struct model *m)
{
	return m->api->step != NULL || m->api->step_paged != NULL ||
	       m->api->logits != NULL;
}

int model_logits(struct model *m, uint32_t n_rows, const int32_t *const *prefixes,
		 const uint32_t *lengths, float *logits)
{
	int ret = m->api->logits(m->handle, n_rows, prefixes, lengths, logits);

	return ret ? (ret < 0 ? ret : -EIO) : 0;
}

bool model_is_stateful(const struct model *m)
{
	return m->api->step != NULL || m->api->step_paged != NULL;
}

bool model_is_paged(const struct model *m)
{
	return m->api->step_paged != NULL;
}

uint64_t model_kv_bytes_per_token(const struct model *m)
{
	return m->kv_bytes_per_token;
}

uint32_t model_max_outputs(const struct model *m)
{
	return m->max_outputs;
}

uint32_t model_max_context(const struct model *m)
{
	return m->max_context;
}

int model_bind(struct model *m, uint32_t n_slots, uint32_t max_context,
	       char *err, size_t err_len)
{
	int ret;

	/* a paged-only model (step_paged without step) has no bind() */
	if (!m->api->bind) {
		snprintf(err, err_len, "model '%s' runs only paged (no bind())",
			 m->api->name ? m->api->name : "(unnamed)");
		return -ENOTSUP;
	}
	snprintf(err, err_len, "bind() failed");
	ret = m->api->bind(m->handle, n_slots, max_context, err, err_len);
	return ret ? (ret < 0 ? ret : -EIO) : 0;
}

int model_step(struct model *m, uint32_t n_rows,
	       const struct dynbatch_model_row *rows, float *logits,
	       uint32_t *refusals)
{
	int ret;

	if (!m->api->step)
		return -ENOTSUP;	/* paged only: model_step_paged() */
	ret = m->api->step(m->handle, n_rows, rows, logits, refusals);
	return ret ? (ret < 0 ? ret : -EIO) : 0;
}

void model_release(struct model *m, uint32_t slot)
{
	if (m->api->release)	/* NULL in a paged-only table */
		m->api->release(m->handle, slot);
}

int model_bind_paged(struct model *m, void *pool, uint32_t n_blocks,
		     uint32_t block_tokens, uint32_t max_context,
		     uint32_t max_rows, char *err, size_t err_len)
{
	int ret;

	if (!m->api->step_paged) {
		snprintf(err, err_len, "model '%s' is not paged (no step_paged())",
			 m->api->name ? m->api->name : "(unnamed)");
		return -ENOTSUP;
	}
	snprintf(err, err_len, "bind_paged() failed");
	ret = m->api->bind_paged(m->handle, pool, n_blocks, block_tokens,
				 max_context, max_rows, err, err_len);
	return ret ? (ret < 0 ? ret : -EIO) : 0;
}

int model_step_paged(struct model *m, uint32_t n_rows,
		     const struct dynbatch_paged_row *rows, float *logits,
		     uint32_t *refusals)
{
	int ret;

	if (!m->api->step_paged)
		return -ENOTSUP;
	ret = m->api->step_paged(m->handle, n_rows, rows, logits, refusals);
	return ret ? (ret < 0 ? ret : -EIO) : 0;
}

void model_close(struct model *m)
{
	if (!m)
		return;
	if (m->api->destroy)
		m->api->destroy(m->handle);
	if (m->dl)
		dlclose(m->dl);
	free(m);
}
