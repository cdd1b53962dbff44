;; gprof_trap.wat: the case where gprof's call-graph averaging is wrong.
;;
;; $_start calls $b once and $c once. $b calls $d 40 times with n = 3*K,
;; $c calls $d 40 times with n = K (K = 300000). $d(n) runs a loop of exactly
;; n iterations whose body is a fixed, branch-free instruction sequence.
;; gprof splits $d's time between its callers by call count (40 : 40), so it
;; charges $b and $c the same; the truth is that $b -> $d costs exactly 3x
;; what $c -> $d costs, in executed instructions, and about 3x in time.
;; The result is printed as "gprof_trap: checksum=80008ea8\n".
;;
;; Calls known by construction:
;;   $b 1, $c 1, $hex8 1, fd_write 1 (all from $_start);
;;   $d 80: 40 from $b (n = 900000), 40 from $c (n = 300000).
;;
;; Executed instructions known by construction. "ops" counts every executed
;; operator except block, loop, end, else, nop, drop, return and unreachable
;; (this module has no block, else, nop, return or unreachable; its only
;; structural operators are `loop` and `end`, and its only `drop` is in
;; $_start). Calls count in the caller. That is wasmtime's default fuel cost
;; per operator; wasmtime also charges 1 fuel on entry to every defined
;; function, so fuel consumed = ops + activations (checked with the wasmtime
;; Python API: Store.get_fuel() after each function, run alone).
;;
;;   $d(n)   ops = 17n + 1   17 per iteration (10 of arithmetic, 7 of loop
;;                           control ending in br_if), plus the final
;;                           local.get; n >= 1. 1 loop entry; 2 ends fall
;;                           through (the loop's, the function's).
;;   $b      self 481 = 40 iterations x 12 (5 to call $d and add, 7 of loop
;;           control) + the final local.get;
;;           + 40 x $d(900000) = 40 x 15300001 = 612000040 -> incl. 612000521
;;   $c      self 481 (same code as $b, constant K instead of 3K);
;;           + 40 x $d(300000) = 40 x 5100001 = 204000040 -> incl. 204000521
;;   $hex8   146 = 2 + 8 iterations x 18 (no dependence on the value)
;;   $_start self 10 (3 calls, i32.add, 5 x i32.const, call $fd_write; the
;;           drop is free) -> incl. 816001198 (fuel 816001282 with 84
;;           activations: $_start, $b, $c, $hex8, 80 x $d)
;;   $d      self in total 816000080 = 612000040 + 204000040
;;
;; So the edge $b -> $d carries 612000040 ops and $c -> $d 204000040: exactly
;; 3 x 204000040 - 80 (the per-call final local.get is not tripled), and the
;; loop work alone (40 x 17 x n) is exactly 3x: 612000000 vs 204000000.
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))

  (memory (export "memory") 1)

  ;; Memory layout:
  ;;   0..8    iovec {buf = 16, len = 30} handed to fd_write
  ;;   8..12   nwritten (written by fd_write, ignored)
  ;;   16..46  "gprof_trap: checksum=" (21 bytes), 8 hex digits at 37, "\n" at 45
  ;;   64..80  the hex digit table
  (data (i32.const 0) "\10\00\00\00\1e\00\00\00")
  (data (i32.const 16) "gprof_trap: checksum=........\n")
  (data (i32.const 64) "0123456789abcdef")

  ;; n iterations (n >= 1) of a fixed 17-operator body; returns the hash.
  (func $d (param $n i32) (result i32)
    (local $i i32) (local $acc i32)
    (loop $iter
      ;; acc = (acc * 31 + i) ^ (acc >> 3)                 10 ops
      local.get $acc
      i32.const 31
      i32.mul
      local.get $i
      i32.add
      local.get $acc
      i32.const 3
      i32.shr_u
      i32.xor
      local.set $acc
      ;; i = i + 1; repeat while i != n                    7 ops
      local.get $i
      i32.const 1
      i32.add
      local.tee $i
      local.get $n
      i32.ne
      br_if $iter)
    local.get $acc)

  ;; 40 calls of $d(3K), K = 300000.
  (func $b (result i32)
    (local $k i32) (local $sum i32)
    (loop $calls
      ;; sum = sum + d(900000)                             5 ops
      local.get $sum
      i32.const 900000
      call $d
      i32.add
      local.set $sum
      ;; k = k + 1; repeat while k != 40                   7 ops
      local.get $k
      i32.const 1
      i32.add
      local.tee $k
      i32.const 40
      i32.ne
      br_if $calls)
    local.get $sum)

  ;; 40 calls of $d(K), K = 300000. Same code as $b but for the constant.
  (func $c (result i32)
    (local $k i32) (local $sum i32)
    (loop $calls
      local.get $sum
      i32.const 300000
      call $d
      i32.add
      local.set $sum
      local.get $k
      i32.const 1
      i32.add
      local.tee $k
      i32.const 40
      i32.ne
      br_if $calls)
    local.get $sum)

  ;; Writes $v as 8 lowercase hex digits at $dst (exactly 8 iterations).
  (func $hex8 (param $v i32) (param $dst i32)
    (local $i i32)
    i32.const 8
    local.set $i
    (loop $digit
      ;; i = i - 1                                         4 ops
      local.get $i
      i32.const 1
      i32.sub
      local.set $i
      ;; mem[dst + i] = table[v & 15]                      8 ops
      local.get $dst
      local.get $i
      i32.add
      local.get $v
      i32.const 15
      i32.and
      i32.load8_u offset=64
      i32.store8
      ;; v = v >> 4                                        4 ops
      local.get $v
      i32.const 4
      i32.shr_u
      local.set $v
      ;; repeat while i != 0                               2 ops
      local.get $i
      br_if $digit))

  (func $_start (export "_start")
    call $b
    call $c
    i32.add
    i32.const 37
    call $hex8
    i32.const 1
    i32.const 0
    i32.const 1
    i32.const 8
    call $fd_write
    drop)
)
