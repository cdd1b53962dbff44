/* A SQL workload on an in-memory SQLite database: 300,000 rows inserted in one
   transaction through a prepared statement, an index, sorting, grouping, a join, indexed
   point queries, an UPDATE and a DELETE. Prints one line per query and a checksum. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "sqlite3.h"

#define ROWS 300000
#define CUSTOMERS 5000

static sqlite3 *db;

static void fail(void) {
    fprintf(stderr, "sqlite: %s\n", sqlite3_errmsg(db));
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

/* Folds every column of every row into one number: integers as they are, reals scaled to
   integers (the rounding is the same on every machine), text byte by byte. */
static uint64_t fold_rows(sqlite3_stmt *stmt, uint64_t acc, int *rows) {
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        (*rows)++;
        for (int c = 0; c < sqlite3_column_count(stmt); c++) {
            switch (sqlite3_column_type(stmt, c)) {
            case SQLITE_INTEGER: acc = acc * 1000003u + (uint64_t)sqlite3_column_int64(stmt, c); break;
            case SQLITE_FLOAT: acc = acc * 1000003u + (uint64_t)(int64_t)(sqlite3_column_double(stmt, c) * 100.0); break;
            case SQLITE_TEXT: {
                const unsigned char *t = sqlite3_column_text(stmt, c);
                while (*t) acc = acc * 131u + *t++;
                break;
            }
            default: acc = acc * 7u + 1u;
            }
        }
    }
    if (rc != SQLITE_DONE) fail();
    return acc;
}

static uint64_t query(const char *label, const char *sql, uint64_t acc) {
    sqlite3_stmt *stmt = prepare(sql);
    int rows = 0;
    uint64_t h = fold_rows(stmt, 0, &rows);
    sqlite3_finalize(stmt);
    printf("%-10s %6d rows  %016llx\n", label, rows, (unsigned long long)h);
    return acc * 31u + h;
}

int main(void) {
    if (sqlite3_open(":memory:", &db) != SQLITE_OK) fail();
    exec("PRAGMA cache_size = -65536");
    exec("CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT, region TEXT)");
    exec("CREATE TABLE orders(id INTEGER PRIMARY KEY, customer INTEGER, product TEXT,"
         " qty INTEGER, price REAL, day INTEGER)");

    static const char *const regions[] = {"north", "south", "east", "west", "centre"};
    static const char *const products[] = {"bolt", "nut", "washer", "gear", "spring",
                                           "valve", "pump", "hose", "seal", "filter"};
    exec("BEGIN");
    sqlite3_stmt *ins = prepare("INSERT INTO customers VALUES (?, ?, ?)");
    char text[48];
    for (int i = 0; i < CUSTOMERS; i++) {
        snprintf(text, sizeof text, "customer-%05d", (i * 7919) % 100000);
        sqlite3_bind_int(ins, 1, i);
        sqlite3_bind_text(ins, 2, text, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(ins, 3, regions[i % 5], -1, SQLITE_STATIC);
        if (sqlite3_step(ins) != SQLITE_DONE) fail();
        sqlite3_reset(ins);
    }
    sqlite3_finalize(ins);

    ins = prepare("INSERT INTO orders(customer, product, qty, price, day) VALUES (?, ?, ?, ?, ?)");
    uint32_t x = 12345;
    for (int i = 0; i < ROWS; i++) {
        x = x * 1103515245u + 12345u;
        uint32_t r = x >> 8;
        snprintf(text, sizeof text, "%s-%03u", products[r % 10], (r / 10) % 400);
        sqlite3_bind_int(ins, 1, (int)(r % CUSTOMERS));
        sqlite3_bind_text(ins, 2, text, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(ins, 3, (int)(1 + (r >> 4) % 50));
        sqlite3_bind_double(ins, 4, (double)((r >> 2) % 100000) / 100.0);
        sqlite3_bind_int(ins, 5, (int)((r >> 6) % 365));
        if (sqlite3_step(ins) != SQLITE_DONE) fail();
        sqlite3_reset(ins);
    }
    sqlite3_finalize(ins);
    exec("COMMIT");
    exec("CREATE INDEX orders_customer ON orders(customer)");

    uint64_t acc = 0;
    acc = query("top", "SELECT id, price FROM orders ORDER BY price DESC, id LIMIT 500", acc);
    acc = query("group", "SELECT customer, count(*), sum(qty), round(avg(price), 2) FROM orders"
                " GROUP BY customer ORDER BY sum(qty) DESC, customer LIMIT 200", acc);
    acc = query("join", "SELECT c.region, count(*), sum(o.qty * o.price) FROM orders o"
                " JOIN customers c ON c.id = o.customer WHERE o.day < 30"
                " GROUP BY c.region ORDER BY c.region", acc);
    acc = query("like", "SELECT product, count(*) FROM orders WHERE product LIKE 'gear-1%'"
                " GROUP BY product ORDER BY product", acc);

    /* Indexed point queries through one prepared statement. */
    sqlite3_stmt *point = prepare("SELECT count(*), sum(qty) FROM orders WHERE customer = ?");
    uint64_t h = 0;
    int rows = 0;
    for (int i = 0; i < 2500; i++) {
        sqlite3_bind_int(point, 1, (i * 37) % CUSTOMERS);
        h = fold_rows(point, h, &rows);
        sqlite3_reset(point);
    }
    sqlite3_finalize(point);
    printf("%-10s %6d rows  %016llx\n", "point", rows, (unsigned long long)h);
    acc = acc * 31u + h;

    exec("UPDATE orders SET price = price * 1.1 WHERE day % 7 = 0");
    exec("DELETE FROM orders WHERE qty > 45");
    acc = query("after", "SELECT count(*), sum(qty), round(sum(price), 2) FROM orders", acc);

    printf("checksum %016llx\n", (unsigned long long)acc);
    sqlite3_close(db);
    return 0;
}
