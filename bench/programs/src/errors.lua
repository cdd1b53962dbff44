-- Error-heavy Lua: every error(), failed assert() and coroutine switch goes through Lua's
-- setjmp/longjmp, which this build implements with wasm exception handling.
local acc = 0
local function mix(x) acc = (acc * 31 + x) % 4294967296 end

-- Errors thrown a few frames down and caught by pcall, with string and table values.
local function deep(n, kind)
  if n == 0 then
    if kind == 0 then error("plain failure") end
    if kind == 1 then error({code = 42}) end
    if kind == 2 then assert(false, "assertion") end
    return local_undefined_function()  -- a runtime error: call of a nil value
  end
  return deep(n - 1, kind) + 1
end
for i = 1, 100000 do
  local ok, err = pcall(deep, i % 8, i % 4)
  if ok then mix(1) elseif type(err) == "table" then mix(err.code) else mix(#err) end
end

-- xpcall with a handler that inspects the message.
local function handler(msg) return "handled: " .. tostring(msg) end
for i = 1, 20000 do
  local _, msg = xpcall(function(a, b) return a .. b end, handler, i, nil)
  mix(#msg)
end

-- Errors raised by the runtime itself: arithmetic on nil, indexing nil, bad arguments.
local cases = {
  function() return nil + 1 end,
  function() local t = nil; return t.x end,
  function() return ("x"):rep(-1, 5, 6) .. nil end,
  function() return string.format("%d", "not a number") end,
  function() return math.floor({}) end,
}
for i = 1, 40000 do
  local ok, err = pcall(cases[i % #cases + 1])
  mix(ok and 7 or #tostring(err))
end

-- Coroutines: each resume and yield is a protected call.
local function gen(n)
  return coroutine.wrap(function()
    for i = 1, n do coroutine.yield(i * i % 97) end
  end)
end
for round = 1, 400 do
  for v in gen(250) do mix(v) end
end

-- A coroutine that fails, and error() inside nested pcalls that rethrow.
for i = 1, 15000 do
  local co = coroutine.create(function(x) coroutine.yield(x); error("co" .. x) end)
  local _, y = coroutine.resume(co, i)
  local ok, e = coroutine.resume(co)
  mix(y % 1000 + (ok and 0 or #e))
  local ok2, e2 = pcall(function()
    local ok3, e3 = pcall(error, "inner" .. (i % 10))
    error(e3 .. "/outer", 0)
  end)
  mix(#e2)
end
print(string.format("checksum %d", acc))
