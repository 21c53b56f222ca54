-- A tenant's open streams: count one more unless the tenant already holds `limit` unexpired
-- ones (front.RealtimeClient.hold_tenant_slot).
-- KEYS[1]: the tenant's streams (sorted set: request id -> deadline, unix ms)
-- ARGV: request id, until (unix ms), now (unix ms), limit
-- Returns 1 when the stream holds a slot (it already did, or it got one), 0 when refused.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[3])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 1 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
return 1
