/* A call storm: naive recursive Fibonacci, about 2 ns of work per call. fib(38) makes
 * 126 million calls (the compiler turns one of the two recursive calls into a loop, so
 * the module makes about half of them). Usage: fib [N], default 38. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) static unsigned long fib(unsigned n) {
    return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

int main(int argc, char **argv) {
    unsigned n = argc > 1 ? (unsigned)atoi(argv[1]) : 38;
    printf("fib(%u) = %lu\n", n, fib(n));
    return 0;
}
