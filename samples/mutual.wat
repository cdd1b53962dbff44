;; mutual.wat: mutual recursion, $even(n) and $odd(n), down to 0.
;;
;; $even(n) = n == 0 ? 1 : $odd(n - 1);  $odd(n) = n == 0 ? 0 : $even(n - 1)
;; (ordinary calls, not tail calls). $_start calls $even(20) 3 times and
;; prints "mutual: even(20) 3 times, sum=3\n" (each call returns 1).
;; Exit code 0.
;;
;; Calls known by construction. One $even(20) runs $even at n = 20, 18, ...,
;; 0 (11 activations) and $odd at n = 19, 17, ..., 1 (10 activations); the
;; deepest stack is 21 frames of $even/$odd under $_start.
;;   $even 33 (3 from $_start, 30 from $odd), $odd 30 (all from $even),
;;   fd_write 1 (from $_start).
;; Edges: $_start -> $even 3, $even -> $odd 30, $odd -> $even 30,
;;        $_start -> fd_write 1.
;; Neither function calls itself directly, but each is recursive through
;; the other: each outermost activation of $even is one of the 3 called by
;; $_start, and $odd's outermost activations are the 3 $odd(19).
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))

  (memory (export "memory") 1)

  ;; Memory layout:
  ;;   0..8    iovec {buf = 16, len = 32} handed to fd_write
  ;;   8..12   nwritten (written by fd_write, ignored)
  ;;   16..48  "mutual: even(20) 3 times, sum=?\n", the digit at 46
  (data (i32.const 0) "\10\00\00\00\20\00\00\00")
  (data (i32.const 16) "mutual: even(20) 3 times, sum=?\n")

  (func $even (param $n i32) (result i32)
    (if (result i32) (i32.eqz (local.get $n))
      (then (i32.const 1))
      (else (call $odd (i32.sub (local.get $n) (i32.const 1))))))

  (func $odd (param $n i32) (result i32)
    (if (result i32) (i32.eqz (local.get $n))
      (then (i32.const 0))
      (else (call $even (i32.sub (local.get $n) (i32.const 1))))))

  (func $_start (export "_start")
    (local $sum i32)
    (local.set $sum (call $even (i32.const 20)))
    (local.set $sum (i32.add (local.get $sum) (call $even (i32.const 20))))
    (local.set $sum (i32.add (local.get $sum) (call $even (i32.const 20))))
    ;; one digit: the sum is 0..3
    (i32.store8 (i32.const 46) (i32.add (i32.const 48) (local.get $sum)))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))
)
