-- KEYS: lexicons, lexicon info ; ARGV: name, entries JSON, info JSON, entries, bytes,
-- max lexicons, max entries, max bytes (the tenant's, in all).
-- Returns {'created'|'replaced', 0}, or the bound it would pass: {'lexicons'|'entries'|'bytes',
-- what the tenant would then hold}.
local name = ARGV[1]
local existing = redis.call('HEXISTS', KEYS[2], name) == 1
local count = redis.call('HLEN', KEYS[2])
if not existing then count = count + 1 end
if count > tonumber(ARGV[6]) then return {'lexicons', count} end
local entries, bytes = tonumber(ARGV[4]), tonumber(ARGV[5])
local info = redis.call('HGETALL', KEYS[2])
for i = 1, #info, 2 do
  if info[i] ~= name then
    local other = cjson.decode(info[i + 1])
    entries = entries + other.entries
    bytes = bytes + other.size_bytes
  end
end
if entries > tonumber(ARGV[7]) then return {'entries', entries} end
if bytes > tonumber(ARGV[8]) then return {'bytes', bytes} end
redis.call('HSET', KEYS[1], name, ARGV[2])
redis.call('HSET', KEYS[2], name, ARGV[3])
if existing then return {'replaced', 0} end
return {'created', 0}
