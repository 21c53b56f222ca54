-- KEYS: ring, ring members, queued (tenant -> its chunks in the render queue not yet started)
-- ARGV: count, line head, line tail, job head, job tail, dispatched head, dispatched tail
-- (the key table's parts around the tenant / the job id).
-- First up to `count` chunks round the ring, one reference per tenant per turn (rotating it);
-- then, whatever `count`, one chunk of each tenant in the ring with none queued: a newcomer
-- never waits for room behind another tenant's chunks. Each taken chunk is marked dispatched
-- and counted in `queued`; references of jobs that stopped rendering are dropped on the way.
-- Returns {ref, rank, ...}: rank = the tenant's chunks queued ahead of this one.
local out = {}
local want = tonumber(ARGV[1])
local budget = 64 * math.max(want, 0) + 128

-- Pops one reference of the tenant's line (leaving the ring if the line is empty); true and
-- the chunk taken if its job is still rendering, false if the reference was stale, nil if
-- the line was empty.
local function take_one(tenant)
  budget = budget - 1
  local line = ARGV[2] .. tenant .. ARGV[3]
  local ref = redis.call('LPOP', line)
  if redis.call('LLEN', line) == 0 then
    redis.call('LREM', KEYS[1], 0, tenant)
    redis.call('SREM', KEYS[2], tenant)
  end
  if not ref then return nil end
  local job, n = string.match(ref, '^(.+):(%d+)$')
  if not job or redis.call('HGET', ARGV[4] .. job .. ARGV[5], 'state') ~= 'rendering' then
    return false
  end
  redis.call('SADD', ARGV[6] .. job .. ARGV[7], n)
  out[#out + 1] = ref
  out[#out + 1] = redis.call('HINCRBY', KEYS[3], tenant, 1) - 1
  return true
end

while #out < 2 * want and budget > 0 do
  local tenant = redis.call('LMOVE', KEYS[1], KEYS[1], 'LEFT', 'RIGHT')
  if not tenant then break end
  take_one(tenant)  -- a stale reference gives the tenant nothing this turn
end

for _, tenant in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  if tonumber(redis.call('HGET', KEYS[3], tenant) or '0') <= 0 then
    local taken = false
    while taken == false and budget > 0 do taken = take_one(tenant) end
  end
end
return out
