-- gc.lua DEPTH ROUNDS: a garbage-collector-heavy Lua workload (lua5.4) for
-- bench/apps.sh.  Each round builds binary trees of depths 4, 6, ... DEPTH
-- (the classic GC benchmark: short-lived tables of 2 slots), keeps one
-- long-lived tree, and churns strings and tables: 100,000 records, each a
-- small table holding a concatenated string, half of them replaced in each
-- of 4 passes.  Prints integer checks only, so the output is the same on
-- every Lua 5.4 and allocator: apps.sh compares it with the expected lines.
local depth, rounds = tonumber(arg[1]) or 16, tonumber(arg[2]) or 4

local function tree(d)
  if d == 0 then return {} end
  return { tree(d - 1), tree(d - 1) }
end

local function check(t)
  if t[1] == nil then return 1 end
  return 1 + check(t[1]) + check(t[2])
end

local function trees(max)
  local long, sum = tree(max), 0
  for d = 4, max, 2 do
    for _ = 1, 1 << (max - d + 4) do sum = sum + check(tree(d)) end
  end
  return sum + check(long)
end

-- A 32-bit linear congruential generator: the same numbers on every platform.
local seed = 12345
local function rand(n)
  seed = (seed * 1103515245 + 12345) & 0x7fffffff
  return seed % n
end

local function strings(rows, passes)
  local t, total = {}, 0
  for i = 1, rows do t[i] = { id = i, s = "row" .. i } end
  for _ = 1, passes do
    for _ = 1, rows // 2 do
      local i = rand(rows) + 1
      local parts = {}
      for k = 1, rand(8) + 1 do parts[k] = string.rep(string.char(97 + rand(26)), rand(40) + 1) end
      t[i] = { id = i, s = table.concat(parts, "-") }
    end
  end
  for i = 1, rows do total = total + #t[i].s + t[i].id end
  return total
end

local tsum, ssum = 0, 0
for _ = 1, rounds do
  tsum = tsum + trees(depth)
  ssum = ssum + strings(100000, 4)
end
print("trees " .. tsum)
print("strings " .. ssum)
