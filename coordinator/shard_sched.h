/*
 * shard_sched.h - the shard scheduler: slots, dispatch, commit.
 */
#ifndef DYNBATCH_SHARD_SCHED_H
#define DYNBATCH_SHARD_SCHED_H

#include <stdbool.h>
#include <stdint.h>

struct engine;
struct shard;

void shard_drop_slot(struct engine *e, uint32_t slot);
void shard_clear_suspect(struct shard *s, uint32_t slot);
void shard_advance(struct engine *e, struct shard *s);
void shard_kill(struct shard *s);
void shard_kill_misbehaving(struct shard *s, const char *why);
bool shard_poll(struct engine *e, struct shard *s);
bool shard_step_in_process(struct engine *e, struct shard *s);

#endif
