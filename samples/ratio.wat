;; ratio.wat: two leaf functions whose self times are in ratio 3:1.
;;
;; $heavy and $light have the same code except for the trip count of their
;; loop: 15000000 for $heavy, 5000000 for $light (3:1). The loop body is a
;; fixed, branch-free 17-operator sequence that depends on the previous
;; iteration, so it cannot be folded away or vectorized. $_start calls them
;; alternately, $heavy, $light, $heavy, $light, $heavy, $light, threading the
;; hash through, and prints it as "ratio: checksum=c6efcf1c\n".
;; Natively (wasmtime, one core) the whole run takes about 0.1-0.2 s, so the
;; self times of $heavy and $light can be compared: about 3:1.
;;
;; Calls known by construction:
;;   $heavy 3, $light 3, $hex8 1, fd_write 1 (all from $_start).
;;
;; Executed operators (counted as in gprof_trap.wat: every operator but
;; block, loop, end, else, nop, drop, return and unreachable; wasmtime fuel =
;; ops + 1 per activation of a defined function):
;;   $heavy  17 x 15000000 + 1 = 255000001 per call, 765000003 in total
;;   $light  17 x  5000000 + 1 =  85000001 per call, 255000003 in total
;;   $hex8   146
;;   $_start self 14 (i32.const 0, 6 calls, i32.const 32, call $hex8,
;;           4 x i32.const, call $fd_write; the drop is free)
;;           -> incl. 1020000166 (fuel 1020000174: 8 activations)
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))

  (memory (export "memory") 1)

  ;; Memory layout:
  ;;   0..8    iovec {buf = 16, len = 25} handed to fd_write
  ;;   8..12   nwritten (written by fd_write, ignored)
  ;;   16..41  "ratio: checksum=" (16 bytes), 8 hex digits at 32, "\n" at 40
  ;;   64..80  the hex digit table
  (data (i32.const 0) "\10\00\00\00\19\00\00\00")
  (data (i32.const 16) "ratio: checksum=........\n")
  (data (i32.const 64) "0123456789abcdef")

  ;; 15000000 iterations of the shared 17-operator body.
  (func $heavy (param $acc i32) (result i32)
    (local $i i32)
    (loop $iter
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
      local.get $i
      i32.const 1
      i32.add
      local.tee $i
      i32.const 15000000
      i32.ne
      br_if $iter)
    local.get $acc)

  ;; 5000000 iterations of the same body.
  (func $light (param $acc i32) (result i32)
    (local $i i32)
    (loop $iter
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
      local.get $i
      i32.const 1
      i32.add
      local.tee $i
      i32.const 5000000
      i32.ne
      br_if $iter)
    local.get $acc)

  ;; Writes $v as 8 lowercase hex digits at $dst (exactly 8 iterations).
  (func $hex8 (param $v i32) (param $dst i32)
    (local $i i32)
    i32.const 8
    local.set $i
    (loop $digit
      local.get $i
      i32.const 1
      i32.sub
      local.set $i
      local.get $dst
      local.get $i
      i32.add
      local.get $v
      i32.const 15
      i32.and
      i32.load8_u offset=64
      i32.store8
      local.get $v
      i32.const 4
      i32.shr_u
      local.set $v
      local.get $i
      br_if $digit))

  (func $_start (export "_start")
    i32.const 0
    call $heavy
    call $light
    call $heavy
    call $light
    call $heavy
    call $light
    i32.const 32
    call $hex8
    i32.const 1
    i32.const 0
    i32.const 1
    i32.const 8
    call $fd_write
    drop)
)
