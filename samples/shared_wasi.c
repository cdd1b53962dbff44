// Threads that share one WASI context, as wasi-threads prescribes: a descriptor one thread
// opens is valid in every other, and a thread asleep does not hold up the others' calls.
//
// Run with a preopened directory as its argument (`--dir D -- D`):
// 1. the first thread opens D/shared.txt and a spawned thread writes a line to it;
// 2. a spawned thread opens D/opened.txt itself, writes a line, and hands the descriptor
//    back: the first thread writes a second line to it;
// 3. a spawned thread sleeps 30 s in one `poll_oneoff` while the first thread sleeps
//    50 ms, reads both files back and ends the program (the sleeper still asleep); it
//    says whether its own calls waited for the sleeper.
// stdout:
//   thread write: 0
//   thread open: 0
//   shared.txt: written by a thread
//   opened.txt: opened by a thread|and written by the first
//   not held up
//
// Built as samples/threads.c is: no threaded libc; the spawned threads call WASI directly.
#include <fcntl.h>
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
    uint32_t job;       // 0: write to fd, 1: open in dir, 2: sleep
    int32_t fd;         // job 0: where to write; job 1: the directory
    int32_t result;     // the WASI errno, or job 1's descriptor
    int32_t errno_;
};

static _Alignas(16) char stacks[3][STACK];
static struct start starts[3];
static uint32_t done;
static uint32_t sleeping;

static __wasi_errno_t write_all(__wasi_fd_t fd, const char *text) {
    __wasi_ciovec_t iov = {(const uint8_t *)text, strlen(text)};
    __wasi_size_t written;
    return __wasi_fd_write(fd, &iov, 1, &written);
}

__attribute__((noinline)) void thread_main(int32_t tid, struct start *arg) {
    (void)tid;
    if (arg->job == 0) {
        arg->errno_ = write_all(arg->fd, "written by a thread\n");
    } else if (arg->job == 1) {
        __wasi_fd_t fd = (__wasi_fd_t)-1;
        const char *name = "opened.txt";
        __wasi_rights_t rights = __WASI_RIGHTS_FD_WRITE | __WASI_RIGHTS_FD_READ | __WASI_RIGHTS_FD_SEEK;
        arg->errno_ = __wasi_path_open(arg->fd, 0, name, __WASI_OFLAGS_CREAT | __WASI_OFLAGS_TRUNC,
                                       rights, rights, 0, &fd);
        if (arg->errno_ == 0) arg->errno_ = write_all(fd, "opened by a thread|");
        arg->result = (int32_t)fd;
    } else {
        __wasi_subscription_t sub = {0};
        sub.u.tag = __WASI_EVENTTYPE_CLOCK;
        sub.u.u.clock.id = __WASI_CLOCKID_MONOTONIC;
        sub.u.u.clock.timeout = 30ull * 1000 * 1000 * 1000;
        __wasi_event_t event;
        __wasi_size_t events;
        __atomic_store_n(&sleeping, 1, __ATOMIC_SEQ_CST);
        (void)__wasi_poll_oneoff(&sub, &event, 1, &events);
        return;
    }
    __atomic_fetch_add(&done, 1, __ATOMIC_SEQ_CST);
    __builtin_wasm_memory_atomic_notify((int32_t *)&done, 1);
}

// wasi_thread_start(tid, arg): switch to the thread's stack, then thread_main(tid, arg).
#include "wasi_thread_start.h"

static int spawn(uint32_t i, uint32_t job, int32_t fd) {
    starts[i].stack_top = (uint32_t)(uintptr_t)(stacks[i] + STACK);
    starts[i].job = job;
    starts[i].fd = fd;
    return thread_spawn(&starts[i]);
}

static void print_file(const char *dir, const char *name) {
    char path[512], text[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDONLY);
    ssize_t n = fd < 0 ? -1 : read(fd, text, sizeof text - 1);
    text[n < 0 ? 0 : n] = 0;
    if (n > 0 && text[n - 1] == '\n') text[n - 1] = 0;
    printf("%s: %s\n", name, text);
    if (fd >= 0) close(fd);
}

static uint64_t now_ns(void) {
    __wasi_timestamp_t t = 0;
    __wasi_clock_time_get(__WASI_CLOCKID_MONOTONIC, 1, &t);
    return t;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: shared_wasi DIR\n");
        return 2;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/shared.txt", argv[1]);
    int shared = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
    int dir = open(argv[1], O_RDONLY | O_DIRECTORY);
    if (shared < 0 || dir < 0) {
        printf("cannot open %s\n", argv[1]);
        return 1;
    }
    if (spawn(0, 0, shared) < 0 || spawn(1, 1, dir) < 0) return 1;
    uint32_t seen;
    while ((seen = __atomic_load_n(&done, __ATOMIC_SEQ_CST)) < 2)
        __builtin_wasm_memory_atomic_wait32((int32_t *)&done, (int32_t)seen, -1);
    printf("thread write: %d\n", starts[0].errno_);
    printf("thread open: %d\n", starts[1].errno_);
    if (starts[1].errno_ == 0) {
        __wasi_fd_t opened = (__wasi_fd_t)starts[1].result;
        (void)write_all(opened, "and written by the first\n");
        (void)__wasi_fd_close(opened);
    }
    close(shared);
    uint64_t from = now_ns();
    if (spawn(2, 2, -1) < 0) return 1;
    while (!__atomic_load_n(&sleeping, __ATOMIC_SEQ_CST)) {
    }
    usleep(50 * 1000);
    print_file(argv[1], "shared.txt");
    print_file(argv[1], "opened.txt");
    uint64_t took = now_ns() - from;
    printf("%s\n", took < 10ull * 1000 * 1000 * 1000 ? "not held up" : "held up by the sleeper");
    fflush(stdout);
    return 0;
}
