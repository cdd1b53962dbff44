/*
 * compress.c: an LZ77 compressor (hash chains over a 64 KiB window) and its
 * decompressor, run as a round trip over generated data, checked with a
 * table-driven CRC-32 and a 64-bit FNV-1a hash.
 *
 * Usage: compress.wasm [ROUNDS]   (ROUNDS defaults to 16)
 *
 * Each round generates 512 KiB of data from a fixed seed (word salad, long
 * runs and random bytes, in a mix that depends on the round), compresses it,
 * decompresses it and compares. Output is deterministic; a failed round trip
 * prints "MISMATCH" and exits with code 1 (so does a failed CRC-32
 * self-test on "123456789").
 *
 * Compressed format, a sequence of items:
 *   0x00..0x7f  L        literal run: the next L+1 bytes are copied as is
 *   0x80..0xff  M lo hi  match: copy M-0x80+4 bytes from `offset` bytes back,
 *                        offset = lo | hi << 8 (1..65535)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

#define DATA_LEN (512 * 1024)
#define COMP_CAP (DATA_LEN + DATA_LEN / 128 + 64)

#define MIN_MATCH 4
#define MAX_MATCH (0x7f + MIN_MATCH)
#define MAX_LITERALS 128
#define WINDOW_BITS 16
#define WINDOW_SIZE (1 << WINDOW_BITS)
#define WINDOW_MASK (WINDOW_SIZE - 1)
#define MAX_OFFSET (WINDOW_SIZE - 1)
#define HASH_BITS 15
#define HASH_SIZE (1 << HASH_BITS)
#define CHAIN_DEPTH 32

static uint8_t data[DATA_LEN];
static uint8_t comp[COMP_CAP];
static uint8_t back[DATA_LEN];
static int32_t head[HASH_SIZE];
static int32_t prev[WINDOW_SIZE];

/* ------------------------------------------------------------- generator */

static uint64_t rng_state;

static uint32_t rng_next(void) {
    /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 2685821657736338717ULL) >> 32);
}

static const char *const WORDS[] = {
    "the", "profiler", "counts", "every", "call", "of", "each", "function",
    "and", "measures", "time", "spent", "inside", "wasm", "module", "with",
    "a", "stack", "frame", "per", "entry", "exit", "sample", "tree",
    "node", "self", "total", "import", "host", "memory", "table", "export",
};
#define NWORDS (sizeof WORDS / sizeof WORDS[0])

/* Fills buf with len bytes: word salad, byte runs and noise, mixed by round. */
static NOINLINE void generate(uint8_t *buf, size_t len, uint32_t round) {
    rng_state = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)(round + 1) * 0xbf58476d1ce4e5b9ULL);
    size_t i = 0;
    unsigned noise_pct = 2 + (round % 4) * 6;   /* 2, 8, 14, 20 % of chunks */
    while (i < len) {
        uint32_t r = rng_next();
        unsigned pick = r % 100;
        if (pick < noise_pct) {
            /* random bytes */
            size_t n = 16 + (r >> 8) % 200;
            for (size_t k = 0; k < n && i < len; k++) buf[i++] = (uint8_t)rng_next();
        } else if (pick < noise_pct + 5) {
            /* a run of one byte */
            size_t n = 8 + (r >> 8) % 300;
            uint8_t b = (uint8_t)(r >> 24);
            for (size_t k = 0; k < n && i < len; k++) buf[i++] = b;
        } else {
            /* a sentence of words */
            size_t nw = 3 + (r >> 8) % 12;
            for (size_t w = 0; w < nw && i < len; w++) {
                const char *word = WORDS[rng_next() % NWORDS];
                while (*word && i < len) buf[i++] = (uint8_t)*word++;
                if (i < len) buf[i++] = ' ';
            }
            if (i < len) buf[i++] = (r & 1) ? '.' : '\n';
        }
    }
}

/* ---------------------------------------------------------------- hashes */

static uint32_t crc_table[256];

static NOINLINE void crc32_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

static NOINLINE uint32_t crc32(const uint8_t *p, size_t len) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < len; i++) c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

