-- KEYS: job, active, finished, assembly lock ; ARGV: id, now, output key, size, duration,
-- sha256, owner, chars_head, chars_tail, stored_head, stored_tail
-- assembling → done, for the assembly lock's owner only: 'done' | 'inactive' | 'fenced'.
-- The output's size joins the tenant's stored bytes (keys.STORED_BYTES, built from the job's
-- tenant like ending.lua's counter); retention.py takes it back when the job is forgotten.
if redis.call('HGET', KEYS[1], 'state') ~= 'assembling' then return 'inactive' end
if not lock_drop(KEYS[4], ARGV[7]) then return 'fenced' end
redis.call('HSET', KEYS[1], 'state', 'done', 'output_key', ARGV[3], 'size_bytes', ARGV[4],
           'duration_s', ARGV[5], 'sha256', ARGV[6], 'finished_at', ARGV[2], 'updated_at', ARGV[2])
end_job(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[8], ARGV[9])
local stored = ARGV[10] .. redis.call('HGET', KEYS[1], 'tenant') .. ARGV[11]
redis.call('INCRBY', stored, ARGV[4])
return 'done'
