// A thread whose write to stdout waits for the reader does not hold up another thread's
// WASI calls, as under wasi-threads, where the threads share one WASI context.
//
// The first thread spawns a thread that writes 1 MiB to stdout in one `fd_write`, more
// than a pipe holds: the write waits until the reader drains it. The first thread sleeps
// 200 ms (so that the write is waiting by then), says `first: ready` on stderr, waits for
// the spawned thread and says `first: done` on stderr. Whoever reads the program can wait
// for `first: ready` before it reads stdout: the program ends once it did.
// stdout: 1,048,576 bytes, `0123456789abcdef` over and over.
// stderr:
//   first: ready
//   first: done (wrote 1048576)
//
// Built as samples/threads.c is: no threaded libc; the spawned thread calls WASI directly.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <wasi/api.h>

#define STACK 65536
#define SIZE (1 << 20)

__attribute__((import_module("wasi"), import_name("thread-spawn")))
int32_t thread_spawn(void *start_arg);

struct start {
    uint32_t stack_top; // read first by wasi_thread_start
};

static _Alignas(16) char stack[STACK];
static struct start start;
static char *text; // on the heap: a static megabyte would be a data segment of the module
static uint32_t written;
static uint32_t done;

__attribute__((noinline)) void thread_main(int32_t tid, struct start *arg) {
    (void)tid;
    (void)arg;
    __wasi_ciovec_t iov = {(const uint8_t *)text, SIZE};
    __wasi_size_t n = 0;
    if (__wasi_fd_write(1, &iov, 1, &n) == 0) written = n;
    __atomic_store_n(&done, 1, __ATOMIC_SEQ_CST);
    __builtin_wasm_memory_atomic_notify((int32_t *)&done, 1);
}

// wasi_thread_start(tid, arg): switch to the thread's stack, then thread_main(tid, arg).
#include "wasi_thread_start.h"

static void say(const char *line, __wasi_size_t len) {
    __wasi_ciovec_t iov = {(const uint8_t *)line, len};
    __wasi_size_t n;
    (void)__wasi_fd_write(2, &iov, 1, &n);
}

int main(void) {
    text = malloc(SIZE);
    if (!text) return 1;
    for (int i = 0; i < SIZE; i++) text[i] = "0123456789abcdef"[i % 16];
    start.stack_top = (uint32_t)(uintptr_t)(stack + STACK);
    if (thread_spawn(&start) < 0) return 1;
    __wasi_subscription_t sub = {0};
    sub.u.tag = __WASI_EVENTTYPE_CLOCK;
    sub.u.u.clock.id = __WASI_CLOCKID_MONOTONIC;
    sub.u.u.clock.timeout = 200ull * 1000 * 1000;
    __wasi_event_t event;
    __wasi_size_t events;
    (void)__wasi_poll_oneoff(&sub, &event, 1, &events);
    const char ready[] = "first: ready\n";
    say(ready, sizeof ready - 1);
    while (!__atomic_load_n(&done, __ATOMIC_SEQ_CST))
        __builtin_wasm_memory_atomic_wait32((int32_t *)&done, 0, -1);
    char line[64];
    int len = snprintf(line, sizeof line, "first: done (wrote %u)\n", (unsigned)written);
    say(line, (__wasi_size_t)len);
    return 0;
}
