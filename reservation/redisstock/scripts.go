package redisstock

import "github.com/redis/go-redis/v9"

// reserveScript takes a cart, all lines or none.
//
// KEYS[1] the reservation hash, KEYS[2] the expiry queue, then per line and
// location group (in priority order) its avail and held keys.
// ARGV[1] the queue member, ARGV[2] the deadline (Unix ms), ARGV[3] the
// hash's TTL (ms), ARGV[4] the number of lines, then per line its quantity,
// its number of groups and each group's hash field (ITEM:GROUP).
//
// Returns 0 when a line cannot be covered (nothing changed), else the hash
// as HGETALL returns it (a retry with the same id gets the first answer).
var reserveScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.call('HGETALL', KEYS[1])
end
local n = tonumber(ARGV[4])
local a, k = 5, 3
local plan, taken = {}, {}
for i = 1, n do
  local need = tonumber(ARGV[a])
  local ng = tonumber(ARGV[a + 1])
  a = a + 2
  for j = 1, ng do
    local ck, hk, field = KEYS[k], KEYS[k + 1], ARGV[a]
    k, a = k + 2, a + 1
    if need > 0 then
      local avail = tonumber(redis.call('GET', ck) or '0') - (taken[ck] or 0)
      local take = math.min(avail, need)
      if take > 0 then
        plan[#plan + 1] = {ck, hk, field, take}
        taken[ck] = (taken[ck] or 0) + take
        need = need - take
      end
    end
  end
  if need > 0 then
    return 0
  end
end
for _, p in ipairs(plan) do
  redis.call('DECRBY', p[1], p[4])
  redis.call('INCRBY', p[2], p[4])
  redis.call('HINCRBY', KEYS[1], p[3], p[4])
end
redis.call('HSET', KEYS[1], '_state', 'held', '_deadline', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
return redis.call('HGETALL', KEYS[1])
`)

// beginClaimScript decides a claim against expiry: a held reservation
// before its deadline becomes "claiming" and leaves the expiry queue.
//
// KEYS[1] the reservation hash, KEYS[2] the expiry queue, KEYS[3] the
// shop's set of claiming reservations; ARGV[1] the queue member, ARGV[2]
// now (Unix ms), ARGV[3] the reservation id. Returns the state after the
// call ("began" when this call made it "claiming", "claiming" when an
// earlier claim did) followed by the hash (HGETALL), or "missing".
var beginClaimScript = redis.NewScript(`
local st = redis.call('HGET', KEYS[1], '_state')
if not st then
  return {'missing'}
end
if st == 'held' then
  if tonumber(redis.call('HGET', KEYS[1], '_deadline')) <= tonumber(ARGV[2]) then
    st = 'due'
  else
    redis.call('HSET', KEYS[1], '_state', 'claiming')
    redis.call('ZREM', KEYS[2], ARGV[1])
    redis.call('SADD', KEYS[3], ARGV[3])
    st = 'began'
  end
end
local out = redis.call('HGETALL', KEYS[1])
table.insert(out, 1, st)
return out
`)

// finishClaimScript is the Redis half of a claim: the hold ends as sold
// (its units stay taken from avail), or, with ARGV[2] "released", as given
// back (a repair's verdict on a claim that died between its halves).
//
// KEYS[1] the reservation hash, KEYS[2] the shop's set of claiming
// reservations, then per line its held and avail keys; ARGV[1] the
// reservation id, ARGV[2] the final state (claimed or released), ARGV[3]
// the retention (ms), then the quantities in the lines' order. Returns 1
// when it ended the hold, 0 when the hold was not "claiming" (already done).
var finishClaimScript = redis.NewScript(`
redis.call('SREM', KEYS[2], ARGV[1])
if redis.call('HGET', KEYS[1], '_state') ~= 'claiming' then
  return 0
end
local q = 4
for i = 3, #KEYS, 2 do
  redis.call('DECRBY', KEYS[i], ARGV[q])
  if ARGV[2] == 'released' then
    redis.call('INCRBY', KEYS[i + 1], ARGV[q])
  end
  q = q + 1
end
redis.call('HSET', KEYS[1], '_state', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`)

// returnScript ends a held reservation and gives its units back: a release
// (any time) or an expiry (only once due).
//
// KEYS[1] the reservation hash, KEYS[2] the expiry queue, then per line its
// avail and held keys; ARGV[1] the queue member, ARGV[2] the new state
// (released or expired), ARGV[3] now (Unix ms; 0 for a release), ARGV[4]
// the retention (ms), then the quantities. Returns the state found
// ("held" when it ended the hold, "missing", or another state untouched;
// "early" for an expiry before the deadline).
var returnScript = redis.NewScript(`
local st = redis.call('HGET', KEYS[1], '_state')
if not st then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return 'missing'
end
if st ~= 'held' then
  return st
end
if tonumber(ARGV[3]) > 0 and tonumber(redis.call('HGET', KEYS[1], '_deadline')) > tonumber(ARGV[3]) then
  return 'early'
end
local q = 5
for i = 3, #KEYS, 2 do
  redis.call('INCRBY', KEYS[i], ARGV[q])
  redis.call('DECRBY', KEYS[i + 1], ARGV[q])
  q = q + 1
end
redis.call('HSET', KEYS[1], '_state', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('ZREM', KEYS[2], ARGV[1])
return 'held'
`)
