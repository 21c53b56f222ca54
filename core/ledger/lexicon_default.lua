-- KEYS: lexicon info, default ; ARGV: name. 1: it is the default now; 0: no such lexicon.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('SET', KEYS[2], ARGV[1])
return 1
