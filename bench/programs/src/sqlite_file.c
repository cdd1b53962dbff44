/* SQLite on a database file, as an application keeps its data: 100,000 rows inserted in
   transactions of 500, an index, 20,000 pairs of indexed point queries through a page
   cache of 64 KiB (most pages come from the file), a scan, an UPDATE of one row in ten
   and a DELETE. Every page moves through WASI's fd_read/fd_write (pread/pwrite on the host).
   The database is created afresh in the folder given (default /scratch); fsync is off
   (PRAGMA synchronous=OFF), so the disk's flush time does not drown the calls' own cost.
   Prints a checksum of every query's rows. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "sqlite3.h"

#define ROWS 100000
#define BATCH 500
#define LOOKUPS 20000

static sqlite3 *db;

static void fail(void) {
    fprintf(stderr, "sqlite_file: %s\n", sqlite3_errmsg(db));
    exit(1);
}

static void exec(const char *sql) {
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) fail();
}

static sqlite3_stmt *prepare(const char *sql) {
    sqlite3_stmt *stmt;
    if (sqlite3_prepare_v2(db, sql, -1, &stmt, NULL) != SQLITE_OK) fail();
    return stmt;
}

/* Folds every column of every row of `stmt` into `acc`. */
static uint64_t fold_rows(sqlite3_stmt *stmt, uint64_t acc) {
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        for (int c = 0; c < sqlite3_column_count(stmt); c++) {
            if (sqlite3_column_type(stmt, c) == SQLITE_TEXT) {
                const unsigned char *t = sqlite3_column_text(stmt, c);
                while (*t) acc = acc * 131u + *t++;
            } else {
                acc = acc * 1000003u + (uint64_t)sqlite3_column_int64(stmt, c);
            }
        }
    }
    if (rc != SQLITE_DONE) fail();
    return acc;
}

static uint32_t rng = 12345;
static uint32_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

int main(int argc, char **argv) {
    const char *folder = argc > 1 ? argv[1] : "/scratch";
    char path[256], journal[272];
    snprintf(path, sizeof path, "%s/bench.db", folder);
    snprintf(journal, sizeof journal, "%s-journal", path);
    unlink(path);
    unlink(journal);
    /* "unix-none": SQLite's file VFS without locks, which WASI does not have. */
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, "unix-none") != SQLITE_OK)
        fail();
    exec("PRAGMA synchronous=OFF; PRAGMA cache_size=-64; PRAGMA journal_mode=DELETE");
    exec("CREATE TABLE items (id INTEGER PRIMARY KEY, sku TEXT, name TEXT, qty INTEGER, price INTEGER)");

    sqlite3_stmt *insert = prepare("INSERT INTO items (sku, name, qty, price) VALUES (?, ?, ?, ?)");
    char sku[32], name[64];
    for (int i = 0; i < ROWS; i++) {
        if (i % BATCH == 0) exec("BEGIN");
        uint32_t r = next();
        snprintf(sku, sizeof sku, "SKU-%08u", (unsigned)(r % 1000000u) * 100u + (unsigned)(i % 100));
        snprintf(name, sizeof name, "item %u of batch %d, colour %u", r % 977u, i / BATCH, r % 13u);
        sqlite3_bind_text(insert, 1, sku, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(insert, 2, name, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(insert, 3, (int)(r % 500u));
        sqlite3_bind_int(insert, 4, (int)(r % 100000u));
        if (sqlite3_step(insert) != SQLITE_DONE) fail();
        sqlite3_reset(insert);
        if (i % BATCH == BATCH - 1) exec("COMMIT");
    }
    sqlite3_finalize(insert);
    exec("CREATE INDEX items_sku ON items (sku)");

    uint64_t acc = 0;
    sqlite3_stmt *by_id = prepare("SELECT sku, qty FROM items WHERE id = ?");
    sqlite3_stmt *by_sku = prepare("SELECT id, price FROM items WHERE sku >= ? ORDER BY sku LIMIT 3");
    for (int i = 0; i < LOOKUPS; i++) {
        uint32_t r = next();
        sqlite3_bind_int(by_id, 1, (int)(r % ROWS) + 1);
        acc = fold_rows(by_id, acc);
        sqlite3_reset(by_id);
        snprintf(sku, sizeof sku, "SKU-%08u", (unsigned)(r % 100000000u));
        sqlite3_bind_text(by_sku, 1, sku, -1, SQLITE_TRANSIENT);
        acc = fold_rows(by_sku, acc);
        sqlite3_reset(by_sku);
    }
    sqlite3_finalize(by_id);
    sqlite3_finalize(by_sku);

    sqlite3_stmt *scan = prepare("SELECT qty % 10, count(*), sum(price) FROM items GROUP BY 1 ORDER BY 1");
    acc = fold_rows(scan, acc);
    sqlite3_finalize(scan);
    exec("BEGIN; UPDATE items SET qty = qty + 1 WHERE id % 10 = 0; COMMIT");
    exec("BEGIN; DELETE FROM items WHERE price < 5000; COMMIT");
    sqlite3_stmt *count = prepare("SELECT count(*), sum(qty) FROM items");
    acc = fold_rows(count, acc);
    sqlite3_finalize(count);

    if (sqlite3_close(db) != SQLITE_OK) fail();
    unlink(path);
    printf("checksum %016llx\n", (unsigned long long)acc);
    return 0;
}
