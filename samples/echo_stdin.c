/*
 * echo_stdin.c: copies standard input to standard output with ASCII letters
 * upper-cased, then writes "bytes: N\n" (N = bytes read) to standard error.
 * Exits with code 0 (1 if reading or writing fails).
 *
 * For testing that stdin, stdout and stderr pass through the profiler.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static NOINLINE void upcase(char *buf, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (buf[i] >= 'a' && buf[i] <= 'z') buf[i] = (char)(buf[i] - 'a' + 'A');
}

/* Writes all n bytes to fd; returns 0 on success. */
static NOINLINE int write_all(int fd, const char *buf, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w <= 0) return -1;
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

int main(void) {
    static char buf[4096];
    unsigned long long total = 0;
    for (;;) {
        ssize_t r = read(0, buf, sizeof buf);
        if (r < 0) {
            perror("read");
            return 1;
        }
        if (r == 0) break;
        total += (unsigned long long)r;
        upcase(buf, (size_t)r);
        if (write_all(1, buf, (size_t)r) != 0) {
            perror("write");
            return 1;
        }
    }
    char msg[64];
    int len = snprintf(msg, sizeof msg, "bytes: %llu\n", total);
    return write_all(2, msg, (size_t)len) == 0 ? 0 : 1;
}
