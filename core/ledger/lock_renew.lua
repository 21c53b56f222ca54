-- KEYS: lock ; ARGV: owner, ttl_ms. 1: renewed; 0: not (or no longer) the owner's.
if lock_renew(KEYS[1], ARGV[1], ARGV[2]) then return 1 end
return 0
