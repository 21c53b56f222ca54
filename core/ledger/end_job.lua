-- KEYS: job, active, finished ; ARGV: id, now, state (failed | cancelled), error,
-- chars_head, chars_tail. 1: ended; 0: already final; -1: no such job.
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return -1 end
if state == 'done' or state == 'failed' or state == 'cancelled' then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[3], 'error', ARGV[4], 'finished_at', ARGV[2],
           'updated_at', ARGV[2])
end_job(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[5], ARGV[6])
return 1
