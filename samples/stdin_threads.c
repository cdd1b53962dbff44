// A thread that waits for stdin does not hold up another thread's WASI calls, as under
// wasi-threads, where the threads share one WASI context.
//
// The first thread spawns a thread and reads stdin; the spawned thread sleeps 200 ms (so
// that the read is waiting by then), writes a line to stdout and ends. Whoever feeds stdin
// can wait for that line before writing: the program ends once both are done. Before it
// reads, the first thread polls two clocks (1 ms and 10 s: a poll that is not a plain
// sleep) and says the poll's errno and which clock it heard, then polls stdin with a 10 s
// timeout (what `poll` on stdin makes) and says what it heard: stdin readable, which it
// is only once the spawned thread's line was written.
// stdout, with `hello` on stdin:
//   thread: ready
//   poll: 0, clock 1
//   stdin poll: 0, readable
//   first thread read: hello
//
// Built as samples/threads.c is: no threaded libc; the spawned thread calls WASI directly.
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <wasi/api.h>

#define STACK 65536

__attribute__((import_module("wasi"), import_name("thread-spawn")))
int32_t thread_spawn(void *start_arg);

struct start {
    uint32_t stack_top; // read first by wasi_thread_start
};

static _Alignas(16) char stack[STACK];
static struct start start;
static uint32_t done;

__attribute__((noinline)) void thread_main(int32_t tid, struct start *arg) {
    (void)tid;
    (void)arg;
    __wasi_subscription_t sub = {0};
    sub.u.tag = __WASI_EVENTTYPE_CLOCK;
    sub.u.u.clock.id = __WASI_CLOCKID_MONOTONIC;
    sub.u.u.clock.timeout = 200ull * 1000 * 1000;
    __wasi_event_t event;
    __wasi_size_t events;
    (void)__wasi_poll_oneoff(&sub, &event, 1, &events);
    const char line[] = "thread: ready\n";
    __wasi_ciovec_t iov = {(const uint8_t *)line, sizeof line - 1};
    __wasi_size_t written;
    (void)__wasi_fd_write(1, &iov, 1, &written);
    __atomic_store_n(&done, 1, __ATOMIC_SEQ_CST);
    __builtin_wasm_memory_atomic_notify((int32_t *)&done, 1);
}

// wasi_thread_start(tid, arg): switch to the thread's stack, then thread_main(tid, arg).
#include "wasi_thread_start.h"

int main(void) {
    start.stack_top = (uint32_t)(uintptr_t)(stack + STACK);
    if (thread_spawn(&start) < 0) return 1;
    __wasi_subscription_t subs[2] = {{0}, {0}};
    for (int i = 0; i < 2; i++) {
        subs[i].userdata = (uint64_t)(i + 1);
        subs[i].u.tag = __WASI_EVENTTYPE_CLOCK;
        subs[i].u.u.clock.id = __WASI_CLOCKID_MONOTONIC;
    }
    subs[0].u.u.clock.timeout = 1000ull * 1000;
    subs[1].u.u.clock.timeout = 10ull * 1000 * 1000 * 1000;
    __wasi_event_t events[2];
    __wasi_size_t heard = 0;
    __wasi_errno_t polled = __wasi_poll_oneoff(subs, events, 2, &heard);
    printf("poll: %d, clock %d\n", polled, heard == 1 ? (int)events[0].userdata : -1);
    fflush(stdout);
    __wasi_subscription_t wait[2] = {{0}, {0}};
    wait[0].userdata = 1;
    wait[0].u.tag = __WASI_EVENTTYPE_FD_READ;
    wait[0].u.u.fd_read.file_descriptor = 0;
    wait[1].userdata = 2;
    wait[1].u.tag = __WASI_EVENTTYPE_CLOCK;
    wait[1].u.u.clock.id = __WASI_CLOCKID_MONOTONIC;
    wait[1].u.u.clock.timeout = 10ull * 1000 * 1000 * 1000;
    heard = 0;
    polled = __wasi_poll_oneoff(wait, events, 2, &heard);
    printf("stdin poll: %d, %s\n", polled,
           heard == 1 && events[0].userdata == 1 ? "readable"
           : heard == 1                          ? "timed out"
                                                 : "other");
    char text[256];
    ssize_t n = read(0, text, sizeof text - 1);
    text[n < 0 ? 0 : n] = 0;
    if (n > 0 && text[n - 1] == '\n') text[n - 1] = 0;
    while (!__atomic_load_n(&done, __ATOMIC_SEQ_CST))
        __builtin_wasm_memory_atomic_wait32((int32_t *)&done, 0, -1);
    printf("first thread read: %s\n", text);
    return 0;
}
