/* Included before every Lua source when building for WASI preview 1. io.tmpfile() returns
   nil (WASI has no temporary files). Without LUA_WASM_SJLJ, <setjmp.h> is kept out and
   Lua's errors abort (LUAI_THROW and LUAI_TRY are defined on the command line); with it,
   setjmp/longjmp work through wasm exception handling and errors are caught as usual. */
#include <stdio.h>
#ifndef LUA_WASM_SJLJ
#define _SETJMP_H
#endif
#define tmpfile() ((FILE *)0)
