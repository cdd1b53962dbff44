/* A host of Lua states on wasi-threads, as a plugin or game server runs one interpreter per
   worker thread: argv[1] is a script, read once by the first thread; each of WORKERS
   threads makes its own lua_State, runs the script with the global `worker` set to its
   number, and keeps what the script returns (an integer). The first thread waits for them
   all and prints the results, so that only it writes to stdout. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "lua.h"
#include "lauxlib.h"
#include "lualib.h"

#ifndef WORKERS
#define WORKERS 3
#endif

static char *script;
static size_t script_len;
/* The chunk's name: "@" and the script's path, as luaL_dofile names a file's chunk. */
static char chunk[512];

struct job {
    int worker;
    long long result;
    int failed;
};

static void *work(void *arg) {
    struct job *job = arg;
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    lua_pushinteger(L, job->worker);
    lua_setglobal(L, "worker");
    if (luaL_loadbuffer(L, script, script_len, chunk) != LUA_OK ||
        lua_pcall(L, 0, 1, 0) != LUA_OK) {
        job->failed = 1;
    } else {
        job->result = lua_tointeger(L, -1);
    }
    lua_close(L);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: lua_mt SCRIPT\n");
        return 2;
    }
    snprintf(chunk, sizeof chunk, "@%s", argv[1]);
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    script_len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    script = malloc(script_len);
    if (fread(script, 1, script_len, f) != script_len) return 1;
    fclose(f);
    pthread_t threads[WORKERS];
    struct job jobs[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        jobs[i] = (struct job){.worker = i + 1};
        if (pthread_create(&threads[i], NULL, work, &jobs[i]) != 0) {
            fprintf(stderr, "lua_mt: cannot start worker %d\n", i + 1);
            return 1;
        }
    }
    uint64_t sum = 0;
    int failed = 0;
    for (int i = 0; i < WORKERS; i++) {
        pthread_join(threads[i], NULL);
        printf("worker %d: %lld\n", jobs[i].worker, jobs[i].result);
        sum = sum * 1000003u + (uint64_t)jobs[i].result;
        failed |= jobs[i].failed;
    }
    printf("checksum %llu\n", (unsigned long long)sum);
    return failed;
}
