/*
 * fault_sim.h - make a named system call fail on purpose, for tests.
 *
 * Like SQLite's sqlite3FaultSim(): each risky call site asks
 * fault_sim("name") first and fails with EIO-like behaviour when the
 * environment variable DYNBATCH_FAULT lists that name (comma-separated).
 * Names in use: memfd, mmap, spawn, io_uring_queue_init.  Costs one
 * getenv() per call site, all of which are off the hot path.
 */
#ifndef DYNBATCH_FAULT_SIM_H
#define DYNBATCH_FAULT_SIM_H

#include <stdbool.h>

/* True when DYNBATCH_FAULT names point. */
bool fault_sim(const char *point);

#endif /* DYNBATCH_FAULT_SIM_H */
