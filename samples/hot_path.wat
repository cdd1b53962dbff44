;; hot_path.wat: one hot path, a cold one beside it, every level called many times.
;;
;; $_start calls $outer 100 times; $outer calls $middle 4 times and $cold once; $middle
;; calls $hot 5 times. $hot(n) and $cold(n) are loops of exactly n iterations of the same
;; body; $hot runs with n = 100000 and $cold with n = 5000, so nearly all the time is in
;; $hot under $middle under $outer, and $cold's whole share is about 0.25%.
;;
;; Known by construction: $_start 1; $outer 100; $middle 400; $cold 100; $hot 2000;
;; fd_write 1. The inclusive time of $middle is 5 of $hot's and a few instructions more;
;; of $outer, 4 of $middle's and one $cold.
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))

  (memory (export "memory") 1)
  ;; 0..8 iovec -> "hot_path: checksum=XXXXXXXX\n" at 16 (28 bytes)
  (data (i32.const 0) "\10\00\00\00\1c\00\00\00")
  (data (i32.const 16) "hot_path: checksum=00000000\n")

  (global $x (mut i32) (i32.const 1))

  ;; n iterations of a linear congruential step.
  (func $spin (param $n i32)
    (loop $again
      (global.set $x
        (i32.add (i32.mul (global.get $x) (i32.const 1103515245)) (i32.const 12345)))
      (br_if $again (local.tee $n (i32.sub (local.get $n) (i32.const 1))))))

  (func $hot (call $spin (i32.const 100000)))
  (func $cold (call $spin (i32.const 5000)))

  (func $middle
    (call $hot) (call $hot) (call $hot) (call $hot) (call $hot))

  (func $outer
    (call $middle) (call $middle) (call $middle) (call $middle)
    (call $cold))

  ;; The checksum as 8 hex digits at 35.
  (func $hex (param $v i32)
    (local $i i32) (local $d i32)
    (local.set $i (i32.const 8))
    (loop $digit
      (local.set $i (i32.sub (local.get $i) (i32.const 1)))
      (local.set $d (i32.and (local.get $v) (i32.const 15)))
      (i32.store8 (i32.add (i32.const 35) (local.get $i))
        (i32.add (local.get $d)
          (select (i32.const 48) (i32.const 87) (i32.lt_u (local.get $d) (i32.const 10)))))
      (local.set $v (i32.shr_u (local.get $v) (i32.const 4)))
      (br_if $digit (local.get $i))))

  (func $_start (export "_start")
    (local $i i32)
    (local.set $i (i32.const 100))
    (loop $again
      (call $outer)
      (br_if $again (local.tee $i (i32.sub (local.get $i) (i32.const 1)))))
    (call $hex (global.get $x))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))
)
