-- KEYS: ring, ring members ; ARGV: count, line head, line tail, job head, job tail,
-- dispatched head, dispatched tail (the key table's parts around the tenant / the job id).
-- Rotates the ring, one reference per tenant per turn; marks each taken chunk dispatched;
-- drops the references of jobs that stopped rendering on the way.
local out = {}
local want = tonumber(ARGV[1])
local budget = want * 64 + 64
while #out < want and budget > 0 do
  budget = budget - 1
  local tenant = redis.call('LMOVE', KEYS[1], KEYS[1], 'LEFT', 'RIGHT')
  if not tenant then break end
  local line = ARGV[2] .. tenant .. ARGV[3]
  local ref = redis.call('LPOP', line)
  if redis.call('LLEN', line) == 0 then
    redis.call('LREM', KEYS[1], 0, tenant)
    redis.call('SREM', KEYS[2], tenant)
  end
  if ref then
    local job, n = string.match(ref, '^(.+):(%d+)$')
    if job and redis.call('HGET', ARGV[4] .. job .. ARGV[5], 'state') == 'rendering' then
      redis.call('SADD', ARGV[6] .. job .. ARGV[7], n)
      out[#out + 1] = ref
    end
  end
end
return out
