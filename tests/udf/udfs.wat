;; User-defined functions for weir's tests, in WebAssembly text (weir's
;; calling convention: docs/sql.md, "User-defined functions").
(module
  (memory (export "memory") 1)

  ;; The argument buffer: from 1024 on, the memory grown to hold `size`
  ;; and, after it, split_words' rows (at most 8 bytes per byte read, and 14).
  (func (export "weir_alloc") (param $size i32) (result i32)
    (local $need i32)
    (local.set $need (i32.add (i32.const 1040) (i32.mul (local.get $size) (i32.const 9))))
    (if (i32.gt_u (local.get $need) (i32.mul (memory.size) (i32.const 65536)))
      (then
        (drop (memory.grow
          (i32.sub
            (i32.div_u (i32.add (local.get $need) (i32.const 65535)) (i32.const 65536))
            (memory.size))))))
    (i32.const 1024))

  ;; The code point of the UTF-8 character at $p.
  (func $decode (param $p i32) (result i32)
    (local $b i32)
    (local.set $b (i32.load8_u (local.get $p)))
    (if (i32.lt_u (local.get $b) (i32.const 0x80)) (then (return (local.get $b))))
    (if (i32.lt_u (local.get $b) (i32.const 0xE0))
      (then (return (i32.or
        (i32.shl (i32.and (local.get $b) (i32.const 0x1F)) (i32.const 6))
        (i32.and (i32.load8_u offset=1 (local.get $p)) (i32.const 0x3F))))))
    (if (i32.lt_u (local.get $b) (i32.const 0xF0))
      (then (return (i32.or (i32.or
        (i32.shl (i32.and (local.get $b) (i32.const 0x0F)) (i32.const 12))
        (i32.shl (i32.and (i32.load8_u offset=1 (local.get $p)) (i32.const 0x3F)) (i32.const 6)))
        (i32.and (i32.load8_u offset=2 (local.get $p)) (i32.const 0x3F))))))
    (i32.or (i32.or (i32.or
      (i32.shl (i32.and (local.get $b) (i32.const 0x07)) (i32.const 18))
      (i32.shl (i32.and (i32.load8_u offset=1 (local.get $p)) (i32.const 0x3F)) (i32.const 12)))
      (i32.shl (i32.and (i32.load8_u offset=2 (local.get $p)) (i32.const 0x3F)) (i32.const 6)))
      (i32.and (i32.load8_u offset=3 (local.get $p)) (i32.const 0x3F))))

  ;; The length in bytes of the UTF-8 character whose first byte is $b.
  (func $width (param $b i32) (result i32)
    (if (i32.lt_u (local.get $b) (i32.const 0x80)) (then (return (i32.const 1))))
    (if (i32.lt_u (local.get $b) (i32.const 0xE0)) (then (return (i32.const 2))))
    (if (i32.lt_u (local.get $b) (i32.const 0xF0)) (then (return (i32.const 3))))
    (i32.const 4))

  ;; Nexmark q14's count_char(s, c): how many characters of s are the
  ;; first character of c (0 when c is empty).
  (func (export "count_char") (param $s i32) (param $sn i32) (param $c i32) (param $cn i32) (result i64)
    (local $end i32) (local $want i32) (local $count i64)
    (if (i32.eqz (local.get $cn)) (then (return (i64.const 0))))
    (local.set $want (call $decode (local.get $c)))
    (local.set $end (i32.add (local.get $s) (local.get $sn)))
    ;; An ASCII character: its byte never occurs inside a longer UTF-8
    ;; sequence, so the bytes are counted without decoding.
    (if (i32.lt_u (local.get $want) (i32.const 0x80))
      (then
        (block $ascii_done
          (loop $ascii
            (br_if $ascii_done (i32.ge_u (local.get $s) (local.get $end)))
            (local.set $count (i64.add (local.get $count)
              (i64.extend_i32_u (i32.eq (i32.load8_u (local.get $s)) (local.get $want)))))
            (local.set $s (i32.add (local.get $s) (i32.const 1)))
            (br $ascii)))
        (return (local.get $count))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $s) (local.get $end)))
        (if (i32.eq (call $decode (local.get $s)) (local.get $want))
          (then (local.set $count (i64.add (local.get $count) (i64.const 1)))))
        (local.set $s (i32.add (local.get $s) (call $width (i32.load8_u (local.get $s)))))
        (br $next)))
    (local.get $count))

  ;; Traps (unreachable) when s holds an 'x'; else its length in bytes.
  (func (export "fussy_length") (param $s i32) (param $sn i32) (result i64)
    (local $i i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $sn)))
        (if (i32.eq (i32.load8_u (i32.add (local.get $s) (local.get $i))) (i32.const 0x78))
          (then unreachable))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i64.extend_i32_u (local.get $sn)))

  ;; Loops forever when n is negative; else n * 2.
  (func (export "spin_if_negative") (param $n i64) (result i64)
    (if (i64.lt_s (local.get $n) (i64.const 0))
      (then (loop $forever (br $forever))))
    (i64.mul (local.get $n) (i64.const 2)))

  ;; A table function: the words of s (split at spaces), each with its
  ;; length in bytes, as rows (word VARCHAR, len BIGINT) written after s:
  ;; per row, a 0 (not NULL) byte, the word's length (4 bytes,
  ;; little-endian) and bytes, a 0 byte and the length as 8 bytes.
  (func (export "split_words") (param $s i32) (param $sn i32) (result i64)
    (local $end i32) (local $out i32) (local $start i32) (local $len i32)
    (local.set $end (i32.add (local.get $s) (local.get $sn)))
    (local.set $out (local.get $end))
    (block $done
      (loop $next
        ;; Skip spaces.
        (block $word
          (loop $skip
            (br_if $done (i32.ge_u (local.get $s) (local.get $end)))
            (br_if $word (i32.ne (i32.load8_u (local.get $s)) (i32.const 0x20)))
            (local.set $s (i32.add (local.get $s) (i32.const 1)))
            (br $skip)))
        (local.set $start (local.get $s))
        (block $ended
          (loop $in
            (br_if $ended (i32.ge_u (local.get $s) (local.get $end)))
            (br_if $ended (i32.eq (i32.load8_u (local.get $s)) (i32.const 0x20)))
            (local.set $s (i32.add (local.get $s) (i32.const 1)))
            (br $in)))
        (local.set $len (i32.sub (local.get $s) (local.get $start)))
        (i32.store8 (local.get $out) (i32.const 0))
        (i32.store offset=1 (local.get $out) (local.get $len))
        (memory.copy (i32.add (local.get $out) (i32.const 5)) (local.get $start) (local.get $len))
        (local.set $out (i32.add (local.get $out) (i32.add (i32.const 5) (local.get $len))))
        (i32.store8 (local.get $out) (i32.const 0))
        (i64.store offset=1 (local.get $out) (i64.extend_i32_u (local.get $len)))
        (local.set $out (i32.add (local.get $out) (i32.const 9)))
        (br $next)))
    (i64.or
      (i64.shl (i64.extend_i32_u (local.get $end)) (i64.const 32))
      (i64.extend_i32_u (i32.sub (local.get $out) (local.get $end)))))
)
