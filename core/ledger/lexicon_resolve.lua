-- KEYS: lexicons, default ; ARGV: names (none: the tenant's default, if one is set).
-- Returns name, entries JSON (nil where there is no such lexicon), name, entries...
local names = ARGV
if #names == 0 then
  local default = redis.call('GET', KEYS[2])
  if not default then return {} end
  names = {default}
end
local out = {}
for _, name in ipairs(names) do
  out[#out + 1] = name
  out[#out + 1] = redis.call('HGET', KEYS[1], name)
end
return out
