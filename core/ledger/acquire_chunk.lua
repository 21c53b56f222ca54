-- KEYS: job, done, started, lease, fence ; ARGV: n, worker, ttl_ms
-- {'acquired', token, owner} | {'done'|'busy'|'inactive', 0, ''}. The lease is a lock whose
-- owner is '{token}|{worker}', the token the job's next fencing token.
if redis.call('HGET', KEYS[1], 'state') ~= 'rendering' then return {'inactive', 0, ''} end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return {'done', 0, ''} end
if redis.call('EXISTS', KEYS[4]) == 1 then return {'busy', 0, ''} end
local token = redis.call('INCR', KEYS[5])
local owner = token .. '|' .. ARGV[2]
lock_take(KEYS[4], owner, ARGV[3])
redis.call('SADD', KEYS[3], ARGV[1])
return {'acquired', token, owner}
