// Allocations known by construction, for tests of allocation profiling
// (`wprof run --allocs`). Every block's size and fate is fixed:
//
// - small_block: 100 x malloc(24); main frees 60 of them (40 live at exit,
//   960 bytes).
// - make_table: 10 x calloc(4, 256) = 1024 bytes each; every one freed.
// - grow_buffer: malloc(16), then realloc to 32, 64, 128 and 256 bytes; the
//   last one stays live.
// - aligned_block: 3 x posix_memalign(64, 100) and 2 x aligned_alloc(32, 96);
//   every one freed.
//
// The blocks are written and summed, so that no allocation can be left out
// by the compiler.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) unsigned char *small_block(int i) {
    unsigned char *p = malloc(24);
    memset(p, i, 24);
    return p;
}

__attribute__((noinline)) unsigned make_table(int i) {
    unsigned *t = calloc(4, 256);
    unsigned sum = 0;
    // Every third element keeps calloc's zero.
    for (int k = 0; k < 256; k++) {
        if (k % 3 != 0) t[k] = (unsigned)(k * i);
        sum += t[k];
    }
    free(t);
    return sum;
}

__attribute__((noinline)) unsigned char *grow_buffer(void) {
    size_t size = 16;
    unsigned char *p = malloc(size);
    memset(p, 1, size);
    while (size < 256) {
        size *= 2;
        p = realloc(p, size);
        memset(p, 2, size);
    }
    return p;
}

__attribute__((noinline)) unsigned aligned_block(int i) {
    void *p = NULL;
    if (i < 3) {
        if (posix_memalign(&p, 64, 100) != 0) return 0;
        memset(p, i, 100);
    } else {
        p = aligned_alloc(32, 96);
        memset(p, i, 96);
    }
    unsigned v = ((unsigned char *)p)[5] + (unsigned)((size_t)p % 32);
    free(p);
    return v;
}

int main(void) {
    unsigned char *keep[100];
    unsigned long sum = 0;
    for (int i = 0; i < 100; i++) keep[i] = small_block(i);
    for (int i = 0; i < 60; i++) {
        sum += keep[i][3];
        free(keep[i]);
    }
    for (int i = 0; i < 10; i++) sum += make_table(i);
    unsigned char *grown = grow_buffer();
    sum += grown[255];
    for (int i = 0; i < 5; i++) sum += aligned_block(i);
    for (int i = 60; i < 100; i++) sum += keep[i][7];
    printf("allocs: checksum=%lu\n", sum);
    return 0;
}
