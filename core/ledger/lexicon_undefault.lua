-- KEYS: default ; ARGV: name, or none for whichever. 1: cleared; 0: it was not the default.
local current = redis.call('GET', KEYS[1])
if not current or (#ARGV > 0 and current ~= ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
return 1
