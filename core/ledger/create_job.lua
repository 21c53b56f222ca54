-- KEYS: job, text, tenant's jobs, active jobs, tenant's queued chars ; ARGV: id, now, text,
-- chars to hold (0: no quota), limit, then the record's fields and values.
-- The job in 'queued' with its text, in its tenant's listing and the active set, holding its
-- characters of the tenant's quota: one write, so a failover or a dead front never leaves
-- characters reserved for a job that was never written (the tenant's quota would shrink for
-- good). 1: created; 0: over the quota, nothing written.
local held = tonumber(ARGV[4])
if held > 0 then
  local queued = tonumber(redis.call('GET', KEYS[5]) or '0')
  if queued + held > tonumber(ARGV[5]) then return 0 end
  redis.call('INCRBY', KEYS[5], held)
end
redis.call('HSET', KEYS[1], unpack(ARGV, 6))
redis.call('SET', KEYS[2], ARGV[3])
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
redis.call('SADD', KEYS[4], ARGV[1])
return 1
