// The benchmark set's JavaScript (QuickJS): classes, recursion, closures, Map and object
// dictionaries, JSON, regular expressions, string building, a sort with a comparator.
"use strict";

function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

class Vec {
  constructor(x, y) { this.x = x; this.y = y; }
  add(o) { return new Vec(this.x + o.x, this.y + o.y); }
  scale(k) { return new Vec(this.x * k, this.y * k); }
  len() { return Math.sqrt(this.x * this.x + this.y * this.y); }
}

class Particle {
  constructor(i) {
    this.pos = new Vec(i % 17, i % 13);
    this.vel = new Vec((i % 7) - 3, (i % 5) - 2);
  }
  step(dt) { this.pos = this.pos.add(this.vel.scale(dt)); }
}

function simulate(n, steps) {
  const ps = [];
  for (let i = 0; i < n; i++) ps.push(new Particle(i));
  for (let s = 0; s < steps; s++) for (const p of ps) p.step(0.01);
  let sum = 0;
  for (const p of ps) sum += p.pos.len();
  return sum;
}

function makeCounter() {
  let c = 0;
  return { inc: (k) => { c += k; return c; }, get: () => c };
}

function closures(n) {
  const counters = [];
  for (let i = 0; i < 50; i++) counters.push(makeCounter());
  for (let i = 0; i < n; i++) counters[i % 50].inc(i & 7);
  return counters.reduce((a, c) => a + c.get(), 0);
}

const WORDS = ("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod " +
  "tempor incididunt ut labore et dolore magna aliqua ut enim ad minim veniam").split(" ");

function wordCounts(n) {
  const m = new Map();
  const o = {};
  for (let i = 0; i < n; i++) {
    const w = WORDS[(i * 7919) % WORDS.length] + (i % 11);
    m.set(w, (m.get(w) || 0) + 1);
    o[w] = (o[w] || 0) + 1;
  }
  return [m.size, Object.keys(o).length];
}

function jsonRoundTrip(n) {
  const items = [];
  for (let i = 0; i < n; i++)
    items.push({ id: i, name: "item" + i, tags: [WORDS[i % WORDS.length], "t" + (i % 9)], score: i * 1.5 });
  let total = 0;
  for (let r = 0; r < 5; r++) {
    const s = JSON.stringify(items);
    const back = JSON.parse(s);
    total += back.length + s.length;
  }
  return total;
}

function regexWork(n) {
  const re = /([a-z]+)-(\d+)@([a-z]+)\.com/;
  let hits = 0;
  for (let i = 0; i < n; i++) {
    const s = "user" + WORDS[i % WORDS.length] + "-" + i + "@example.com";
    const m = re.exec(s);
    if (m && m[2].length > 1) hits++;
    if (/ip?s/.test(s)) hits++;
  }
  return hits;
}

function buildString(n) {
  let s = "";
  const parts = [];
  for (let i = 0; i < n; i++) {
    s += String.fromCharCode(97 + (i % 26));
    if (i % 100 === 0) { parts.push(s); s = ""; }
  }
  return parts.join("|").length + s.length;
}

function sortWork(n) {
  const arr = [];
  let seed = 12345;
  for (let i = 0; i < n; i++) {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    arr.push({ key: seed % 1000, idx: i });
  }
  arr.sort((a, b) => a.key - b.key || a.idx - b.idx);
  return arr[0].key + arr[arr.length - 1].key;
}

print("fib(25) =", fib(25));
print("fib(27) =", fib(27));
print("simulate =", simulate(300, 200).toFixed(3));
print("closures =", closures(300000));
print("wordCounts =", wordCounts(150000).join(","));
print("json =", jsonRoundTrip(5000));
print("regex hits =", regexWork(60000));
print("string =", buildString(300000));
print("sort =", sortWork(80000));
