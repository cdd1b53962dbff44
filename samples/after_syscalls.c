// The same short work twice in each round: once right after a system call that the kernel
// works on for a while (writing 2 MiB to a file), once a long stretch of other work
// later. A sampler must give both the same time: one whose next tick were drawn from when
// the last one was taken, not from when it was due, would never sample the moments after
// such calls (the tick that came due in the call is taken only as it returns).
//
//   after_syscalls DIR [ROUNDS [WORK]]

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile unsigned sink;
static char block[2 * 1024 * 1024];

static unsigned work(unsigned rounds, unsigned x) {
    for (unsigned i = 0; i < rounds; i++) x = x * 1103515245u + 12345u;
    return x;
}

// Right after each write.
__attribute__((noinline)) void after_write(unsigned rounds) { sink += work(rounds, 1); }

// Between the two: twenty times as long.
__attribute__((noinline)) void in_between(unsigned rounds) { sink += work(rounds * 20, 2); }

// The same work as `after_write`, far from the write.
__attribute__((noinline)) void far_from_it(unsigned rounds) { sink += work(rounds, 3); }

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".";
    int rounds = argc > 2 ? atoi(argv[2]) : 1500;
    unsigned amount = argc > 3 ? (unsigned)atoi(argv[3]) : 100000;
    char path[256];
    snprintf(path, sizeof path, "%s/block", dir);
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0) {
        perror("open");
        return 1;
    }
    memset(block, 'x', sizeof block);
    for (int i = 0; i < rounds; i++) {
        if (pwrite(fd, block, sizeof block, 0) != (ssize_t)sizeof block) {
            perror("pwrite");
            return 1;
        }
        after_write(amount);
        in_between(amount);
        far_from_it(amount);
    }
    close(fd);
    unlink(path);
    printf("wrote %d blocks (%u)\n", rounds, sink);
    return 0;
}
