-- KEYS: job, done, lease, commits, parts ; ARGV: n, owner, audio_s, now, token
-- Counts only while the owner still holds the lease (fencing: a lost lease is 'fenced',
-- whatever became of the job since; a held one is dropped) and the job is rendering; 'done'
-- is a set, so a chunk never counts twice; the counted commit records its token (whose part
-- assembly reads); the commit that completes the set moves the job to assembling.
if not lock_drop(KEYS[3], ARGV[2]) then return {'fenced', 0} end
if redis.call('HGET', KEYS[1], 'state') ~= 'rendering' then return {'inactive', 0} end
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then return {'duplicate', 0} end
redis.call('RPUSH', KEYS[4], ARGV[1] .. '|' .. ARGV[2])
redis.call('HSET', KEYS[5], ARGV[1], ARGV[5])
redis.call('HINCRBYFLOAT', KEYS[1], 'audio_s', ARGV[3])
local done = redis.call('SCARD', KEYS[2])
redis.call('HSET', KEYS[1], 'chunks_done', done, 'updated_at', ARGV[4])
if done == tonumber(redis.call('HGET', KEYS[1], 'chunks_total')) then
  redis.call('HSET', KEYS[1], 'state', 'assembling')
  return {'assemble', done}
end
return {'committed', done}
