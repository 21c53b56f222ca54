-- KEYS: lock ; ARGV: owner, ttl_ms. 1: taken; 0: held by someone.
if lock_take(KEYS[1], ARGV[1], ARGV[2]) then return 1 end
return 0
