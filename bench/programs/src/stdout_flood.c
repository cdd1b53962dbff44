/* A program that writes a lot to stdout, as a logger, an exporter or `cat` of a large
   file does: 1,200,000 log lines (about 100 MB) through stdio's buffer, then 100,000
   lines flushed one by one (a line-buffered logger), meant to be read through a pipe.
   Prints a checksum of what it wrote to stderr. */
#include <stdint.h>
#include <stdio.h>

#define BUFFERED_LINES 1200000
#define FLUSHED_LINES 100000

static uint32_t rng = 1597334677u;
static uint32_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

int main(void) {
    static const char *paths[] = {"/api/v1/items", "/api/v1/users", "/static/app.js", "/healthz"};
    uint64_t acc = 0, bytes = 0;
    for (int i = 0; i < BUFFERED_LINES + FLUSHED_LINES; i++) {
        uint32_t r = next();
        int n = printf("ts=%010d level=info msg=\"request served\" path=%s/%u status=%u bytes=%u\n", i,
                       paths[r % 4], (r >> 2) % 100000u, r % 17 == 0 ? 404u : 200u, (r >> 9) % 65536u);
        if (n < 0) return 1;
        bytes += (uint64_t)n;
        acc = acc * 1000003u + r;
        if (i >= BUFFERED_LINES && fflush(stdout) != 0) return 1;
    }
    fprintf(stderr, "wrote %llu bytes, checksum %016llx\n", (unsigned long long)bytes, (unsigned long long)acc);
    return 0;
}
