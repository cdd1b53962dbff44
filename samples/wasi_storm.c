// wasi_storm.c: a program that calls the host often, for measuring what wprof's host
// measurement costs. 200,000 times: read the monotonic clock; every 10th time, write a
// 16-byte line to stdout (one write each, no stdio buffering).
//
// Known by construction: clock_time_get 200,000 calls from tick; fd_write 20,000 calls,
// 320,000 bytes, from line. Exit code 0.
#include <time.h>
#include <unistd.h>

static unsigned long long mixed;

__attribute__((noinline)) static void tick(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    mixed = mixed * 31 + (unsigned long long)t.tv_nsec;
}

__attribute__((noinline)) static void line(int i) {
    char text[16] = "line 0000000000\n";
    for (int k = 14; k >= 5; k--, i /= 10) {
        text[k] = (char)('0' + i % 10);
    }
    write(1, text, sizeof text);
}

int main(void) {
    for (int i = 0; i < 200000; i++) {
        tick();
        if (i % 10 == 0) {
            line(i);
        }
    }
    return mixed == 1 ? 1 : 0;
}
