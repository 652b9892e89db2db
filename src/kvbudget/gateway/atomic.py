"""The Lua script through which every replica changes the shared admission state (gateway/shared.py).

Redis runs a script atomically, so each operation below reads and writes the state in one step: ``enter`` /
``queue`` (a request's session: resident, admitted to the least-loaded healthy upstream with a free slot, or
queued behind the sessions already waiting; a request entering counts in the session's ``flight``), ``poll`` (a
replica's waiters: heartbeat, grant the queue's head the free slots, which of them got one; a granted waiter's
requests count in ``flight``), ``leave`` (a request is done: its flight count returned, the session's carried
state written, and the session ended when an end was asked and nothing of it is in flight on any replica),
``place`` (a request admitted from the queue takes its place in the session's record; one admitted at once takes
it in its ``enter``; its ``leave`` marks it: ledger.py), ``move`` (a session off an upstream out of health),
``touch`` (sessions seen now), ``end`` (now, or when its requests in flight anywhere are done), ``give_up`` (a
waiter leaves the queue; granted meanwhile, its slot goes on), ``drop`` (requests a poll counted that gave up),
``reap`` (end the sessions idle past the timeout), ``counts`` and ``retry`` (ms until the soonest idle expiry).
The time is Redis's own ``TIME`` (scripts replicate their effects, Redis >= 5).

A slot is freed by ``remove`` only, which does nothing for a session no longer resident, so an end racing a
request's end (``DELETE`` against the last ``leave``, or two replicas ending one session) frees it once; and a
request's ``leave`` for a session already gone creates nothing (the flight count lives only while resident).
A session granted from the queue is ``claim``-ed until its replica's poll counts its requests in flight, so an
end arriving between the grant and that poll waits for them too. Requests counted by a replica that died never
leave: a session in flight but not seen for ``stale`` ms (the live replicas refresh theirs every second) is no
longer held up by them, so an end frees it at once, as it did before requests were counted.
"""

from __future__ import annotations

from kvbudget.gateway.ledger import LUA as LEDGER

# KEYS: where, seen, load, queue, beat, ticket, held, flight, claim, ending, carried, record, placed (shared.KEYS).
# ARGV: op, slots per upstream, idle ms, stale ms, max queue, session, keyed ("1": ids are "key/id" and each key's
# sessions are counted in ``held``), the session's key quota, n healthy, healthy upstreams..., ids...
HEAD = """
local where, seen, load, queue, beat, ticket, held = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local flight, claim, ending, carried = KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local record, placed = KEYS[12], KEYS[13]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local op, slots, idle, stale = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local max_queue, sid = tonumber(ARGV[5]), ARGV[6]
local keyed, quota, nh = ARGV[7] == '1', tonumber(ARGV[8]), tonumber(ARGV[9])
local healthy, ids = {}, {}
for i = 1, nh do healthy[i] = ARGV[9 + i] end
for i = 10 + nh, #ARGV do ids[#ids + 1] = ARGV[i] end
"""

