-- KEYS: lock ; ARGV: owner. 1: released; 0: not (or no longer) the owner's.
if lock_drop(KEYS[1], ARGV[1]) then return 1 end
return 0
