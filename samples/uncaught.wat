;; uncaught.wat: an exception that no handler catches.
;; Uses the exception-handling proposal (throw); needs
;; `wasmtime run -W exceptions=y`.
;;
;; $_start prints "uncaught: throwing 5 deep\n", then calls $r(1); $r(d)
;; calls $r(d + 1) until d = 5, which throws tag $e (payload 5). There is no
;; try_table anywhere, so the exception unwinds $r(5), ..., $r(1) and
;; $_start and leaves the module: the wasmtime CLI reports it as an error
;; ("Error: failed to run main module ..." with "Caused by: ... thrown Wasm
;; exception") and exits with code 1, not 134 as after a trap.
;;
;; Calls known by construction:
;;   $r 5 (1 from $_start, 4 from $r), fd_write 1 (from $_start).
;; Edges: $_start -> $r 1, $r -> $r 4, $_start -> fd_write 1.
;; No $r activation returns, and neither does $_start.
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))

  (tag $e (param i32))

  (memory (export "memory") 1)

  ;; 0..8 iovec {16, 26}, 8..12 nwritten, 16..42 the message
  (data (i32.const 0) "\10\00\00\00\1a\00\00\00")
  (data (i32.const 16) "uncaught: throwing 5 deep\n")

  (func $r (param $d i32)
    (if (i32.eq (local.get $d) (i32.const 5))
      (then (throw $e (local.get $d))))
    (call $r (i32.add (local.get $d) (i32.const 1))))

  (func $_start (export "_start")
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
    (call $r (i32.const 1)))
)
