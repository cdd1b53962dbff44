/*
 * args_env.c: prints its arguments and the environment variable GREETING,
 * then returns 7 from main (so the exit code is 7).
 *
 * Output, one line each:
 *   argc=N
 *   argv[i]=ARG          for every argument, argv[0] included
 *   GREETING=VALUE       or "GREETING is not set"
 */
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))

static NOINLINE void print_args(int argc, char **argv) {
    printf("argc=%d\n", argc);
    for (int i = 0; i < argc; i++) printf("argv[%d]=%s\n", i, argv[i]);
}

static NOINLINE void print_greeting(void) {
    const char *g = getenv("GREETING");
    if (g) printf("GREETING=%s\n", g);
    else printf("GREETING is not set\n");
}

int main(int argc, char **argv) {
    print_args(argc, argv);
    print_greeting();
    return 7;
}
