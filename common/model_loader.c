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
 * before it is trusted: the table must exist, carry our ABI version and
 * the three mandatory callbacks (destroy is optional), and the model must
 * report a vocabulary of at least one token.  After each step
 * model_next() checks every token against that vocabulary, so a buggy
 * plugin fails the step instead of feeding out-of-range tokens onward.
 *
 * A plugin path without a '/' ("my.so") is opened as "./my.so": the user
 * named a file, and dlopen() would otherwise search the library path for
 * it instead.  Plugins are opened RTLD_NOW (a missing symbol fails here,
 * not mid-run in a worker) and RTLD_LOCAL (two plugins cannot collide).
 */
#include "model_loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "llama_model.h"
#include "sim_model.h"
#include "simkv_model.h"

/* What the coordinator appends to a file-backed model's spec for its
 * workers: the identity of the file it opened (model_worker_spec()). */
#define MODEL_PIN_KEY ",pin="
#define MODEL_PIN_MAX 96

#define MODEL_SPEC_HELP \
	"(expected sim, sim:key=value,..., simkv:key=value,..., " \
	"llama:CHECKPOINT[,key=value] or path/to/plugin.so[:args])"

struct model {
	/* Our copy of the plugin's table: a version 1 table ends at destroy,
	 * so only that much is read from it, and the rest stays NULL. */
	struct dynbatch_model_api table;
	const struct dynbatch_model_api *api;	/* &table */
	void *handle;		/* what api->create() returned */
	void *dl;		/* dlopen() handle; NULL for the sim model */
	uint32_t vocab;		/* api->vocab(handle), read once at open */
	uint32_t max_context;	/* api->max_context(handle) or 0, read once */
	char pin[MODEL_PIN_MAX];	/* a file-backed model's file identity */
};

/* Does name[0..len) name a plugin file rather than a built-in model? */
static bool model_spec_is_path(const char *name, size_t len)
{
	return memchr(name, '/', len) != NULL ||
	       (len >= 3 && memcmp(name + len - 3, ".so", 3) == 0);
}

/*
 * dlopen() the plugin at path and return its checked API table in *api.
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
	if (a->abi_version < 1 || a->abi_version > DYNBATCH_MODEL_ABI_VERSION) {
		snprintf(err, err_len,
			 "model plugin '%s' has ABI version %u, this dynbatch reads versions 1 to %u (rebuild it against this model.h)",
			 path, (unsigned)a->abi_version,
			 (unsigned)DYNBATCH_MODEL_ABI_VERSION);
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
	if (name_len == 5 && memcmp(spec, "llama", 5) == 0) {
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

/*
 * Copy the table at a into m->table, only as much of it as its version
 * has, and check that the callbacks its kind of model needs are there.
 * Returns 0, or -EINVAL after writing err.
 */
static int model_take_table(struct model *m, const struct dynbatch_model_api *a,
			    const char *spec, char *err, size_t err_len)
{
	const char *missing = NULL;

	memset(&m->table, 0, sizeof(m->table));
	memcpy(&m->table, a, a->abi_version >= 2 ? sizeof(*a) :
	       offsetof(struct dynbatch_model_api, max_context));
	m->api = &m->table;
	if (!a->create)
		missing = "create";
	else if (!a->vocab)
		missing = "vocab";
	else if (m->table.step && !m->table.bind)
		missing = "bind";
	else if (m->table.step && !m->table.release)
		missing = "release";
	else if (!m->table.step && !a->next)
		missing = "next";
	if (missing) {
		snprintf(err, err_len,
			 "model '%.*s' leaves %s() NULL in its API table%s",
			 (int)strcspn(spec, ":"), spec, missing,
			 !strcmp(missing, "next") ? " (and has no step())" : "");
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

struct model *model_open(const char *spec, char *err, size_t err_len)
{
	char why[256] = "";
	char dummy[1], *unpinned = NULL;
	const char *args;
	struct model *m;

	/* every failure below writes err unconditionally */
	if (!err || !err_len) {
		err = dummy;
		err_len = sizeof(dummy);
	}
	err[0] = '\0';
	if (!spec || !*spec) {
		snprintf(err, err_len, "empty model spec " MODEL_SPEC_HELP);
		return NULL;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		snprintf(err, err_len, "out of memory opening model '%s'", spec);
		return NULL;
	}
	if (model_resolve(spec, &m->api, &args, &m->dl, err, err_len))
		goto out_free;
	if (model_take_table(m, m->api, spec, err, err_len))
		goto out_dlclose;
	if (model_is_file_backed(m->api)) {
		if (model_check_pin(args, &unpinned, err, err_len))
			goto out_dlclose;
		if (unpinned)
			args = unpinned;
	}

	m->handle = m->api->create(args, why, sizeof(why));
	if (m->handle && model_is_file_backed(m->api))
		model_file_pin(args, strcspn(args, ","), m->pin, sizeof(m->pin));
	free(unpinned);
	if (!m->handle) {
		/* the sim model prefixes its reasons with "sim: " itself */
		if (m->dl)
			snprintf(err, err_len, "model plugin '%.*s': %s",
				 (int)strcspn(spec, ":"), spec,
				 why[0] ? why : "create() failed");
		else
			snprintf(err, err_len, "%s",
				 why[0] ? why : "sim: create() failed");
		goto out_dlclose;
	}
	m->vocab = m->api->vocab(m->handle);
	/* Tokens are int32_t: a vocabulary past 2^31 could not be stored. */
	if (m->vocab == 0 || m->vocab > (uint32_t)INT32_MAX + 1) {
		snprintf(err, err_len,
			 "model '%.*s' reports a vocabulary of %u tokens (must be "
			 "1 .. 2^31)", (int)strcspn(spec, ":"), spec, m->vocab);
		goto out_destroy;
	}
	if (m->api->max_context)
		m->max_context = m->api->max_context(m->handle);
	return m;

out_destroy:
	if (m->api->destroy)
		m->api->destroy(m->handle);
out_dlclose:
	if (m->dl)
		dlclose(m->dl);
out_free:
	free(m);
	return NULL;
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

bool model_is_stateful(const struct model *m)
{
	return m->api->step != NULL;
}

uint32_t model_max_context(const struct model *m)
{
	return m->max_context;
}

int model_bind(struct model *m, uint32_t n_slots, uint32_t max_context,
	       char *err, size_t err_len)
{
	int ret;

	snprintf(err, err_len, "bind() failed");
	ret = m->api->bind(m->handle, n_slots, max_context, err, err_len);
	return ret ? (ret < 0 ? ret : -EIO) : 0;
}

int model_step(struct model *m, uint32_t n_rows,
	       const struct dynbatch_model_row *rows, float *logits,
	       uint32_t *refusals)
{
	int ret = m->api->step(m->handle, n_rows, rows, logits, refusals);

	return ret ? (ret < 0 ? ret : -EIO) : 0;
}

void model_release(struct model *m, uint32_t slot)
{
	m->api->release(m->handle, slot);
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
