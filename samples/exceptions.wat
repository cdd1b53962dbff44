;; exceptions.wat: an exception thrown 10 frames deep, caught 6 frames up.
;; Uses the exception-handling proposal in its final form (try_table, throw,
;; throw_ref, exnref). Needs `wasmtime run -W exceptions=y`.
;;
;; $rec(depth) calls $rec(depth + 1) until depth 10, where it calls
;; $thrower, which throws tag $e with payload 10. Two activations of $rec
;; have a handler around their recursive call:
;;   depth 7: `try_table (catch_all_ref ...)`: it counts a cleanup, then
;;            rethrows the same exception with `throw_ref`;
;;   depth 4: `try_table (catch $e ...)`: it catches the exception and
;;            returns 100 + payload = 110 normally.
;; So $thrower and the $rec frames of depths 10, 9, 8 are unwound to the
;; depth-7 frame; after its rethrow, the frames of depths 7, 6, 5 are
;; unwound to the depth-4 frame, which returns. Depths 3, 2, 1 then return
;; normally, each adding 1: $rec(1) = 113.
;; $_start runs $rec(1) 3 times and prints
;; "exceptions: caught=3 cleanups=3 result=339\n" (the sum of the three
;; results). Exit code 0.
;;
;; Calls known by construction, per run of $rec(1) and in total (3 runs):
;;   $rec      10 per run (depths 1..10), 30 in total: 3 from $_start,
;;             27 from $rec (9 per run)
;;   $thrower   1 per run, 3 in total, all from $rec (depth 10)
;;   $utoa 3, fd_write 1 (from $_start)
;; Edges: $_start -> $rec 3, $rec -> $rec 27, $rec -> $thrower 3,
;;        $_start -> $utoa 3, $_start -> fd_write 1.
;; How each activation ends, per run:
;;   $thrower: unwound by the throw (does not return);
;;   $rec depths 10, 9, 8, 7, 6, 5: unwound (do not return; depth 7 runs its
;;     handler and rethrows, and is unwound by its own throw_ref);
;;   $rec depth 4: catches (its handler runs) and returns normally;
;;   $rec depths 3, 2, 1: return normally.
;; Over the whole program: 21 activations unwound (18 of $rec, 3 of
;; $thrower), 12 of $rec return, plus $_start, $utoa and fd_write.
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))

  (tag $e (param i32))

  (memory (export "memory") 1)

  (global $caught (mut i32) (i32.const 0))
  (global $cleanups (mut i32) (i32.const 0))

  ;; Memory layout:
  ;;   0..8    iovec {buf = 16, len}, len set by $_start
  ;;   8..12   nwritten (written by fd_write, ignored)
  ;;   16..    the output line, built by $_start
  ;;   1024..  the text pieces
  (data (i32.const 16) "exceptions: caught=")
  (data (i32.const 1024) " cleanups= result=")

  ;; Throws $e with the depth as payload.
  (func $thrower (param $depth i32)
    (throw $e (local.get $depth)))

  (func $rec (param $depth i32) (result i32)
    ;; depth 10: throw (through $thrower, which never returns)
    (if (i32.eq (local.get $depth) (i32.const 10))
      (then
        (call $thrower (local.get $depth))
        (unreachable)))
    ;; depth 7: on any exception, count a cleanup, then rethrow it
    (if (i32.eq (local.get $depth) (i32.const 7))
      (then
        (block $cleanup (result exnref)
          (return
            (try_table (result i32) (catch_all_ref $cleanup)
              (call $rec (i32.add (local.get $depth) (i32.const 1))))))
        ;; the exnref is on the stack
        (global.set $cleanups (i32.add (global.get $cleanups) (i32.const 1)))
        throw_ref))
    ;; depth 4: catch $e and return 100 + its payload
    (if (i32.eq (local.get $depth) (i32.const 4))
      (then
        (block $catch_e (result i32)
          (return
            (try_table (result i32) (catch $e $catch_e)
              (call $rec (i32.add (local.get $depth) (i32.const 1))))))
        ;; the payload is on the stack
        (global.set $caught (i32.add (global.get $caught) (i32.const 1)))
        i32.const 100
        i32.add
        return))
    ;; any other depth: 1 + rec(depth + 1)
    (i32.add (call $rec (i32.add (local.get $depth) (i32.const 1)))
             (i32.const 1)))

  ;; Writes the decimal digits of $v at $at; returns the address after them.
  (func $utoa (param $v i32) (param $at i32) (result i32)
    (local $end i32) (local $t i32)
    (local.set $end (local.get $at))
    (local.set $t (local.get $v))
    (loop $more
      (local.set $end (i32.add (local.get $end) (i32.const 1)))
      (local.set $t (i32.div_u (local.get $t) (i32.const 10)))
      (br_if $more (local.get $t)))
    (local.set $t (local.get $end))
    (loop $digit
      (local.set $t (i32.sub (local.get $t) (i32.const 1)))
      (i32.store8 (local.get $t)
        (i32.add (i32.const 48) (i32.rem_u (local.get $v) (i32.const 10))))
      (local.set $v (i32.div_u (local.get $v) (i32.const 10)))
      (br_if $digit (i32.gt_u (local.get $t) (local.get $at))))
    (local.get $end))

  (func $_start (export "_start")
    (local $p i32) (local $sum i32)
    (local.set $sum (call $rec (i32.const 1)))
    (local.set $sum (i32.add (local.get $sum) (call $rec (i32.const 1))))
    (local.set $sum (i32.add (local.get $sum) (call $rec (i32.const 1))))
    ;; "exceptions: caught=" is at 16..35
    (local.set $p (call $utoa (global.get $caught) (i32.const 35)))
    (memory.copy (local.get $p) (i32.const 1024) (i32.const 10))
    (local.set $p (call $utoa (global.get $cleanups)
                              (i32.add (local.get $p) (i32.const 10))))
    (memory.copy (local.get $p) (i32.const 1034) (i32.const 8))
    (local.set $p (call $utoa (local.get $sum)
                              (i32.add (local.get $p) (i32.const 8))))
    (i32.store8 (local.get $p) (i32.const 10))
    ;; iovec {16, p + 1 - 16}
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.sub (local.get $p) (i32.const 15)))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))
)
