;; trap.wat: prints one line, then traps with `unreachable` three calls deep.
;;
;; Call chain: $_start -> $outer -> $middle -> $inner -> unreachable.
;; Known by construction:
;;   stdout is "about to trap\n" (one fd_write, from $_start);
;;   $outer, $middle and $inner are each entered exactly once, none returns;
;;   the run ends in a trap (wasm `unreachable`), not a normal exit.
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))

  (memory (export "memory") 1)

  ;; 0..8 iovec {16, 14}, 8..12 nwritten, 16..30 the message
  (data (i32.const 0) "\10\00\00\00\0e\00\00\00")
  (data (i32.const 16) "about to trap\n")

  (func $inner
    (unreachable))

  (func $middle
    (call $inner))

  (func $outer
    (call $middle))

  (func $_start (export "_start")
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
    (call $outer))
)
