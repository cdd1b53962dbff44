-- Call-heavy interpreter work: recursion, closures, tables, strings and sorting.
local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end

local function make_counter()
  local c = 0
  return function(step) c = c + step; return c end
end

local function words(n)
  local t = {}
  for i = 1, n do t[#t + 1] = string.format("w%05d-%s", (i * 7919) % 100000, string.rep("x", i % 7)) end
  return t
end

local function checksum(s, acc)
  for i = 1, #s do acc = (acc * 31 + s:byte(i)) % 4294967296 end
  return acc
end

local acc = 0
acc = acc + fib(27)
local counter = make_counter()
for i = 1, 300000 do counter(i % 3) end
acc = acc + counter(0)
local w = words(60000)
table.sort(w, function(a, b) return a > b end)
for i = 1, #w, 97 do acc = checksum(w[i], acc) end
local map = {}
for i = 1, 200000 do local k = "k" .. (i % 5000); map[k] = (map[k] or 0) + i end
for k, v in pairs(map) do acc = (acc + #k * v) % 4294967296 end
print(string.format("checksum %d", acc))
