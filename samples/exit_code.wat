;; exit_code.wat: prints one line, then calls proc_exit(3) two calls deep.
;;
;; Call chain: $_start -> $a -> $b -> proc_exit(3).
;; Known by construction:
;;   stdout is "exiting with code 3\n" (one fd_write, from $_start);
;;   $a, $b and proc_exit are each called exactly once; exit code 3.
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit"
    (func $proc_exit (param i32)))

  (memory (export "memory") 1)

  ;; 0..8 iovec {16, 20}, 8..12 nwritten, 16..36 the message
  (data (i32.const 0) "\10\00\00\00\14\00\00\00")
  (data (i32.const 16) "exiting with code 3\n")

  (func $b (param $code i32)
    (call $proc_exit (local.get $code))
    ;; proc_exit does not return
    (unreachable))

  (func $a (param $code i32)
    (call $b (local.get $code)))

  (func $_start (export "_start")
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
    (call $a (i32.const 3)))
)
