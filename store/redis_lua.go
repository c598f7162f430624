package store

// The Lua scripts that make each Redis store operation atomic. Session scripts get the
// session's keys as KEYS[1..4] (meta hash, state, file metadata hash, file data hash)
// and, where needed, the expiry index as KEYS[5]. The owner/entity index key of a
// session is kept in its meta hash (field "lk"), so scripts read it from there: the
// store targets a single Redis server, not a cluster.

// luaRefresh gives every key of the session a full TTL again (ARGV ttl in ms).
const luaRefresh = `
local function refresh(ttl)
  for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ttl) end
  local lk = redis.call('HGET', KEYS[1], 'lk')
  if lk then redis.call('PEXPIRE', lk, ttl) end
  local ok = redis.call('HGET', KEYS[1], 'ok')
  if ok then redis.call('PEXPIRE', ok, ttl) end
end
`

// luaCreate: KEYS[6] is the owner/entity index, KEYS[7] the owner index; ARGV id, owner, entity, created µs,
// used µs, expires µs, ttl ms, creator. Returns 0 when the id is taken.
const luaCreate = luaRefresh + `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
redis.call('HSET', KEYS[1], 'owner', ARGV[2], 'entity', ARGV[3], 'created', ARGV[4], 'used', ARGV[5], 'lk', KEYS[6], 'ok', KEYS[7])
if ARGV[8] ~= '' then redis.call('HSET', KEYS[1], 'creator', ARGV[8]) end
redis.call('ZADD', KEYS[6], ARGV[5], ARGV[1])
redis.call('ZADD', KEYS[7], ARGV[4], ARGV[1])
redis.call('ZADD', KEYS[5], ARGV[6], ARGV[1])
refresh(ARGV[7])
return 1
`

// luaTouch: ARGV id, used µs, expires µs, ttl ms. Returns 0 for an unknown session.
// Microsecond times are exact in Lua's doubles.
const luaTouch = luaRefresh + `
local cur = redis.call('HGET', KEYS[1], 'used')
if not cur then return 0 end
if tonumber(ARGV[2]) > tonumber(cur) then
  redis.call('HSET', KEYS[1], 'used', ARGV[2])
  redis.call('ZADD', redis.call('HGET', KEYS[1], 'lk'), ARGV[2], ARGV[1])
  redis.call('ZADD', KEYS[5], ARGV[3], ARGV[1])
end
refresh(ARGV[4])
return 1
`

// luaDelete: ARGV id. Returns 0 for an unknown session.
const luaDelete = `
local lk = redis.call('HGET', KEYS[1], 'lk')
if not lk then return 0 end
redis.call('ZREM', lk, ARGV[1])
local ok = redis.call('HGET', KEYS[1], 'ok')
if ok then redis.call('ZREM', ok, ARGV[1]) end
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return 1
`

// luaPutState: ARGV blob, size, sha256, created µs, ttl ms.
const luaPutState = luaRefresh + `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'ssize', ARGV[2], 'ssha', ARGV[3], 'sat', ARGV[4])
refresh(ARGV[5])
return 1
`

// luaDeleteState returns 0 when there is no state.
const luaDeleteState = `
if redis.call('DEL', KEYS[2]) == 0 then return 0 end
redis.call('HDEL', KEYS[1], 'ssize', 'ssha', 'sat')
return 1
`

// luaPutFile: ARGV file id, metadata JSON, bytes, ttl ms.
const luaPutFile = luaRefresh + `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[4], ARGV[1], ARGV[3])
refresh(ARGV[4])
return 1
`

// luaDeleteFile: ARGV file id. Returns 0 for an unknown file.
const luaDeleteFile = `
if redis.call('HDEL', KEYS[3], ARGV[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[4], ARGV[1])
return 1
`

// luaSweep: KEYS[1] is the expiry index; ARGV now µs, batch size, key prefix. It
// removes up to a batch of sessions expired at or before now and returns how many.
// Entries whose keys Redis already expired are cleared (and counted) too.
const luaSweep = `
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for _, id in ipairs(ids) do
  local meta = ARGV[3] .. 's:' .. id
  local lk = redis.call('HGET', meta, 'lk')
  if lk then redis.call('ZREM', lk, id) end
  local ok = redis.call('HGET', meta, 'ok')
  if ok then redis.call('ZREM', ok, id) end
  redis.call('DEL', meta, meta .. ':state', meta .. ':files', meta .. ':data')
  redis.call('ZREM', KEYS[1], id)
end
return #ids
`
