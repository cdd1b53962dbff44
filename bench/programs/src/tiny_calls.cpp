// Many tiny functions: virtual calls through a class hierarchy, std::sort with a comparator
// function, std::map and std::unordered_map lookups, and small non-inlined helpers: about
// 80 million calls in about a second, the case where per-call probes cost the most.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#define NOINLINE __attribute__((noinline))

struct Shape {
    virtual ~Shape() = default;
    virtual std::uint64_t area() const = 0;
    virtual std::uint64_t perimeter() const = 0;
};
struct Square : Shape {
    std::uint64_t s;
    explicit Square(std::uint64_t s) : s(s) {}
    NOINLINE std::uint64_t area() const override { return s * s; }
    NOINLINE std::uint64_t perimeter() const override { return 4 * s; }
};
struct Rect : Shape {
    std::uint64_t w, h;
    Rect(std::uint64_t w, std::uint64_t h) : w(w), h(h) {}
    NOINLINE std::uint64_t area() const override { return w * h; }
    NOINLINE std::uint64_t perimeter() const override { return 2 * (w + h); }
};

NOINLINE static std::uint64_t mix(std::uint64_t a, std::uint64_t b) { return (a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2))); }
NOINLINE static bool by_low_bits(std::uint32_t a, std::uint32_t b) { return (a & 0xffff) < (b & 0xffff) || ((a & 0xffff) == (b & 0xffff) && a < b); }
NOINLINE static std::uint32_t next(std::uint32_t x) { x ^= x << 13; x ^= x >> 17; x ^= x << 5; return x; }

int main() {
    std::uint64_t acc = 1;
    std::vector<std::unique_ptr<Shape>> shapes;
    for (std::uint64_t i = 0; i < 1000; i++) {
        if (i % 3 == 0) shapes.push_back(std::make_unique<Square>(i));
        else shapes.push_back(std::make_unique<Rect>(i, i + 1));
    }
    for (int round = 0; round < 24000; round++)
        for (auto &s : shapes) acc = mix(acc, s->area() + s->perimeter());

    std::vector<std::uint32_t> v(400000);
    std::uint32_t x = 2463534242u;
    for (auto &e : v) e = x = next(x);
    std::sort(v.begin(), v.end(), by_low_bits);
    for (std::size_t i = 0; i < v.size(); i += 1000) acc = mix(acc, v[i]);

    std::map<std::uint32_t, std::uint32_t> ordered;
    std::unordered_map<std::uint32_t, std::uint32_t> hashed;
    for (std::uint32_t i = 0; i < 300000; i++) {
        x = next(x);
        ordered[x % 50000] += i;
        hashed[x % 70000] ^= i;
    }
    for (auto &kv : ordered) acc = mix(acc, kv.first + kv.second);
    for (std::uint32_t i = 0; i < 70000; i++) {
        auto it = hashed.find(i);
        if (it != hashed.end()) acc = mix(acc, it->second);
    }
    std::printf("checksum %llu\n", (unsigned long long)acc);
    return 0;
}
