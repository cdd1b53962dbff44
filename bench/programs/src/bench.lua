-- Call-heavy interpreter work for the Lua benchmark: recursion, closures, methods through
-- metatables, table building and sorting with a Lua comparator, string formatting,
-- pattern matching and concatenation. Prints a checksum; the same on every run.
local acc = 0
local function mix(x) acc = (acc * 31 + x) % 4294967296 end

-- Recursion.
local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end
mix(fib(29))

local function ack(m, n)
  if m == 0 then return n + 1 end
  if n == 0 then return ack(m - 1, 1) end
  return ack(m - 1, ack(m, n - 1))
end
mix(ack(2, 300))

-- Closures: counters and a composed pipeline of small functions.
local function counter()
  local c = 0
  return function(step) c = c + step; return c end
end
local function compose(f, g) return function(x) return f(g(x)) end end
local inc = function(x) return x + 1 end
local dbl = function(x) return x * 2 % 1000003 end
local pipeline = compose(inc, compose(dbl, compose(inc, dbl)))
local c = counter()
for i = 1, 600000 do c(pipeline(i) % 5) end
mix(c(0))

-- Objects: a small class with methods looked up through __index.
local Vec = {}
Vec.__index = Vec
function Vec.new(x, y) return setmetatable({x = x, y = y}, Vec) end
function Vec:add(o) return Vec.new(self.x + o.x, self.y + o.y) end
function Vec:scale(k) return Vec.new(self.x * k, self.y * k) end
function Vec:dot(o) return self.x * o.x + self.y * o.y end
local v = Vec.new(0, 0)
for i = 1, 300000 do
  v = v:add(Vec.new(i % 7, i % 11)):scale(1)
  if i % 1000 == 0 then mix(v:dot(Vec.new(1, 2)) % 1000003) end
end

-- Strings: formatting, sorting with a comparator, patterns, concatenation.
local words = {}
for i = 1, 40000 do
  words[i] = string.format("w%05d-%s", (i * 7919) % 100000, string.rep("x", i % 7))
end
table.sort(words, function(a, b) return a > b end)
for i = 1, #words, 97 do
  local w = words[i]
  for j = 1, #w do mix(w:byte(j)) end
end
local digits = 0
for i = 1, #words, 3 do
  for d in words[i]:gmatch("%d") do digits = digits + tonumber(d) end
end
mix(digits)
local parts = {}
for i = 1, 20000 do parts[#parts + 1] = tostring(i * 3) end
mix(#table.concat(parts, ","))

-- Tables as maps.
local map = {}
for i = 1, 200000 do local k = "k" .. (i % 5000); map[k] = (map[k] or 0) + i end
local keys = {}
for k in pairs(map) do keys[#keys + 1] = k end
table.sort(keys)
for _, k in ipairs(keys) do mix(#k * map[k] % 1000003) end

print(string.format("checksum %d", acc))
