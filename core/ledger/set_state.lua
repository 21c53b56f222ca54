-- KEYS: job ; ARGV: to, now, from... (any non-final state when none is given).
-- 1: moved; 0: final, or not in one of the states given; -1: no such job.
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return -1 end
for _, final in ipairs({'done', 'failed', 'cancelled'}) do
  if state == final then return 0 end
end
local allowed = false
for i = 3, #ARGV do if ARGV[i] == state then allowed = true end end
if #ARGV > 2 and not allowed then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'updated_at', ARGV[2])
return 1
