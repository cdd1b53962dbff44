;; on_demand.wat: works once per line of stdin, and says when it is done with each.
;;
;; For every read of stdin that returns bytes, $batch calls $work 1000 times, $work calls
;; $leaf once, then "ok\n" goes to stdout (one fd_write). End of input ends the program
;; with exit code 0. A test that writes one line and waits for "ok" before the next
;; decides exactly which batches run while it does something else (turn probes on or off).
;;
;; Known by construction, for B batches: $_start 1; $batch B; $work 1000 B; $leaf 1000 B;
;; fd_read B + 1; fd_write B.
(module
  (import "wasi_snapshot_preview1" "fd_read"
    (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))

  (memory (export "memory") 1)

  ;; 0..8 read iovec (buffer 64..192), 8..12 bytes read,
  ;; 16..24 write iovec ("ok\n" at 32), 24..28 bytes written
  (data (i32.const 0) "\40\00\00\00\80\00\00\00")
  (data (i32.const 16) "\20\00\00\00\03\00\00\00")
  (data (i32.const 32) "ok\n")

  (global $sum (mut i32) (i32.const 0))

  (func $leaf (param $x i32) (result i32)
    (i32.add (i32.mul (local.get $x) (i32.const 31)) (i32.const 7)))

  (func $work (param $i i32)
    (global.set $sum (i32.add (global.get $sum) (call $leaf (local.get $i)))))

  (func $batch
    (local $i i32)
    (block $done
      (loop $again
        (br_if $done (i32.ge_u (local.get $i) (i32.const 1000)))
        (call $work (local.get $i))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $again)))
    (drop (call $fd_write (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 24))))

  ;; Reads until end of input (or an error), one batch per read.
  (func $_start (export "_start")
    (block $eof
      (loop $next
        (br_if $eof (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
        (br_if $eof (i32.eqz (i32.load (i32.const 8))))
        (call $batch)
        (br $next))))
)
