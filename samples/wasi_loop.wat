;; wasi_loop.wat: prints "tick\n" 100 times, one fd_write per line.
;;
;; Known by construction:
;;   $_start calls $run once; $run calls $emit exactly 100 times;
;;   $emit calls the import fd_write exactly 100 times (once per call).
;;   Exit code 0 (_start returns normally).
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))

  (memory (export "memory") 1)

  ;; 0..8 iovec, 8..12 nwritten, 16..21 "tick\n"
  (data (i32.const 0) "\10\00\00\00\05\00\00\00")
  (data (i32.const 16) "tick\n")

  ;; One line to stdout: exactly one fd_write.
  (func $emit
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))

  ;; Calls $emit $n times.
  (func $run (param $n i32)
    (block $done
      (loop $again
        (br_if $done (i32.eqz (local.get $n)))
        (call $emit)
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (br $again))))

  (func $_start (export "_start")
    (call $run (i32.const 100)))
)
