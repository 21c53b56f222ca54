-- KEYS: job, plan, tenant's line, ring, ring members ; ARGV: now, job id, tenant, chunk1, ...
-- planning → rendering with these chunk plans, and the chunks ('{job id}:{n}') in line behind
-- the tenant's other waiting chunks, the tenant in the ring once: one write, so neither a
-- failover nor a dead worker can leave a job rendering with chunks that never joined a line.
-- 1: saved; 0: the job moved on (cancelled), nothing written.
if redis.call('HGET', KEYS[1], 'state') ~= 'planning' then return 0 end
local total = #ARGV - 3
redis.call('DEL', KEYS[2])
for i = 4, #ARGV do redis.call('RPUSH', KEYS[2], ARGV[i]) end
redis.call('HSET', KEYS[1], 'state', 'rendering', 'chunks_total', total,
           'started_at', ARGV[1], 'updated_at', ARGV[1])
for n = 0, total - 1 do redis.call('RPUSH', KEYS[3], ARGV[2] .. ':' .. n) end
if redis.call('SADD', KEYS[5], ARGV[3]) == 1 then redis.call('RPUSH', KEYS[4], ARGV[3]) end
return 1
