-- KEYS: queued ; ARGV: tenant. One of the tenant's queued chunks started (never below 0: a
-- chunk delivered twice, or re-sent by the reconciler, was counted once or not at all).
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end
