# The benchmark set's Python (CPython 3.11): classes, recursion, closures, dicts, json,
# regular expressions, string building, sorting with a key.
import json
import re


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


class Vec:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def add(self, o):
        return Vec(self.x + o.x, self.y + o.y)

    def scale(self, k):
        return Vec(self.x * k, self.y * k)


def simulate(n, steps):
    ps = [(Vec(i % 17, i % 13), Vec(i % 7 - 3, i % 5 - 2)) for i in range(n)]
    for _ in range(steps):
        ps = [(p.add(v.scale(0.01)), v) for p, v in ps]
    return round(sum(p.x + p.y for p, _ in ps), 3)


def counter():
    c = 0

    def inc(k):
        nonlocal c
        c += k
        return c

    return inc


def closures(n):
    incs = [counter() for _ in range(50)]
    return sum(incs[i % 50](i & 7) for i in range(n))


WORDS = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod".split()


def word_counts(n):
    counts = {}
    for i in range(n):
        w = WORDS[(i * 7919) % len(WORDS)] + str(i % 11)
        counts[w] = counts.get(w, 0) + 1
    return len(counts)


def json_round_trip(n):
    items = [{"id": i, "name": "item%d" % i, "tags": [WORDS[i % len(WORDS)]]} for i in range(n)]
    return len(json.dumps(json.loads(json.dumps(items))))


def regex_work(n):
    pattern = re.compile(r"([a-z]+)-(\d+)@([a-z]+)\.com")
    return sum(1 for i in range(n) if pattern.match("user%s-%d@example.com" % (WORDS[i % 11], i)))


def sort_work(n):
    seed, rows = 12345, []
    for i in range(n):
        seed = (seed * 1103515245 + 12345) & 0x7FFFFFFF
        rows.append((seed % 1000, i))
    rows.sort(key=lambda r: (r[0], -r[1]))
    return rows[0][0] + rows[-1][0]


print("fib =", fib(22))
print("simulate =", simulate(200, 50))
print("closures =", closures(100000))
print("words =", word_counts(50000))
print("json =", json_round_trip(3000))
print("regex =", regex_work(20000))
print("sort =", sort_work(30000))
