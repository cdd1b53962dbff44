/* A command-line driver for Fabrice Bellard's QuickJS on WASI: `qjs_bellard FILE.js` runs
 * the file as a global script with `print` and `console.log`, then the promise jobs it left;
 * an uncaught exception is printed with its stack and the exit code is 1. (QuickJS's own
 * qjs needs quickjs-libc, which WASI's libc cannot build.) */
#include <stdio.h>
#include <stdlib.h>

#include "quickjs.h"

/* print(...) and console.log(...): the arguments as strings, spaced, then a newline. */
static JSValue print(JSContext *ctx, JSValueConst this_val, int argc, JSValueConst *argv)
{
    (void)this_val;
    for (int i = 0; i < argc; i++) {
        size_t len;
        const char *text = JS_ToCStringLen(ctx, &len, argv[i]);
        if (text == NULL)
            return JS_EXCEPTION;
        if (i > 0)
            putchar(' ');
        fwrite(text, 1, len, stdout);
        JS_FreeCString(ctx, text);
    }
    putchar('\n');
    return JS_UNDEFINED;
}

/* Prints the pending exception of `ctx` and its stack to stderr. */
static void report(JSContext *ctx)
{
    JSValue error = JS_GetException(ctx);
    const char *text = JS_ToCString(ctx, error);
    fprintf(stderr, "Uncaught %s\n", text ? text : "(unprintable)");
    JS_FreeCString(ctx, text);
    if (JS_IsObject(error)) {
        JSValue stack = JS_GetPropertyStr(ctx, error, "stack");
        const char *lines = JS_IsUndefined(stack) ? NULL : JS_ToCString(ctx, stack);
        if (lines != NULL)
            fputs(lines, stderr);
        JS_FreeCString(ctx, lines);
        JS_FreeValue(ctx, stack);
    }
    JS_FreeValue(ctx, error);
}

/* The whole file `path`, NUL-terminated, its length in `len`; NULL if it cannot be read. */
static char *read_file(const char *path, size_t *len)
{
    FILE *file = fopen(path, "rb");
    if (file == NULL)
        return NULL;
    size_t size = 0, cap = 1 << 16;
    char *text = malloc(cap);
    size_t got;
    while (text != NULL && (got = fread(text + size, 1, cap - size - 1, file)) > 0) {
        size += got;
        if (cap - size - 1 == 0)
            text = realloc(text, cap *= 2);
    }
    fclose(file);
    if (text != NULL)
        text[size] = '\0';
    *len = size;
    return text;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE.js\n", argv[0]);
        return 2;
    }
    size_t len;
    char *source = read_file(argv[1], &len);
    if (source == NULL) {
        perror(argv[1]);
        return 2;
    }
    JSRuntime *rt = JS_NewRuntime();
    JSContext *ctx = JS_NewContext(rt);
    JSValue global = JS_GetGlobalObject(ctx);
    JS_SetPropertyStr(ctx, global, "print", JS_NewCFunction(ctx, print, "print", 1));
    JSValue console = JS_NewObject(ctx);
    JS_SetPropertyStr(ctx, console, "log", JS_NewCFunction(ctx, print, "log", 1));
    JS_SetPropertyStr(ctx, global, "console", console);
    JS_FreeValue(ctx, global);

    int status = 0;
    JSValue result = JS_Eval(ctx, source, len, argv[1], JS_EVAL_TYPE_GLOBAL);
    if (JS_IsException(result)) {
        report(ctx);
        status = 1;
    }
    JS_FreeValue(ctx, result);
    for (;;) {
        JSContext *job_ctx;
        int ran = JS_ExecutePendingJob(rt, &job_ctx);
        if (ran < 0) {
            report(job_ctx);
            status = 1;
        }
        if (ran <= 0)
            break;
    }
    JS_FreeContext(ctx);
    JS_FreeRuntime(rt);
    free(source);
    return status;
}
