/*
 * simkv_model.h - "simkv": the sim model's tokens from a stateful model
 * (model.h ABI version 2, or paged: version 4), for tests of the engine's
 * stateful and paged paths.  Keys:
 * the sim's (sim_model.h) and context=N.  See simkv_model.c.
 */
#ifndef DYNBATCH_SIMKV_MODEL_H
#define DYNBATCH_SIMKV_MODEL_H

#include "dynbatch/model.h"

const struct dynbatch_model_api *simkv_model_api(void);
/* "simkv2": the same, as an ABI version 2 table (not paged). */
const struct dynbatch_model_api *simkv_v2_model_api(void);

#endif /* DYNBATCH_SIMKV_MODEL_H */