static NOINLINE uint64_t fnv1a64(const uint8_t *p, size_t len) {
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/* ------------------------------------------------------------ compressor */

static inline uint32_t hash4(const uint8_t *p) {
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    return (v * 2654435761u) >> (32 - HASH_BITS);
}

static inline void insert(const uint8_t *src, int32_t pos) {
    uint32_t h = hash4(src + pos);
    prev[pos & WINDOW_MASK] = head[h];
    head[h] = pos;
}

/* Longest match for src[pos..end) among earlier positions on its hash chain.
 * Returns its length (0 if shorter than MIN_MATCH) and sets *offset. */
static NOINLINE int find_match(const uint8_t *src, int32_t pos, int32_t end, int32_t *offset) {
    int32_t limit = end - pos;
    if (limit > MAX_MATCH) limit = MAX_MATCH;
    if (limit < MIN_MATCH) return 0;
    int best = 0;
    int32_t cand = head[hash4(src + pos)];
    for (int depth = 0; depth < CHAIN_DEPTH && cand >= 0; depth++) {
        int32_t dist = pos - cand;
        if (dist <= 0 || dist > MAX_OFFSET) break;
        if (src[cand + best] == src[pos + best]) {
            int len = 0;
            while (len < limit && src[cand + len] == src[pos + len]) len++;
            if (len > best) {
                best = len;
                *offset = dist;
                if (len == limit) break;
            }
        }
        int32_t next = prev[cand & WINDOW_MASK];
        if (next >= cand) break;
        cand = next;
    }
    return best >= MIN_MATCH ? best : 0;
}

static NOINLINE size_t flush_literals(uint8_t *out, size_t o, const uint8_t *lit, size_t n) {
    while (n > 0) {
        size_t chunk = n > MAX_LITERALS ? MAX_LITERALS : n;
        out[o++] = (uint8_t)(chunk - 1);
        memcpy(out + o, lit, chunk);
        o += chunk;
        lit += chunk;
        n -= chunk;
    }
    return o;
}

/* Compresses src[0..len) into out; returns the compressed size. */
static NOINLINE size_t lz_compress(const uint8_t *src, size_t len, uint8_t *out) {
    for (size_t i = 0; i < HASH_SIZE; i++) head[i] = -1;
    int32_t end = (int32_t)len;
    int32_t pos = 0, lit_start = 0;
    size_t o = 0;
    while (pos < end) {
        int32_t offset = 0;
        int len_m = (pos + MIN_MATCH <= end) ? find_match(src, pos, end, &offset) : 0;
        if (len_m == 0) {
            if (pos + MIN_MATCH <= end) insert(src, pos);
            pos++;
            continue;
        }
        o = flush_literals(out, o, src + lit_start, (size_t)(pos - lit_start));
        out[o++] = (uint8_t)(0x80 | (len_m - MIN_MATCH));
        out[o++] = (uint8_t)(offset & 0xff);
        out[o++] = (uint8_t)(offset >> 8);
        for (int k = 0; k < len_m; k++, pos++)
            if (pos + MIN_MATCH <= end) insert(src, pos);
        lit_start = pos;
    }
    return flush_literals(out, o, src + lit_start, (size_t)(pos - lit_start));
}

/* Decompresses in[0..len) into out (capacity cap); returns the size, or
 * (size_t)-1 if the input is malformed. */
static NOINLINE size_t lz_decompress(const uint8_t *in, size_t len, uint8_t *out, size_t cap) {
    size_t i = 0, o = 0;
    while (i < len) {
        uint8_t tag = in[i++];
        if (tag < 0x80) {
            size_t n = (size_t)tag + 1;
            if (i + n > len || o + n > cap) return (size_t)-1;
            memcpy(out + o, in + i, n);
            i += n;
            o += n;
        } else {
            if (i + 2 > len) return (size_t)-1;
            size_t n = (size_t)(tag - 0x80) + MIN_MATCH;
            size_t off = (size_t)in[i] | (size_t)in[i + 1] << 8;
            i += 2;
            if (off == 0 || off > o || o + n > cap) return (size_t)-1;
            /* byte by byte: source and destination may overlap */
            for (size_t k = 0; k < n; k++, o++) out[o] = out[o - off];
        }
    }
    return o;
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv) {
    int rounds = 16;
    if (argc > 1) {
        rounds = atoi(argv[1]);
        if (rounds <= 0) {
            fprintf(stderr, "usage: compress [ROUNDS]\n");
            return 2;
        }
    }
    crc32_init();
    if (crc32((const uint8_t *)"123456789", 9) != 0xcbf43926u) {
        printf("crc32 self-test failed\n");
        return 1;
    }
    uint64_t total_in = 0, total_out = 0;
    uint32_t crc_all = 0;
    for (int r = 0; r < rounds; r++) {
        generate(data, DATA_LEN, (uint32_t)r);
        uint32_t crc_in = crc32(data, DATA_LEN);
        size_t clen = lz_compress(data, DATA_LEN, comp);
        size_t dlen = lz_decompress(comp, clen, back, DATA_LEN);
        if (dlen != DATA_LEN || memcmp(data, back, DATA_LEN) != 0) {
            printf("round %d: MISMATCH\n", r);
            return 1;
        }
        uint32_t crc_out = crc32(back, dlen);
        uint64_t h = fnv1a64(comp, clen);
        printf("round %d: %u -> %zu bytes (%.1f%%) crc32=%08x/%08x fnv=%016llx\n", r,
               (unsigned)DATA_LEN, clen, 100.0 * (double)clen / DATA_LEN, crc_in, crc_out,
               (unsigned long long)h);
        total_in += DATA_LEN;
        total_out += clen;
        crc_all = crc_all * 31 + crc_in + (uint32_t)h;
    }
    printf("total %llu -> %llu bytes, checksum=%08x\n", (unsigned long long)total_in,
           (unsigned long long)total_out, crc_all);
    return 0;
}
