-- KEYS: counter ; ARGV: characters, limit. 1: reserved; 0: over the limit.
local queued = tonumber(redis.call('GET', KEYS[1]) or '0')
if queued + tonumber(ARGV[1]) > tonumber(ARGV[2]) then return 0 end
redis.call('INCRBY', KEYS[1], ARGV[1])
return 1
