/* POSIX threads over wasi-threads, for C programs built with zig's wasm32-wasi libc, which
   has only the single-threaded stubs: pthread_create/join, mutexes and condition variables
   on wasm atomics (memory.atomic.wait32/notify), enough for zstd's worker pool. The
   libc's allocator is not thread-safe, so malloc and friends are serialized by one lock.
   wasi_pthread.h, included first in every source, sends the program's calls here (the
   functions are defined as pthread_* here, which the header renames wasi_pthread_*).

   Build with: -mcpu=generic+atomics+bulk_memory -include wasi_pthread.h
   -Wl,--shared-memory -Wl,--import-memory -Wl,--export-memory -Wl,--max-memory=N. */
#include "wasi_pthread.h"
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define THREAD_STACK (512 * 1024)

__attribute__((import_module("wasi"), import_name("thread-spawn")))
int32_t wasi_pthread_spawn(void *start_arg);

/* What wasi_thread_start gets: the stack to switch to comes first. */
struct wasi_pthread {
    uint32_t stack_top;
    void *(*start)(void *);
    void *arg;
    void *result;
    int32_t done;
    void *stack;
};

/* A lock word: 0 free, 1 held, 2 held with waiters (the classic futex mutex). */
static void word_lock(int32_t *w) {
    int32_t c = 0;
    if (__atomic_compare_exchange_n(w, &c, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return;
    if (c != 2) c = __atomic_exchange_n(w, 2, __ATOMIC_ACQUIRE);
    while (c != 0) {
        __builtin_wasm_memory_atomic_wait32(w, 2, -1);
        c = __atomic_exchange_n(w, 2, __ATOMIC_ACQUIRE);
    }
}

/* Takes the lock as a thread that may have waiters behind it (after a condition wait). */
static void word_lock_contended(int32_t *w) {
    while (__atomic_exchange_n(w, 2, __ATOMIC_ACQUIRE) != 0)
        __builtin_wasm_memory_atomic_wait32(w, 2, -1);
}

static void word_unlock(int32_t *w) {
    if (__atomic_exchange_n(w, 0, __ATOMIC_RELEASE) == 2) __builtin_wasm_memory_atomic_notify(w, 1);
}

/* Here the allocator is the libc's (the header, included first, renamed it). */
#undef malloc
#undef free
#undef calloc
#undef realloc

/* The allocator's lock. */
static int32_t heap_lock;

void *wasi_pthread_malloc(size_t n) {
    word_lock(&heap_lock);
    void *p = malloc(n);
    word_unlock(&heap_lock);
    return p;
}

void wasi_pthread_free(void *p) {
    word_lock(&heap_lock);
    free(p);
    word_unlock(&heap_lock);
}

void *wasi_pthread_calloc(size_t n, size_t size) {
    word_lock(&heap_lock);
    void *p = calloc(n, size);
    word_unlock(&heap_lock);
    return p;
}

void *wasi_pthread_realloc(void *p, size_t n) {
    word_lock(&heap_lock);
    void *q = realloc(p, n);
    word_unlock(&heap_lock);
    return q;
}

int pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *attr) {
    (void)attr;
    memset(m, 0, sizeof *m);
    return 0;
}

int pthread_mutex_destroy(pthread_mutex_t *m) {
    (void)m;
    return 0;
}

int pthread_mutex_lock(pthread_mutex_t *m) {
    word_lock((int32_t *)m);
    return 0;
}

int pthread_mutex_unlock(pthread_mutex_t *m) {
    word_unlock((int32_t *)m);
    return 0;
}

/* A condition variable is a sequence number, bumped by every signal. */
int pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *attr) {
    (void)attr;
    memset(c, 0, sizeof *c);
    return 0;
}

int pthread_cond_destroy(pthread_cond_t *c) {
    (void)c;
    return 0;
}

int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m) {
    int32_t *seq = (int32_t *)c;
    int32_t seen = __atomic_load_n(seq, __ATOMIC_ACQUIRE);
    word_unlock((int32_t *)m);
    __builtin_wasm_memory_atomic_wait32(seq, seen, -1);
    word_lock_contended((int32_t *)m);
    return 0;
}

int pthread_cond_signal(pthread_cond_t *c) {
    __atomic_fetch_add((int32_t *)c, 1, __ATOMIC_RELEASE);
    __builtin_wasm_memory_atomic_notify((int32_t *)c, 1);
    return 0;
}

int pthread_cond_broadcast(pthread_cond_t *c) {
    __atomic_fetch_add((int32_t *)c, 1, __ATOMIC_RELEASE);
    __builtin_wasm_memory_atomic_notify((int32_t *)c, UINT32_MAX);
    return 0;
}

void __wasm_init_tls(void *);

/* Called by wasi_thread_start on the thread's own stack. */
__attribute__((used)) void wasi_pthread_main(int32_t tid, struct wasi_pthread *t) {
    (void)tid;
    size_t tls = __builtin_wasm_tls_size();
    if (tls > 0) {
        void *block = wasi_pthread_malloc(tls + __builtin_wasm_tls_align());
        uintptr_t align = __builtin_wasm_tls_align();
        __wasm_init_tls((void *)(((uintptr_t)block + align - 1) & ~(align - 1)));
    }
    t->result = t->start(t->arg);
    __atomic_store_n(&t->done, 1, __ATOMIC_RELEASE);
    __builtin_wasm_memory_atomic_notify(&t->done, UINT32_MAX);
}

/* wasi_thread_start(tid, arg): switch to the thread's stack, then wasi_pthread_main. */
__asm__(
    ".globaltype __stack_pointer, i32\n"
    ".functype wasi_pthread_main (i32, i32) -> ()\n"
    ".export_name wasi_thread_start, wasi_thread_start\n"
    ".globl wasi_thread_start\n"
    ".type wasi_thread_start,@function\n"
    "wasi_thread_start:\n"
    "  .functype wasi_thread_start (i32, i32) -> ()\n"
    "  local.get 1\n"
    "  i32.load 0\n"
    "  global.set __stack_pointer\n"
    "  local.get 0\n"
    "  local.get 1\n"
    "  call wasi_pthread_main\n"
    "  end_function\n");

int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *),
                   void *arg) {
    (void)attr;
    struct wasi_pthread *t = wasi_pthread_calloc(1, sizeof *t);
    if (!t) return EAGAIN;
    t->stack = wasi_pthread_malloc(THREAD_STACK);
    if (!t->stack) {
        wasi_pthread_free(t);
        return EAGAIN;
    }
    t->stack_top = ((uint32_t)(uintptr_t)t->stack + THREAD_STACK) & ~15u;
    t->start = start;
    t->arg = arg;
    if (wasi_pthread_spawn(t) < 0) {
        wasi_pthread_free(t->stack);
        wasi_pthread_free(t);
        return EAGAIN;
    }
    *thread = (pthread_t)t;
    return 0;
}

int pthread_join(pthread_t thread, void **result) {
    struct wasi_pthread *t = (struct wasi_pthread *)thread;
    while (!__atomic_load_n(&t->done, __ATOMIC_ACQUIRE))
        __builtin_wasm_memory_atomic_wait32(&t->done, 0, -1);
    if (result) *result = t->result;
    wasi_pthread_free(t->stack);
    wasi_pthread_free(t);
    return 0;
}
