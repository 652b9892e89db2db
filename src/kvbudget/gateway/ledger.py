"""A session's steps ordered in Redis (``--record`` with ``--state redis``): the Lua half, in the admission script,
and the Python half a replica runs around it.

With one replica the recorder orders a session's requests in memory (records.py). With several replicas a session's
requests may be in flight on two of them at once, so the order lives in Redis, changed only inside the admission
script (atomic.py): a request takes its place in its session when it is admitted (``place``: in the same script
call as the admission, by its start, with a place id from ``placed``), and its replica's ``leave`` says how it
ended (``mark``: its end and counts, or given up). The rule is records.py's, step for step: the completed places at
the head are numbered, a row is made once the next place has started (its pause is then known), the last one waits
for the next start or the session's end (``flush``, in ``remove``: places still running are dropped, the rest
written, the last without a pause). Each script call returns the rows it made writable (``emitted``) to the replica
that called it, which writes them to its own file: a session's rows are spread over the replicas' files with
distinct, increasing steps, and ``kvbudget trace stats --sessions-span-files`` merges them by session and step.

Times stay the strings Python sent (compared with ``tonumber``; cjson would print a number to 14 digits only); the
pause is computed in Python from the two strings. A session carried by the previous version (its place in the
record kept in ``carried`` as JSON) is taken over by its first request after the upgrade: its step number and
context continue, and the replica that placed it writes the carried row waiting for its pause (``old`` = 1).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from kvbudget.gateway import carried
from kvbudget.gateway.records import Place

LUA = """
local emitted = {}  -- rows made writable by this call, for the replica that called it
local function rec_get(s)
  local text = redis.call('HGET', record, s)
  if text then return cjson.decode(text) end
  return false
end
local function rec_put(s, r) redis.call('HSET', record, s, cjson.encode(r)) end
local function rows() if #emitted == 0 then return '[]' end return cjson.encode(emitted) end
local function fresh(s)  -- a session's first place; a previous version's carried record continues
  local r = {n = 0, step = 0, open = {}}
  local text = redis.call('HGET', carried, s)
  if text then
    local ok, doc = pcall(cjson.decode, text)
    if ok and type(doc) == 'table' and type(doc.record) == 'table' and type(doc.record.step) == 'number' then
      r.step = doc.record.step
      if type(doc.record.context) == 'number' then r.context = doc.record.context end
      if type(doc.record.start_s) == 'number' then r.last = string.format('%.6f', doc.record.start_s) end
      r.old = 1
      doc.record = nil
      redis.call('HSET', carried, s, cjson.encode(doc))
    end
  end
  return r
end
local function advance(s, r)  -- number the completed places at the head; a row is out once the next has started
  while #r.open > 0 and r.open[1].e do
    local p = table.remove(r.open, 1)
    local new = p.p
    if r.context then new = p.p - r.context end
    local row = {sid = s, step = r.step, s = p.s, e = p.e, p = p.p, o = p.o, x = p.x, new = new}
    r.step, r.context, r.last = r.step + 1, p.p + p.o, p.s
    if #r.open > 0 then
      row.next = r.open[1].s
      emitted[#emitted + 1] = row
    else
      r.pending = row
    end
  end
end
local function place(s, a)  -- a request admitted at start a: {place id, its start, 1 when it took over old state}
  local r = rec_get(s)
  local old = 0
  if not r then
    r = fresh(s)
    old = r.old or 0
    r.old = nil
  end
  if r.last and tonumber(a) < tonumber(r.last) then a = r.last end  -- a session's times never go back
  if r.pending then
    r.pending.next = a
    emitted[#emitted + 1] = r.pending
    r.pending = nil
  end
  local id = redis.call('INCR', placed)
  local i = #r.open + 1
  while i > 1 and tonumber(r.open[i - 1].s) > tonumber(a) do i = i - 1 end
  table.insert(r.open, i, {id = id, s = a})
  rec_put(s, r)
  return {id, a, old}
end
local function mark(s, id, e, p, o, x)  -- a place's request ended at e ('': it gave its place up)
  local r = rec_get(s)
  if not r then return end
  for i, q in ipairs(r.open) do
    if q.id == id then
      if e == '' then table.remove(r.open, i) else q.e, q.p, q.o, q.x = e, p, o, x end
      break
    end
  end
  advance(s, r)
  rec_put(s, r)
end
local function flush(s)  -- the session ends: places still running never will; the rest out, the last unpaused
  local r = rec_get(s)
  if not r then return end
  local done = {}
  for _, q in ipairs(r.open) do if q.e then done[#done + 1] = q end end
  r.open = done
  advance(s, r)
  if r.pending then emitted[#emitted + 1] = r.pending end
  redis.call('HDEL', record, s)
end
"""


# -- the Python half: what a replica sends with a request's end, and the rows it is handed to write ---------------


def outcome(place: Place) -> list[str]:
    """A place's end for the ``leave`` script: its end and counts, or given up ('')."""
    if place.end_s is None:
        return ["", "0", "0", ""]
    counts = place.counts
    extras = {"cached": counts["cached_tokens"], "cap": counts["cap"], "dropped": counts["dropped_tokens"]}
    return [repr(place.end_s), str(counts["prompt_tokens"]), str(counts["output_tokens"]), json.dumps(extras)]


def placed(place: Place | None, reply: Sequence[Any], state: str) -> list[dict[str, Any]]:
    """A place taken in Redis (``reply``: its id, its start, 1 when it took over a previous version's record, the
    rows made writable; ``state``: the carried JSON before): ``place`` filled in, and the rows to write."""
    if place is None or not reply or not int(reply[0]):
        return []
    place.id, place.start_s = int(reply[0]), float(reply[1])
    items = carried.rows(reply[3])
    old = carried.old_pending(state) if int(reply[2]) else None
    if old is not None:  # the previous version's row waiting for this start
        items.insert(0, {"row": old[0], "e": str(old[1]), "next": reply[1]})
    return items


def made_writable(rows: str, *ended: str) -> list[dict[str, Any]]:
    """The rows a script call made writable, and those the carried states of a previous version's sessions that
    ended (``ended``) kept waiting (written without a pause, as at any session's end)."""
    items = carried.rows(rows)
    for state in ended:
        old = carried.old_pending(state)
        if old is not None:
            items.append({"row": old[0]})
    return items
