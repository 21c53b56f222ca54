-- KEYS: lexicons, lexicon info, default ; ARGV: name.
-- 0: no such lexicon; 1: deleted; 2: deleted, and it was the default (now none).
if redis.call('HDEL', KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
if redis.call('GET', KEYS[3]) == ARGV[1] then
  redis.call('DEL', KEYS[3])
  return 2
end
return 1
