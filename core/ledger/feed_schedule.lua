-- KEYS: tenant line, ring, ring members ; ARGV: job id, chunks, tenant
-- The job's chunks join the end of its tenant's line; the tenant joins the ring once.
for n = 0, tonumber(ARGV[2]) - 1 do redis.call('RPUSH', KEYS[1], ARGV[1] .. ':' .. n) end
if redis.call('SADD', KEYS[3], ARGV[3]) == 1 then redis.call('RPUSH', KEYS[2], ARGV[3]) end
return 1
