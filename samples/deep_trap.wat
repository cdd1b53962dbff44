;; deep_trap.wat: recursion 50 frames deep, then a trap (`unreachable`).
;;
;; $_start prints "deep_trap: going 50 deep\n", then calls $down(1);
;; $down(d) calls $down(d + 1) until d = 50, which executes `unreachable`.
;; The run ends in a trap (the wasmtime CLI exits with 134), not a normal
;; exit; no $down activation returns.
;;
;; Calls known by construction:
;;   $down 50 (1 from $_start, 49 from $down), fd_write 1 (from $_start).
;; Edges: $_start -> $down 1, $down -> $down 49, $_start -> fd_write 1.
;; At the trap 51 frames are open: $_start and $down(1..50).
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))

  (memory (export "memory") 1)

  ;; 0..8 iovec {16, 25}, 8..12 nwritten, 16..41 the message
  (data (i32.const 0) "\10\00\00\00\19\00\00\00")
  (data (i32.const 16) "deep_trap: going 50 deep\n")

  (func $down (param $d i32)
    (if (i32.eq (local.get $d) (i32.const 50))
      (then (unreachable)))
    (call $down (i32.add (local.get $d) (i32.const 1))))

  (func $_start (export "_start")
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
    (call $down (i32.const 1)))
)
