/* A SQL workload on SQLite in memory: 300,000 rows inserted in one transaction, an index,
   a sort, a grouping and a join; prints a checksum of the results. */
#include <stdio.h>
#include <stdlib.h>
#include "sqlite3.h"

static sqlite3 *db;

static void exec(const char *sql) {
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        fprintf(stderr, "sqlite: %s\n", err);
        exit(1);
    }
}

static unsigned long long sum_query(const char *sql) {
    sqlite3_stmt *stmt;
    unsigned long long acc = 0;
    if (sqlite3_prepare_v2(db, sql, -1, &stmt, NULL) != SQLITE_OK) {
        fprintf(stderr, "sqlite: %s\n", sqlite3_errmsg(db));
        exit(1);
    }
    while (sqlite3_step(stmt) == SQLITE_ROW) {
        for (int c = 0; c < sqlite3_column_count(stmt); c++)
            acc = acc * 1000003u + (unsigned long long)sqlite3_column_int64(stmt, c);
    }
    sqlite3_finalize(stmt);
    return acc;
}

int main(void) {
    if (sqlite3_open(":memory:", &db) != SQLITE_OK) return 1;
    exec("CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, name TEXT, v REAL)");
    exec("CREATE TABLE g(k INTEGER PRIMARY KEY, label TEXT)");
    exec("BEGIN");
    sqlite3_stmt *ins;
    sqlite3_prepare_v2(db, "INSERT INTO t(k, name, v) VALUES (?, ?, ?)", -1, &ins, NULL);
    unsigned x = 12345;
    char name[32];
    for (int i = 0; i < 300000; i++) {
        x = x * 1103515245u + 12345u;
        snprintf(name, sizeof name, "n%08u", x % 1000000u);
        sqlite3_bind_int(ins, 1, (int)(x % 5000));
        sqlite3_bind_text(ins, 2, name, -1, SQLITE_TRANSIENT);
        sqlite3_bind_double(ins, 3, (double)(x % 10007) / 7.0);
        sqlite3_step(ins);
        sqlite3_reset(ins);
    }
    sqlite3_finalize(ins);
    for (int k = 0; k < 5000; k++) {
        char sql[96];
        snprintf(sql, sizeof sql, "INSERT INTO g VALUES (%d, 'label%d')", k, k * 7 % 113);
        exec(sql);
    }
    exec("COMMIT");
    exec("CREATE INDEX t_k ON t(k)");
    unsigned long long acc = 0;
    acc += sum_query("SELECT id FROM t ORDER BY name, v LIMIT 2000");
    acc += sum_query("SELECT k, count(*), sum(v) FROM t GROUP BY k ORDER BY 3 DESC LIMIT 100");
    acc += sum_query("SELECT count(*) FROM t JOIN g ON t.k = g.k WHERE g.label LIKE 'label1%'");
    acc += sum_query("SELECT count(DISTINCT name) FROM t");
    printf("checksum %llu\n", acc);
    sqlite3_close(db);
    return 0;
}
