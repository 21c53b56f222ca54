-- What every final state does (library): the job leaves the active set, joins the finished
-- index (retention's), and gives back the characters it holds of its tenant's quota — once:
-- its 'queued_chars' field marks what it holds. The tenant's counter key is built from the
-- job's tenant with the key table's parts (keys.QUEUED_CHARS.around()).
local function end_job(job, active, finished, id, now, chars_head, chars_tail)
  redis.call('SREM', active, id)
  redis.call('ZADD', finished, now, id)
  local held = tonumber(redis.call('HGET', job, 'queued_chars') or '0')
  if held > 0 then
    local counter = chars_head .. redis.call('HGET', job, 'tenant') .. chars_tail
    if redis.call('DECRBY', counter, held) <= 0 then redis.call('DEL', counter) end
    redis.call('HDEL', job, 'queued_chars')
  end
end

