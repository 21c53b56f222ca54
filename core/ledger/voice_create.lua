-- KEYS: voices[, clip] ; ARGV: name, record JSON, max voices[, clip audio].
-- {'created', voices held now} | {'exists', 0} | {'full', voices held}. The clip (a clip
-- voice's audio, named by its SHA-256) is written with the record, in the same step.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return {'exists', 0} end
local held = redis.call('HLEN', KEYS[1])
if held >= tonumber(ARGV[3]) then return {'full', held} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if KEYS[2] then redis.call('SET', KEYS[2], ARGV[4]) end
return {'created', held + 1}
