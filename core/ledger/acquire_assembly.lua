-- KEYS: job, assembly lock ; ARGV: owner, ttl_ms
-- 1: taken (the job is assembling and nobody else is at it; the job is marked
-- assembly_started, so a lapsed lock reads as a dead assembler); 0: not.
if redis.call('HGET', KEYS[1], 'state') ~= 'assembling' then return 0 end
if not lock_take(KEYS[2], ARGV[1], ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'assembly_started', 1)
return 1
