/* The kernels' thread pool: pool_run(fn, job) calls fn(job, part, parts) for every part in
   0..parts-1, part 0 on the calling thread and the others on the pool's workers, and returns
   when all have finished. One call runs at a time (callers from several threads take turns). */
#pragma once

typedef void (*pool_fn)(void *job, int part, int parts);

void pool_run(pool_fn fn, void *job);

/* A thread's scratch buffer of at least `bytes` in one of its slots, kept and grown as needed
   (NULL without memory). Each use has its own slot, so a caller's buffer held across pool_run
   (the activations' sums, say) is never the one its part 0 uses inside the job. */
enum { SCRATCH_PANEL, SCRATCH_BF16_PANEL, SCRATCH_SUMS, SCRATCH_ROUNDED, SCRATCH_ATTENTION, SCRATCH_PACKED,
       SCRATCH_INT8, SCRATCH_SLOTS };
void *pool_scratch(int slot, long long bytes);
