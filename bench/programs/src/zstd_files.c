/* A compressor on files, as `zstd` and `gzip` are used: 24 input files (384 KiB to 1.8 MiB,
   text-like records, 26 MiB in all) written to the folder given (default /scratch), each
   compressed to a .zst file through zstd's streaming API at level 1, decompressed to a
   third file, and read back against the original. Reads and writes go through stdio in 16
   KiB chunks, so the program makes thousands of fd_read and fd_write calls and opens,
   closes and deletes 72 files. Prints a checksum of the compressed bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "zstd.h"

#define FILES 24
#define CHUNK (16 * 1024)

static void die(const char *what, const char *path) {
    fprintf(stderr, "zstd_files: %s %s\n", what, path);
    exit(1);
}

static FILE *open_or_die(const char *path, const char *mode) {
    FILE *f = fopen(path, mode);
    if (!f) die("cannot open", path);
    return f;
}

static uint32_t rng = 2463534242u;
static uint32_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

/* A log-like input: records with repeating keys and varying numbers. */
static void write_input(const char *path, size_t bytes) {
    static const char *words[] = {"GET", "POST", "/api/items", "/api/users", "status=200",
                                  "status=404", "cache=hit", "cache=miss", "region=eu", "region=us"};
    FILE *f = open_or_die(path, "wb");
    size_t written = 0;
    while (written < bytes) {
        uint32_t r = next();
        int n = fprintf(f, "%010u %s %s %s latency_us=%u user=%u\n", r % 1000000000u, words[r % 2],
                        words[2 + (r >> 3) % 2], words[4 + (r >> 5) % 6], (r >> 7) % 100000u,
                        (r >> 11) % 5000u);
        if (n < 0) die("cannot write", path);
        written += (size_t)n;
    }
    if (fclose(f) != 0) die("cannot close", path);
}

static uint64_t compress_file(const char *in_path, const char *out_path) {
    static char in_buf[CHUNK], out_buf[CHUNK];
    FILE *in = open_or_die(in_path, "rb"), *out = open_or_die(out_path, "wb");
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 1);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
    uint64_t acc = 0;
    for (;;) {
        size_t got = fread(in_buf, 1, CHUNK, in);
        int last = got < CHUNK;
        ZSTD_inBuffer input = {in_buf, got, 0};
        int done;
        do {
            ZSTD_outBuffer output = {out_buf, CHUNK, 0};
            size_t left = ZSTD_compressStream2(cctx, &output, &input, last ? ZSTD_e_end : ZSTD_e_continue);
            if (ZSTD_isError(left)) die(ZSTD_getErrorName(left), in_path);
            if (fwrite(out_buf, 1, output.pos, out) != output.pos) die("cannot write", out_path);
            for (size_t i = 0; i < output.pos; i += 61) acc = acc * 1000003u + (unsigned char)out_buf[i];
            acc += output.pos;
            done = last ? left == 0 : input.pos == input.size;
        } while (!done);
        if (last) break;
    }
    ZSTD_freeCCtx(cctx);
    fclose(in);
    if (fclose(out) != 0) die("cannot close", out_path);
    return acc;
}

static void decompress_file(const char *in_path, const char *out_path) {
    static char in_buf[CHUNK], out_buf[CHUNK];
    FILE *in = open_or_die(in_path, "rb"), *out = open_or_die(out_path, "wb");
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    size_t got;
    while ((got = fread(in_buf, 1, CHUNK, in)) > 0) {
        ZSTD_inBuffer input = {in_buf, got, 0};
        while (input.pos < input.size) {
            ZSTD_outBuffer output = {out_buf, CHUNK, 0};
            size_t r = ZSTD_decompressStream(dctx, &output, &input);
            if (ZSTD_isError(r)) die(ZSTD_getErrorName(r), in_path);
            if (fwrite(out_buf, 1, output.pos, out) != output.pos) die("cannot write", out_path);
        }
    }
    ZSTD_freeDCtx(dctx);
    fclose(in);
    if (fclose(out) != 0) die("cannot close", out_path);
}

static void compare_files(const char *a_path, const char *b_path) {
    static char a_buf[4096], b_buf[4096];
    FILE *a = open_or_die(a_path, "rb"), *b = open_or_die(b_path, "rb");
    for (;;) {
        size_t na = fread(a_buf, 1, sizeof a_buf, a), nb = fread(b_buf, 1, sizeof b_buf, b);
        if (na != nb || memcmp(a_buf, b_buf, na) != 0) die("round trip differs:", b_path);
        if (na == 0) break;
    }
    fclose(a);
    fclose(b);
}

int main(int argc, char **argv) {
    const char *folder = argc > 1 ? argv[1] : "/scratch";
    char input[256], packed[260], unpacked[264];
    uint64_t acc = 0;
    for (int i = 0; i < FILES; i++) {
        snprintf(input, sizeof input, "%s/input%02d.log", folder, i);
        write_input(input, (384u << 10) + (size_t)i * (64u << 10));
    }
    for (int i = 0; i < FILES; i++) {
        snprintf(input, sizeof input, "%s/input%02d.log", folder, i);
        snprintf(packed, sizeof packed, "%s.zst", input);
        snprintf(unpacked, sizeof unpacked, "%s.out", input);
        acc = acc * 31u + compress_file(input, packed);
        decompress_file(packed, unpacked);
        compare_files(input, unpacked);
        unlink(input);
        unlink(packed);
        unlink(unpacked);
    }
    printf("checksum %016llx\n", (unsigned long long)acc);
    return 0;
}
