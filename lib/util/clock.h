/*
 * clock.h - monotonic time in nanoseconds and a CPU pause for spin loops.
 */
#ifndef DYNBATCH_CLOCK_H
#define DYNBATCH_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t clock_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Tell the CPU we are spinning (frees the sibling hyperthread). */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

#endif /* DYNBATCH_CLOCK_H */
