-- KEYS: voices ; ARGV: name, the tenant's clip key less the SHA-256 (keys.VOICE_CLIP).
-- 0: no such voice; 1: deleted — with its clip, unless another of the tenant's voices uses
-- the same clip (same SHA-256).
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
local clip = cjson.decode(raw)['clip']
if type(clip) ~= 'table' then return 1 end
local sha = clip['sha256']
for _, other in ipairs(redis.call('HVALS', KEYS[1])) do
  local its = cjson.decode(other)['clip']
  if type(its) == 'table' and its['sha256'] == sha then return 1 end
end
redis.call('DEL', ARGV[2] .. sha)
return 1
