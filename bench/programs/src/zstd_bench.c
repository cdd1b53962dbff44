/* A zstd workload: generates ~6 MB of log-like text and a block of structured binary
   records, compresses them at several levels with the one-shot and the streaming APIs,
   decompresses every result and checks it against the original, and prints a checksum of
   the compressed bytes. Built with -DZSTD_BENCH_WORKERS=N (and ZSTD_MULTITHREAD), every
   compression runs on N worker threads (zstd's output depends on whether it uses workers,
   not on how many). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "zstd.h"

static uint32_t rng = 0x2545f491u;
static uint32_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

static const char *const words[] = {
    "GET", "POST", "request", "served", "user", "session", "cache", "miss", "hit",
    "timeout", "retry", "backend", "upstream", "status", "latency", "bytes", "index",
    "the", "a", "of", "to", "and", "in", "for", "is", "on", "ok", "error", "warning",
    "/api/v1/items", "/static/app.js", "/login", "/search?q=wasm", "connection", "closed",
};

/* Text with a skewed word distribution, line structure and numbers: compresses ~4-6x. */
static size_t make_text(char *buf, size_t cap) {
    size_t n = 0;
    unsigned line = 0;
    while (n + 160 < cap) {
        n += (size_t)snprintf(buf + n, cap - n, "2026-11-23T08:%02u:%02u.%03u [%s] ",
                              (line / 60) % 60, line % 60, next_rand() % 1000,
                              (next_rand() & 7) == 0 ? "WARN" : "INFO");
        unsigned nwords = 4 + next_rand() % 9;
        for (unsigned w = 0; w < nwords; w++) {
            uint32_t r = next_rand();
            /* Squaring a uniform value favours the first words of the table. */
            unsigned idx = (unsigned)(((uint64_t)(r % 1024) * (r % 1024)) >> 20) %
                           (unsigned)(sizeof words / sizeof words[0]);
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", words[idx],
                                  w + 1 == nwords ? "" : " ");
        }
        n += (size_t)snprintf(buf + n, cap - n, " id=%u t=%ums\n", next_rand() % 50000,
                              next_rand() % 2000);
        line++;
    }
    return n;
}

/* Little-endian records with slowly changing fields: compresses well at higher levels. */
static size_t make_records(unsigned char *buf, size_t cap) {
    size_t n = 0;
    uint32_t id = 1000, value = 0;
    while (n + 16 <= cap) {
        id += 1 + next_rand() % 3;
        value += next_rand() % 17;
        uint32_t fields[4] = {id, value, next_rand() & 0xff, 0xfeedu};
        memcpy(buf + n, fields, sizeof fields);
        n += sizeof fields;
    }
    return n;
}

static uint64_t fold(uint64_t acc, const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) acc = (acc ^ p[i]) * 0x100000001b3ull;
    return acc;
}

static void die(const char *what, size_t code) {
    fprintf(stderr, "zstd: %s: %s\n", what, ZSTD_getErrorName(code));
    exit(1);
}

/* One-shot compression at `level`, then decompression and a comparison. */
static uint64_t one_shot(const void *src, size_t n, int level, uint64_t acc) {
    size_t cap = ZSTD_compressBound(n);
    unsigned char *dst = malloc(cap);
    unsigned char *back = malloc(n);
#ifdef ZSTD_BENCH_WORKERS
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
    size_t workers = ZSTD_CCtx_setParameter(cctx, ZSTD_c_nbWorkers, ZSTD_BENCH_WORKERS);
    if (ZSTD_isError(workers)) die("nbWorkers", workers);
    size_t c = ZSTD_compress2(cctx, dst, cap, src, n);
    ZSTD_freeCCtx(cctx);
#else
    size_t c = ZSTD_compress(dst, cap, src, n, level);
#endif
    if (ZSTD_isError(c)) die("compress", c);
    size_t d = ZSTD_decompress(back, n, dst, c);
    if (ZSTD_isError(d)) die("decompress", d);
    if (d != n || memcmp(back, src, n) != 0) {
        fprintf(stderr, "zstd: round trip mismatch at level %d\n", level);
        exit(1);
    }
    printf("level %2d: %zu -> %zu\n", level, n, c);
    acc = fold(acc, dst, c);
    free(dst);
    free(back);
    return acc;
}

/* Streaming compression in 64 KiB input chunks with checksums on, then streaming
   decompression in 16 KiB output chunks. */
static uint64_t streaming(const unsigned char *src, size_t n, int level, uint64_t acc) {
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
#ifdef ZSTD_BENCH_WORKERS
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_nbWorkers, ZSTD_BENCH_WORKERS);
#endif
    size_t cap = ZSTD_compressBound(n) + 1024, used = 0;
    unsigned char *dst = malloc(cap);
    for (size_t off = 0; off < n; off += 65536) {
        size_t len = n - off < 65536 ? n - off : 65536;
        ZSTD_inBuffer in = {src + off, len, 0};
        ZSTD_EndDirective mode = off + len == n ? ZSTD_e_end : ZSTD_e_continue;
        size_t left;
        do {
            ZSTD_outBuffer out = {dst + used, cap - used, 0};
            left = ZSTD_compressStream2(cctx, &out, &in, mode);
            if (ZSTD_isError(left)) die("compressStream2", left);
            used += out.pos;
        } while (mode == ZSTD_e_end ? left != 0 : in.pos < in.size);
    }
    ZSTD_freeCCtx(cctx);

    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    unsigned char chunk[16384];
    size_t pos = 0;
    ZSTD_inBuffer in = {dst, used, 0};
    while (in.pos < in.size) {
        ZSTD_outBuffer out = {chunk, sizeof chunk, 0};
        size_t r = ZSTD_decompressStream(dctx, &out, &in);
        if (ZSTD_isError(r)) die("decompressStream", r);
        if (pos + out.pos > n || memcmp(src + pos, chunk, out.pos) != 0) {
            fprintf(stderr, "zstd: streaming mismatch\n");
            exit(1);
        }
        pos += out.pos;
    }
    ZSTD_freeDCtx(dctx);
    if (pos != n) {
        fprintf(stderr, "zstd: streaming output is short\n");
        exit(1);
    }
    printf("stream %2d: %zu -> %zu\n", level, n, used);
    acc = fold(acc, dst, used);
    free(dst);
    return acc;
}

int main(void) {
    size_t text_cap = 6u << 20, rec_cap = 2u << 20;
    char *text = malloc(text_cap);
    unsigned char *recs = malloc(rec_cap);
    size_t text_n = make_text(text, text_cap);
    size_t rec_n = make_records(recs, rec_cap);
    uint64_t acc = 0xcbf29ce484222325ull;
    static const int levels[] = {1, 3, 6};
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++)
        acc = one_shot(text, text_n, levels[i], acc);
    acc = one_shot(recs, rec_n, 9, acc);
    acc = streaming((const unsigned char *)text, text_n, 2, acc);
    acc = streaming(recs, rec_n, 4, acc);
    printf("checksum %016llx\n", (unsigned long long)acc);
    free(text);
    free(recs);
    return 0;
}