BODY = """

local function hold(s, change)  -- a key's sessions, resident or waiting
  if keyed then redis.call('HINCRBY', held, string.match(s, '^[^/]*'), change) end
end
local function over_quota(s)
  return keyed and tonumber(redis.call('HGET', held, string.match(s, '^[^/]*')) or '0') >= quota
end

local function pick()
  local best, least = false, nil
  for _, up in ipairs(healthy) do
    local n = tonumber(redis.call('HGET', load, up) or '0')
    if n < slots and (least == nil or n < least) then best, least = up, n end
  end
  return best
end
local function admit(s, up)
  redis.call('HSET', where, s, up)
  redis.call('ZADD', seen, now, s)
  redis.call('HINCRBY', load, up, 1)
  redis.call('ZREM', queue, s)
  redis.call('ZREM', beat, s)
end
local function remove(s)  -- the one place a slot is freed: nothing for a session no longer resident
  local up = redis.call('HGET', where, s)
  if not up then return false end
  local state = redis.call('HGET', carried, s) or ''
  flush(s)  -- its record's last rows (ledger.py)
  redis.call('HDEL', where, s)
  redis.call('ZREM', seen, s)
  redis.call('HINCRBY', load, up, -1)
  redis.call('HDEL', flight, s)
  redis.call('HDEL', claim, s)
  redis.call('SREM', ending, s)
  redis.call('HDEL', carried, s)
  hold(s, -1)
  return state
end
local function busy(s)  -- requests of the session in flight on a live replica, or granted and not yet polled
  if tonumber(redis.call('HGET', flight, s) or '0') <= 0 and redis.call('HEXISTS', claim, s) == 0 then
    return false
  end
  -- a replica refreshes 'seen' of its sessions in flight at least once a second: not seen for 'stale' ms, the
  -- replica that counted them died (its requests will never leave), so they hold nothing up
  return tonumber(redis.call('ZSCORE', seen, s) or '0') > now - stale
end
local function prune()
  for _, s in ipairs(redis.call('ZRANGEBYSCORE', beat, '-inf', now - stale)) do
    if redis.call('ZREM', queue, s) == 1 then hold(s, -1) end
    redis.call('ZREM', beat, s)
  end
end
local function grant()
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)
    if #head == 0 then return end
    local up = pick()
    if not up then return end
    admit(head[1], up)
    redis.call('HSET', claim, head[1], 1)
  end
end

if op == 'enter' or op == 'queue' then
  local up = redis.call('HGET', where, sid)
  if not up then
    prune()
    grant()
    up = redis.call('HGET', where, sid)
  end
  if up then
    redis.call('ZADD', seen, 'XX', now, sid)
    redis.call('HINCRBY', flight, sid, 1)
    return taken('resident', up, redis.call('HGET', carried, sid) or '')
  end
  if redis.call('ZSCORE', queue, sid) then
    if op == 'queue' then redis.call('ZADD', beat, now, sid) return {'queued'} end
    return {'wait'}
  end
  if redis.call('ZCARD', queue) == 0 then
    up = pick()
    if up then
      if over_quota(sid) then return {'quota'} end
      admit(sid, up)
      hold(sid, 1)
      redis.call('HSET', flight, sid, 1)
      return taken('admitted', up, '')
    end
  end
  if op == 'enter' then return {'wait'} end
  if redis.call('ZCARD', queue) >= max_queue then return {'full'} end
  if over_quota(sid) then return {'quota'} end
  redis.call('ZADD', queue, redis.call('INCR', ticket), sid)
  redis.call('ZADD', beat, now, sid)
  hold(sid, 1)
  return {'queued'}
elseif op == 'place' then  -- ids: the start of a request admitted from the queue
  if redis.call('HEXISTS', where, sid) == 0 then return {0, '', 0, '[]', ''} end
  local state = redis.call('HGET', carried, sid) or ''
  local p = place(sid, ids[1])
  return {p[1], p[2], p[3], rows(), state}
elseif op == 'poll' then  -- ids: session, its requests waiting here, session, requests...
  local waiting = {}
  for i = 1, #ids, 2 do waiting[#waiting + 1] = {ids[i], tonumber(ids[i + 1])} end
  for _, w in ipairs(waiting) do redis.call('ZADD', beat, 'XX', now, w[1]) end
  prune()
  grant()
  local found = {}
  for i, w in ipairs(waiting) do
    local s = w[1]
    local up = redis.call('HGET', where, s)
    if up then
      redis.call('HINCRBY', flight, s, w[2])
      redis.call('HDEL', claim, s)
    else
      up = ''
      if not redis.call('ZSCORE', queue, s) then  -- pruned while its replica stalled: back in the queue
        redis.call('ZADD', queue, redis.call('INCR', ticket), s)
        redis.call('ZADD', beat, now, s)
        hold(s, 1)
      end
    end
    found[i] = up
  end
  return found
elseif op == 'move' then
  local up = redis.call('HGET', where, sid)
  if not up then return '' end
  for _, h in ipairs(healthy) do if h == up then return up end end
  local new = pick()
  if not new then return up end
  redis.call('HSET', where, sid, new)
  redis.call('HINCRBY', load, up, -1)
  redis.call('HINCRBY', load, new, 1)
  return new
elseif op == 'touch' then
  for _, s in ipairs(ids) do redis.call('ZADD', seen, 'XX', now, s) end
  return 0
elseif op == 'leave' then  -- ids: the session's carried state (JSON, '' to keep it), '1' when this request ends it,
  -- and, when it has a place in the record: its id, its end ('' = given up), prompt, output, the row's extras
  if redis.call('HEXISTS', where, sid) == 0 then return {0, '', '[]'} end  -- gone already: nothing to free or count
  if ids[3] then mark(sid, tonumber(ids[3]), ids[4], tonumber(ids[5]), tonumber(ids[6]), ids[7]) end
  if ids[1] ~= '' then redis.call('HSET', carried, sid, ids[1]) end
  if ids[2] == '1' then redis.call('SADD', ending, sid) end
  if redis.call('HINCRBY', flight, sid, -1) <= 0 then redis.call('HDEL', flight, sid) end
  redis.call('ZADD', seen, 'XX', now, sid)
  if redis.call('SISMEMBER', ending, sid) == 1 and not busy(sid) then
    local state = remove(sid)
    grant()
    return {1, state, rows()}
  end
  return {0, '', rows()}
elseif op == 'end' then  -- {1, state}: ended now; {2, ''}: when its requests in flight are done; {0, ''}: not resident
  if redis.call('HEXISTS', where, sid) == 0 then return {0, '', '[]'} end
  if busy(sid) then
    redis.call('SADD', ending, sid)
    return {2, '', '[]'}
  end
  local state = remove(sid)
  grant()
  return {1, state, rows()}
elseif op == 'give_up' then
  if redis.call('ZREM', queue, sid) == 1 then hold(sid, -1) end
  redis.call('ZREM', beat, sid)
  if redis.call('HDEL', claim, sid) == 1 and tonumber(redis.call('HGET', flight, sid) or '0') <= 0 then
    remove(sid)  -- granted as its waiter gave up (before its replica polled): none of its requests will run
    grant()
  end
  return 0
elseif op == 'drop' then  -- ids: how many requests a poll counted in flight that will not run (they gave up)
  if redis.call('HEXISTS', where, sid) == 0 then return 0 end
  if redis.call('HINCRBY', flight, sid, -tonumber(ids[1])) <= 0 then
    redis.call('HDEL', flight, sid)
    if redis.call('HEXISTS', claim, sid) == 0 then
      remove(sid)  -- granted to requests that all gave up: nothing of it ran, the slot goes on
      grant()
      return 1
    end
  end
  return 0
elseif op == 'reap' then
  local expired = redis.call('ZRANGEBYSCORE', seen, '-inf', now - idle)
  local states = {}
  for i, s in ipairs(expired) do states[i] = remove(s) end
  prune()
  grant()
  local gone = {}
  for _, s in ipairs(ids) do
    if redis.call('HEXISTS', where, s) == 0 then gone[#gone + 1] = s end
  end
  return {expired, gone, states, rows()}
elseif op == 'counts' then
  return {redis.call('HGETALL', load), redis.call('ZCARD', queue)}
elseif op == 'retry' then
  local oldest = redis.call('ZRANGE', seen, 0, 0, 'WITHSCORES')
  if #oldest == 0 then return idle end
  return tonumber(oldest[2]) + idle - now
end
return redis.error_reply('unknown op ' .. op)
"""

# a request admitted with a start (ids[1], only with --record) takes its place in the session's record at once
TAKEN = """
local function taken(how, up, state)
  if not ids[1] then return {how, up, state} end
  local p = place(sid, ids[1])
  return {how, up, state, p[1], p[2], p[3], rows()}
end
"""

SCRIPT = HEAD + LEDGER + TAKEN + BODY
