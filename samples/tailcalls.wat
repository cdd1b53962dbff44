;; tailcalls.wat: tail calls (the tail-call proposal: return_call,
;; return_call_indirect). The wasmtime CLI (49) enables tail calls by
;; default (`-W tail-call=y` says so explicitly; with `-W tail-call=n` the
;; module fails to compile).
;;
;; Four patterns, all started from $_start:
;;   1. a chain: $_start calls $a (an ordinary call); $a `return_call`s $b,
;;      $b `return_call`s $c, and $c returns, straight to $_start, since the
;;      frames of $a and $b were replaced. Done 3 times.
;;   2. a tail-recursive countdown: $count(1000) `return_call`s
;;      $count(999), ..., $count(0) returns. Done once.
;;   3. an indirect tail call: $dispatch `return_call_indirect`s through
;;      table slot 0, which holds $leaf. Done twice.
;;   4. a tail call to an import: the line is written by $emit, which
;;      `return_call`s fd_write.
;; It prints "tailcalls: chain=3 count=1000 leaf=14\n": the sum of the three
;; chain results ($c returns 1), the countdown's total (+1 per step) and the
;; sum of the two $leaf results ($leaf(x) = x + 7, called with 0).
;;
;; Calls known by construction (one per activation; a tail call is a call):
;;   $a 3, $b 3, $c 3, $count 1001, $dispatch 2, $leaf 2, $utoa 3,
;;   $append 2, $emit 1 (the last three from $_start), fd_write 1 (from
;;   $emit).
;; Edges (caller -> callee, the function that executed the call
;; instruction):
;;   $_start -> $a        3  call
;;   $a      -> $b        3  return_call
;;   $b      -> $c        3  return_call
;;   $_start -> $count    1  call
;;   $count  -> $count 1000  return_call
;;   $_start -> $dispatch 2  call
;;   $dispatch -> $leaf   2  return_call_indirect
;;   $_start -> $utoa     3  call
;;   $_start -> $append   2  call
;;   $_start -> $emit     1  call
;;   $emit   -> fd_write  1  return_call (to an import)
;; At most 2 wasm frames are live at any time: $_start and one other.
;; Every activation ends by returning or by being replaced by a
;; tail call; nothing traps; exit code 0.
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))

  (type $unary (func (param i32) (result i32)))

  (memory (export "memory") 1)

  (table 1 1 funcref)
  (elem (i32.const 0) func $leaf)

  ;; Memory layout:
  ;;   0..8    iovec {buf = 16, len}, len set by $_start
  ;;   8..12   nwritten (written by fd_write, ignored)
  ;;   16..    the output line, built by $_start
  (data (i32.const 16) "tailcalls: chain=")

  (func $c (result i32)
    (i32.const 1))

  (func $b (result i32)
    (return_call $c))

  (func $a (result i32)
    (return_call $b))

  ;; count(n) = n == 0 ? acc : count(n - 1, acc + 1), as a tail call.
  (func $count (param $n i32) (param $acc i32) (result i32)
    (if (i32.eqz (local.get $n))
      (then (return (local.get $acc))))
    (return_call $count
      (i32.sub (local.get $n) (i32.const 1))
      (i32.add (local.get $acc) (i32.const 1))))

  (func $leaf (type $unary)
    (i32.add (local.get 0) (i32.const 7)))

  ;; Tail-calls table slot 0 ($leaf) with $x.
  (func $dispatch (param $x i32) (result i32)
    (return_call_indirect (type $unary) (local.get $x) (i32.const 0)))

  ;; Writes the decimal digits of $v at $at; returns the address after them.
  (func $utoa (param $v i32) (param $at i32) (result i32)
    (local $end i32) (local $t i32)
    ;; find the end: one byte per digit
    (local.set $end (local.get $at))
    (local.set $t (local.get $v))
    (loop $more
      (local.set $end (i32.add (local.get $end) (i32.const 1)))
      (local.set $t (i32.div_u (local.get $t) (i32.const 10)))
      (br_if $more (local.get $t)))
    ;; fill the digits in from the end
    (local.set $t (local.get $end))
    (loop $digit
      (local.set $t (i32.sub (local.get $t) (i32.const 1)))
      (i32.store8 (local.get $t)
        (i32.add (i32.const 48) (i32.rem_u (local.get $v) (i32.const 10))))
      (local.set $v (i32.div_u (local.get $v) (i32.const 10)))
      (br_if $digit (i32.gt_u (local.get $t) (local.get $at))))
    (local.get $end))

  ;; Copies $len bytes from $src to $dst; returns $dst + $len.
  (func $append (param $dst i32) (param $src i32) (param $len i32) (result i32)
    (memory.copy (local.get $dst) (local.get $src) (local.get $len))
    (i32.add (local.get $dst) (local.get $len)))

  ;; Writes the iovec at 0 to stdout: a tail call to the import.
  (func $emit (result i32)
    (return_call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))

  (func $_start (export "_start")
    (local $p i32) (local $chain i32) (local $leafs i32)
    (local.set $chain
      (i32.add (call $a) (i32.add (call $a) (call $a))))
    (local.set $leafs
      (i32.add (call $dispatch (i32.const 0)) (call $dispatch (i32.const 0))))
    ;; "tailcalls: chain=" is already at 16..33
    (local.set $p (call $utoa (local.get $chain) (i32.const 33)))
    (local.set $p (call $append (local.get $p) (i32.const 1024) (i32.const 7)))
    (local.set $p (call $utoa (call $count (i32.const 1000) (i32.const 0))
                              (local.get $p)))
    (local.set $p (call $append (local.get $p) (i32.const 1031) (i32.const 6)))
    (local.set $p (call $utoa (local.get $leafs) (local.get $p)))
    (i32.store8 (local.get $p) (i32.const 10))
    ;; iovec {16, p + 1 - 16}
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.sub (local.get $p) (i32.const 15)))
    (drop (call $emit)))

  (data (i32.const 1024) " count= leaf=")
)
