-- The script each worker of lua_mt runs in its own Lua state: three functions whose own
-- work is in the ratio 1:2:3 (the same loop of table and arithmetic work, run 1, 2 and 3
-- times as long), a recursive one, and a closure; returns a checksum that depends on the
-- worker's number.
local function churn(n, seed)
  local t, acc = {}, seed
  for i = 1, n do
    t[i % 64 + 1] = (acc * 31 + i) % 1000003
    acc = (acc + (t[(i * 7) % 64 + 1] or 0)) % 1000003
  end
  return acc
end

function part_a(seed) local r = churn(200000, seed) return r end
function part_b(seed) local r = churn(400000, seed) return r end
function part_c(seed) local r = churn(600000, seed) return r end

local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end

local function adder(k) return function(x) return (x + k) % 1000003 end end
local add = adder(worker)

local total = 0
for round = 1, 4 do
  total = add(total + part_a(worker + round) + part_b(worker) + part_c(round))
end
total = (total + fib(18 + worker)) % 1000003
return total
