// host_io.c: time in the host, by construction. Reads stdin to its end in 4096-byte
// reads, writes 6 x 1000 bytes from emit_a and 4 x 500 bytes from emit_b (one write
// each, no stdio buffering), then sleeps 50 ms.
//
// Known by construction, for an input of N bytes:
//   fd_read: ceil(N / 4096) + 1 calls (the last returns 0), N bytes, from slurp;
//   fd_write: 6 calls, 6000 bytes from emit_a's context, 4 calls, 2000 bytes from
//   emit_b's; poll_oneoff: 1 call from nap, at least 50 ms of wall time, almost all of it
//   off the CPU. Exit code 0; stdout is 6000 'a' then 2000 'b'.
#include <string.h>
#include <time.h>
#include <unistd.h>

static char buffer[4096];

__attribute__((noinline)) static long slurp(void) {
    long total = 0;
    ssize_t n;
    while ((n = read(0, buffer, sizeof buffer)) > 0) {
        total += n;
    }
    return total;
}

__attribute__((noinline)) static void emit_a(void) {
    memset(buffer, 'a', 1000);
    for (int i = 0; i < 6; i++) {
        write(1, buffer, 1000);
    }
}

__attribute__((noinline)) static void emit_b(void) {
    memset(buffer, 'b', 500);
    for (int i = 0; i < 4; i++) {
        write(1, buffer, 500);
    }
}

__attribute__((noinline)) static void nap(void) {
    struct timespec t = {0, 50 * 1000 * 1000};
    nanosleep(&t, 0);
}

int main(void) {
    long got = slurp();
    emit_a();
    emit_b();
    nap();
    return got >= 0 ? 0 : 1;
}
