/*
 * wait_policy.h - how the coordinator waits: spin, doze or sleep.
 */
#ifndef DYNBATCH_WAIT_POLICY_H
#define DYNBATCH_WAIT_POLICY_H

#include <stdint.h>

struct engine;

void engine_wait(struct engine *e, uint64_t deadline_ns);

#endif
