-- Append to a request's output only while this worker owns the request: a worker that was
-- presumed dead and taken over (a long pause, not a crash) can never interleave its output
-- with its successor's (worker.WorkerBatch.append_output).
-- KEYS[1]: the request's owner key; KEYS[2]: its output stream
-- ARGV: owner, maxlen, ttl (s), then per event: the number of field/value items, the items.
-- Returns 1 when appended, 0 when another worker owns the request (nothing written).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local i = 4
while i <= #ARGV do
  local count = tonumber(ARGV[i])
  local fields = {}
  for j = i + 1, i + count do fields[#fields + 1] = ARGV[j] end
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', unpack(fields))
  i = i + count + 1
end
redis.call('EXPIRE', KEYS[2], ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[3] * 1000)
return 1
