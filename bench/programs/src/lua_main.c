/* A minimal Lua host for the benchmark set: runs the script named by argv[1] with the
   standard libraries, passing the remaining arguments in `arg`. */
#include <stdio.h>
#include "lua.h"
#include "lauxlib.h"
#include "lualib.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: lua SCRIPT [ARGS...]\n");
        return 2;
    }
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    lua_createtable(L, argc, 0);
    for (int i = 1; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - 1);
    }
    lua_setglobal(L, "arg");
    int status = luaL_dofile(L, argv[1]);
    if (status != LUA_OK) {
        fprintf(stderr, "lua: %s\n", lua_tostring(L, -1));
    }
    lua_close(L);
    return status == LUA_OK ? 0 : 1;
}
