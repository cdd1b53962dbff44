/* POSIX threads over wasi-threads (see wasi_pthread.c): included first in every source of
   a threaded program (-include wasi_pthread.h), it sends the calls to the pthread
   functions and to the allocator to wasi_pthread.c's, instead of the single-threaded
   libc's. */
#ifndef WASI_PTHREAD_H
#define WASI_PTHREAD_H

#include <stddef.h>
#include <stdlib.h>

#define pthread_create wasi_pthread_create
#define pthread_join wasi_pthread_join
#define pthread_mutex_init wasi_pthread_mutex_init
#define pthread_mutex_destroy wasi_pthread_mutex_destroy
#define pthread_mutex_lock wasi_pthread_mutex_lock
#define pthread_mutex_unlock wasi_pthread_mutex_unlock
#define pthread_cond_init wasi_pthread_cond_init
#define pthread_cond_destroy wasi_pthread_cond_destroy
#define pthread_cond_wait wasi_pthread_cond_wait
#define pthread_cond_signal wasi_pthread_cond_signal
#define pthread_cond_broadcast wasi_pthread_cond_broadcast
#include <pthread.h>

void *wasi_pthread_malloc(size_t n);
void wasi_pthread_free(void *p);
void *wasi_pthread_calloc(size_t n, size_t size);
void *wasi_pthread_realloc(void *p, size_t n);
#define malloc(n) wasi_pthread_malloc(n)
#define free(p) wasi_pthread_free(p)
#define calloc(n, size) wasi_pthread_calloc(n, size)
#define realloc(p, n) wasi_pthread_realloc(p, n)

#endif
