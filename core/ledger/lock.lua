-- The ledger's one lock (library): a string key holding its owner, with a TTL in ms. It is
-- taken only when free, renewed and dropped only by its owner. Chunk leases (owner
-- '{token}|{worker}'), the assembly lock, the reconciler's turn and the reconciler's requeue
-- holds are all these three functions.
local function lock_take(key, owner, ttl_ms)
  return redis.call('SET', key, owner, 'NX', 'PX', ttl_ms) ~= false
end

local function lock_renew(key, owner, ttl_ms)
  if redis.call('GET', key) ~= owner then return false end
  redis.call('PEXPIRE', key, ttl_ms)
  return true
end

local function lock_drop(key, owner)
  if redis.call('GET', key) ~= owner then return false end
  redis.call('DEL', key)
  return true
end

