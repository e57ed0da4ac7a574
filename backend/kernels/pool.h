/* The kernels' thread pool: pool_run(fn, job) calls fn(job, part, parts) for every part in
   0..parts-1, part 0 on the calling thread and the others on the pool's workers, and returns
   when all have finished. One call runs at a time (callers from several threads take turns). */
#pragma once

typedef void (*pool_fn)(void *job, int part, int parts);

void pool_run(pool_fn fn, void *job);
