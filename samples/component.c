// A WASI 0.2 command component (samples/build.sh turns the core module this builds
// into a component with the WASI preview 1 adapter), with exact call counts:
//
//   component [ROUNDS [EXIT [FILE]]]
//
// `middle` is called ROUNDS times (default 1000) and `leaf` 100 times per call of
// `middle`. The greeting comes from the GREETING environment variable; with FILE,
// its first line is printed (read through a preopened directory); the exit code is
// EXIT (default 0).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) static unsigned leaf(unsigned x) {
    return (x * 2654435761u) ^ (x >> 7);
}

__attribute__((noinline)) unsigned middle(unsigned n, unsigned salt) {
    unsigned sum = 0;
    for (unsigned i = 0; i < n; i++) {
        sum += leaf(i + salt);
    }
    return sum;
}

int main(int argc, char **argv) {
    unsigned rounds = argc > 1 ? (unsigned)atoi(argv[1]) : 1000;
    const char *greeting = getenv("GREETING");
    unsigned checksum = 0;
    for (unsigned r = 0; r < rounds; r++) {
        checksum += middle(100, r);
    }
    printf("%s: %u rounds, checksum %u\n", greeting ? greeting : "hello", rounds, checksum);
    if (argc > 3) {
        FILE *f = fopen(argv[3], "r");
        if (!f) {
            fprintf(stderr, "cannot open %s\n", argv[3]);
            return 3;
        }
        char line[256];
        if (fgets(line, sizeof line, f)) {
            printf("first line: %s", line);
        }
        fclose(f);
    }
    return argc > 2 ? atoi(argv[2]) : 0;
}
