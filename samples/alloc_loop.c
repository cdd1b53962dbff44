// A long-running program that allocates (for tests of `wprof run --serve --allocs`): for
// every read of stdin, `store` copies the bytes read into a 64-byte block from malloc;
// every 10th block is kept to the end, the others are freed at once. Prints `ok` per read;
// exits 0 at the end of input.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned char *kept[1 << 16];
static unsigned kept_count;

__attribute__((noinline)) void store(const char *text, size_t n, unsigned serial) {
    unsigned char *block = malloc(64);
    memcpy(block, text, n < 64 ? n : 64);
    if (serial % 10 == 0 && kept_count < (1u << 16)) {
        kept[kept_count++] = block;
    } else {
        free(block);
    }
}

int main(void) {
    char buffer[256];
    unsigned serial = 0;
    for (;;) {
        ssize_t n = read(0, buffer, sizeof buffer);
        if (n <= 0) break;
        store(buffer, (size_t)n, serial++);
        write(1, "ok\n", 3);
    }
    return 0;
}
