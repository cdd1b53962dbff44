// What one sampling interrupt costs a thread on this machine: a fixed loop of arithmetic,
// timed bare and while the thread is sampled every PERIOD microseconds in one of four ways:
//
//   none      no sampling
//   periodic  the thread's own POSIX timer (timer_create, SIGEV_THREAD_ID, CLOCK_MONOTONIC)
//             with an interval, SIGPROF to an empty handler
//   rearm     the same timer one-shot, re-armed by the handler (timer_settime), as wprof's
//             sampler does to vary the period
//   perf      perf_event_open on the thread's task clock, the instruction pointer written
//             into a ring buffer by the kernel: no signal
//   perfcc    the same with the user call chain (frame pointers walked by the kernel)
//
// Prints: mode, period, seconds of the loop, interrupts taken. run.sh computes the cost per
// interrupt from several interleaved runs.
#define _GNU_SOURCE
#include <linux/perf_event.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t interrupts;
static timer_t timer;
static long period_ns;
static int rearm_in_handler;

static void on_tick(int sig, siginfo_t *info, void *context) {
    (void)sig;
    (void)info;
    (void)context;
    interrupts++;
    if (rearm_in_handler) {
        struct itimerspec next = {.it_value = {.tv_nsec = period_ns}};
        timer_settime(timer, 0, &next, NULL);
    }
}

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t fixed_work(uint64_t rounds) {
    uint64_t x = 1;
    for (uint64_t i = 0; i < rounds; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        x ^= x >> 17;
    }
    return x;
}

static int start_timer(int rearm) {
    rearm_in_handler = rearm;
    struct sigaction action = {0};
    action.sa_sigaction = on_tick;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    if (sigaction(SIGPROF, &action, NULL) != 0) return -1;
    struct sigevent event = {0};
    event.sigev_notify = SIGEV_THREAD_ID;
    event.sigev_signo = SIGPROF;
    event._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    if (timer_create(CLOCK_MONOTONIC, &event, &timer) != 0) return -1;
    struct itimerspec first = {.it_value = {.tv_nsec = period_ns}};
    if (!rearm) first.it_interval.tv_nsec = period_ns;
    return timer_settime(timer, 0, &first, NULL);
}

static struct perf_event_mmap_page *start_perf(int callchain) {
    struct perf_event_attr attr = {0};
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_TASK_CLOCK;
    attr.sample_period = (uint64_t)period_ns;
    attr.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TIME | (callchain ? PERF_SAMPLE_CALLCHAIN : 0);
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    int fd = (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
    if (fd < 0) return NULL;
    void *ring = mmap(NULL, 4096 * 65, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return ring == MAP_FAILED ? NULL : ring;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s none|periodic|rearm|perf|perfcc PERIOD_US\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    period_ns = atol(argv[2]) * 1000;
    struct perf_event_mmap_page *ring = NULL;
    if (!strcmp(mode, "periodic") || !strcmp(mode, "rearm")) {
        if (start_timer(!strcmp(mode, "rearm")) != 0) { perror("timer"); return 1; }
    } else if (!strcmp(mode, "perf") || !strcmp(mode, "perfcc")) {
        ring = start_perf(!strcmp(mode, "perfcc"));
        if (!ring) { perror("perf_event_open"); return 1; }
    } else if (strcmp(mode, "none")) {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    double start = seconds_now();
    uint64_t result = fixed_work(400000000ULL);
    double took = seconds_now() - start;
    if (ring) {
        // Count the sample records in the ring (it holds all of them at these rates).
        uint64_t head = ring->data_head;
        unsigned char *data = (unsigned char *)ring + ring->data_offset;
        uint64_t samples = 0;
        for (uint64_t at = 0; at < head && at < ring->data_size;) {
            struct perf_event_header *header = (void *)(data + at);
            if (header->size == 0) break;
            if (header->type == PERF_RECORD_SAMPLE) samples++;
            at += header->size;
        }
        interrupts = samples;
    }
    printf("%s %ld %.4f %lu %lu\n", mode, period_ns / 1000, took, (unsigned long)interrupts,
           (unsigned long)(result & 1));
    return 0;
}
