// wasi_thread_start(tid, arg) for the samples that spawn threads without a threaded libc:
// it switches to the thread's own stack, whose top is the first word `arg` points to, then
// calls `void thread_main(int32_t tid, void *arg)`, which the including file defines.
// wasi-threads calls it on each spawned thread; the samples' threads call WASI directly.
__asm__(
    ".globaltype __stack_pointer, i32\n"
    ".functype thread_main (i32, i32) -> ()\n"
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
    "  call thread_main\n"
    "  end_function\n");
