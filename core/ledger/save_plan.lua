-- KEYS: job, plan ; ARGV: now, total, chunk1, chunk2, ...
-- planning → rendering with these chunk plans. 1: saved; 0: the job moved on (cancelled).
if redis.call('HGET', KEYS[1], 'state') ~= 'planning' then return 0 end
redis.call('DEL', KEYS[2])
for i = 3, #ARGV do redis.call('RPUSH', KEYS[2], ARGV[i]) end
redis.call('HSET', KEYS[1], 'state', 'rendering', 'chunks_total', ARGV[2],
           'started_at', ARGV[1], 'updated_at', ARGV[1])
return 1
