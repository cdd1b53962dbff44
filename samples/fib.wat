;; fib.wat: naive recursive Fibonacci, fib(25), printed as "fib(25) = 75025\n".
;;
;; Known by construction:
;;   $fib is called exactly 2*F(26) - 1 = 242785 times (once from $_start,
;;   the rest from itself); $utoa once; $print once; fd_write once.
;;   Exit code 0 (_start returns normally).
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))

  (memory (export "memory") 1)

  ;; Memory layout:
  ;;   0..8    iovec {buf, len} handed to fd_write
  ;;   8..12   nwritten (written by fd_write, ignored)
  ;;   16..26  "fib(25) = " (10 bytes), digits and "\n" are appended at 26
  (data (i32.const 16) "fib(25) = ")

  ;; fib(n) = n < 2 ? n : fib(n-1) + fib(n-2)
  (func $fib (param $n i32) (result i32)
    (if (result i32) (i32.lt_u (local.get $n) (i32.const 2))
      (then (local.get $n))
      (else
        (i32.add
          (call $fib (i32.sub (local.get $n) (i32.const 1)))
          (call $fib (i32.sub (local.get $n) (i32.const 2)))))))

  ;; Writes the decimal digits of $v at $dst; returns how many bytes were written.
  (func $utoa (param $v i32) (param $dst i32) (result i32)
    (local $len i32) (local $t i32) (local $p i32)
    ;; count the digits (at least one)
    (local.set $t (local.get $v))
    (local.set $len (i32.const 1))
    (block $counted
      (loop $count
        (br_if $counted (i32.lt_u (local.get $t) (i32.const 10)))
        (local.set $t (i32.div_u (local.get $t) (i32.const 10)))
        (local.set $len (i32.add (local.get $len) (i32.const 1)))
        (br $count)))
    ;; store them from the last one backwards
    (local.set $p (i32.add (local.get $dst) (local.get $len)))
    (loop $digit
      (local.set $p (i32.sub (local.get $p) (i32.const 1)))
      (i32.store8 (local.get $p)
        (i32.add (i32.const 48) (i32.rem_u (local.get $v) (i32.const 10))))
      (local.set $v (i32.div_u (local.get $v) (i32.const 10)))
      (br_if $digit (i32.ne (local.get $p) (local.get $dst))))
    (local.get $len))

  ;; Writes $len bytes at $ptr to stdout (fd 1) with a single fd_write.
  (func $print (param $ptr i32) (param $len i32)
    (i32.store (i32.const 0) (local.get $ptr))
    (i32.store (i32.const 4) (local.get $len))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))

  (func $_start (export "_start")
    (local $len i32)
    ;; digits go right after the 10-byte prefix at 16
    (local.set $len (call $utoa (call $fib (i32.const 25)) (i32.const 26)))
    ;; newline after the digits
    (i32.store8 (i32.add (i32.const 26) (local.get $len)) (i32.const 10))
    ;; prefix + digits + newline
    (call $print (i32.const 16) (i32.add (local.get $len) (i32.const 11))))
)
