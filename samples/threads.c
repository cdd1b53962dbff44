// A threaded program (wasi-threads): the first thread spawns three threads through
// `wasi::thread-spawn`, each of which computes work(n) for its own n, then waits for
// them on an atomic counter and prints the sum with its own work(500).
//
// Calls by construction: work is called once per thread (4 times), leaf
// 500 + 1000 + 2000 + 3000 = 6500 times (thread k, k = 1..3, calls it 1000 k times);
// thread_main and wasi_thread_start run once on each spawned thread.
// stdout: "total 21371750".
//
// `threads trap` makes the second spawned thread trap, and `threads exit` makes it call
// proc_exit(7): either ends the whole program, as wasi-threads says. `threads block` spawns
// a fourth thread that waits forever, still blocked when the program ends.
//
// Built without a threaded libc: the memory is shared and imported (and exported, for
// WASI), and `wasi_thread_start` (below, in assembly) gives each thread its own stack
// before calling C. The spawned threads use no libc.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 3
#define STACK 65536

__attribute__((import_module("wasi"), import_name("thread-spawn")))
int32_t thread_spawn(void *start_arg);

struct start {
    uint32_t stack_top; // read first by wasi_thread_start
    uint32_t n;
    uint32_t index;
    uint32_t fail; // 0, 1: trap, 2: proc_exit(7), 3: wait forever
};

static _Alignas(16) char stacks[THREADS + 1][STACK];
static struct start starts[THREADS + 1];
static uint32_t never;
static uint32_t done;
static uint64_t sums[THREADS];

__attribute__((noinline)) uint64_t leaf(uint64_t x) { return x * 3 + 1; }

__attribute__((noinline)) uint64_t work(uint32_t n) {
    uint64_t s = 0;
    for (uint32_t i = 0; i < n; i++) s += leaf(i);
    return s;
}

__attribute__((noinline)) void thread_main(int32_t tid, struct start *arg) {
    (void)tid;
    if (arg->fail == 1) __builtin_trap();
    if (arg->fail == 2) _Exit(7);
    if (arg->fail == 3) {
        for (;;) __builtin_wasm_memory_atomic_wait32((int32_t *)&never, 0, -1);
    }
    sums[arg->index] = work(arg->n);
    __atomic_fetch_add(&done, 1, __ATOMIC_SEQ_CST);
    __builtin_wasm_memory_atomic_notify((int32_t *)&done, 1);
}

// wasi_thread_start(tid, arg): switch to the thread's stack, then thread_main(tid, arg).
#include "wasi_thread_start.h"

int main(int argc, char **argv) {
    uint32_t fail = 0;
    if (argc > 1 && strcmp(argv[1], "trap") == 0) fail = 1;
    if (argc > 1 && strcmp(argv[1], "exit") == 0) fail = 2;
    for (uint32_t i = 0; i < THREADS; i++) {
        starts[i].stack_top = (uint32_t)(uintptr_t)(stacks[i] + STACK);
        starts[i].n = 1000 * (i + 1);
        starts[i].index = i;
        starts[i].fail = i == 1 ? fail : 0;
        if (thread_spawn(&starts[i]) < 0) {
            printf("cannot spawn a thread\n");
            return 1;
        }
    }
    if (argc > 1 && strcmp(argv[1], "block") == 0) {
        starts[THREADS].stack_top = (uint32_t)(uintptr_t)(stacks[THREADS] + STACK);
        starts[THREADS].fail = 3;
        if (thread_spawn(&starts[THREADS]) < 0) return 1;
    }
    uint32_t seen;
    while ((seen = __atomic_load_n(&done, __ATOMIC_SEQ_CST)) < THREADS)
        __builtin_wasm_memory_atomic_wait32((int32_t *)&done, (int32_t)seen, -1);
    uint64_t total = work(500);
    for (int i = 0; i < THREADS; i++) total += sums[i];
    printf("total %llu\n", (unsigned long long)total);
    return 0;
}
