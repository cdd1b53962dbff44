/* Included before every Lua source when building for WASI preview 1 without exception
   handling: Lua's errors abort instead of longjmp (setjmp.h is kept out; LUAI_THROW and
   LUAI_TRY are defined on the command line), and io.tmpfile() returns nil. */
#include <stdio.h>
#define _SETJMP_H
#define tmpfile() ((FILE *)0)
