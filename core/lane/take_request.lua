-- Take a request over (worker.WorkerBatch.begin_session): this worker becomes its owner and
-- beats once — unless its output has already ended. A takeover can come after the previous
-- owner wrote its last event but before it acknowledged the entry (it was slow, or its
-- heartbeats lapsed under load); taking the owner key then would name a worker that wrote
-- nothing as the request's owner.
-- KEYS[1]: the request's owner key; KEYS[2]: its heartbeat key; KEYS[3]: its output stream
-- ARGV: owner, owner ttl (s), heartbeat ttl (ms).
-- Returns 1 when taken, 0 when the output had ended (nothing written).
local last = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)[1]
if last then
  local fields = last[2]
  for i = 1, #fields, 2 do
    if fields[i] == 'kind' then
      if fields[i + 1] == 'end' or fields[i + 1] == 'error' then return 0 end
      break
    end
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
return 1
