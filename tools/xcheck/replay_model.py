#!/usr/bin/env python3
"""Independent model of `kvsim replay` in demand mode with --cost constant:step=1ms,
prefill-token=0ps, for paged:block=16, sliding-window:block=16, dense-static:reserve=max-tokens
and dynamic:growth=double, on Llama-3.1-8B (one full-attention group), Gemma-3-27B (a full
group and a sliding-window group of 1024), Mistral-7B-v0.1 (one sliding group of 4096) or
Phi-3-mini-4k (one sliding group of 2047, a window off the block grid).

Usage: replay_model.py [--kvsim PATH] [--model NAME] [-v] TRACE.csv [KVSIM_JSON]
(runs kvsim itself when no JSON is given; PATH defaults to $KVSIM, else build-rel/src/kvsim;
NAME defaults to llama-3.1-8b). Prints the figures that differ (all of them with -v) and exits
1 on any mismatch.

Written from docs/replay.md, not from the engine's code, so that the two can disagree. The
exceptions, where the docs leave the answer open, follow the engine:
  * the split of internal fragmentation at the allocated peak counts the requests whose calls
    come later in the peak's step as carried by the slopes of their last call (docs/replay.md),
    so it depends on where a request's events fall (see `Model.next_event`);
  * per layer group, the peaks and quantiles are of the values held during a step (taken
    after the step's calls, without a copy's transient), and the split at the allocated peak
    is taken at the peak of the total bytes;
  * dynamic: a call that grows several groups' buffers places all the new buffers (in group
    order) before freeing the old ones, and its transient is the sum of the old buffers.

Rules modelled (per layer group g with window W_g, 0 for full attention; t = positions held):
  * every step lasts STEP ns; at its start, arrivals/cancellations due at or before the start
    are taken (arrival first at one instant); then running requests grow by one token, then
    every queued request is admitted, holding prompt + 1 positions (prompt if output is 0);
  * a request with output m finishes at the end of the step producing token m;
  * a cancellation inside a step frees the request at its own instant; one at a boundary
    frees it before the next step;
  * when nothing is running or queued, time jumps to the next arrival;
  * effective tokens: min(t, W) on a window group (README, "The words"); positions held before
    t - W are outside the window;
  * paged: ceil(t / 16) blocks on every group, windows or not;
  * sliding-window: as paged, but a call at t tokens of which k are this step's (k = t at
    admission, 1 when decoding) starts with c = t - k computed and drops the blocks wholly
    before position c - W + 1;
  * dense-static: a row of prompt + planned output (the model's length if that reaches it),
    min(W, row) of it on a window group, used as a ring;
  * dynamic: per group a buffer of max(needed, 2 x capacity) positions, needed = t, or
    min(t, W) on a window group, where the buffer also stops at W and is used as a ring.
Allocation orders within a step (they matter to the peaks within a step: the dynamic
arena's copy transients, and a window's blocks freed by one request's call before another's
takes new ones): growth events in running order (admission order, as vLLM's scheduler walks
self.running), then admissions in queue order.
"""
import bisect
import collections
import csv
import heapq
import json
import math
import os
import subprocess
import sys
from decimal import Decimal

STEP = 1_000_000
BLOCK = 16
KVSIM = os.environ.get("KVSIM", "build-rel/src/kvsim")
ALLOCS = "paged:block=16,sliding-window:block=16,dense-static:reserve=max-tokens,dynamic:growth=double"

# `kvsim models` / `kvsim size --model NAME --tokens 1`: max model length, and per layer group
# (name, window W or 0, bytes per position across the group's layers).
MODELS = {
    "llama-3.1-8b": (131072, [("full", 0, 131072)]),
    "gemma-3-27b": (131072, [("full", 0, 81920), ("sliding 1024", 1024, 425984)]),
    "mistral-7b-v0.1": (32768, [("sliding 4096", 4096, 131072)]),
    "phi-3-mini-4k": (4096, [("sliding 2047", 2047, 393216)]),  # a window off the block grid
}
MODEL = "llama-3.1-8b"
MAXLEN, GROUPS = MODELS[MODEL]

PARTS = ("tail", "reservation", "padding", "duplicate", "outside_window")


def set_model(name):
    global MODEL, MAXLEN, GROUPS
    MODEL = name
    MAXLEN, GROUPS = MODELS[name]


def window(g):
    return GROUPS[g][1]


def bpp(g):
    return GROUPS[g][2]


def effective(t, g):
    """Positions the model must keep (one sample): the last W on a window group."""
    w = window(g)
    return min(t, w) if w else t


def secs_to_ns(text):
    d = Decimal(text) * 1_000_000_000
    assert d == d.to_integral_value(), text
    return int(d)


class Req:
    __slots__ = ("ordinal", "id", "arr", "P", "m", "maxtok", "cancel", "planned", "state",
                 "admit_step", "admit_ns", "end_ns", "ttft", "e2e")


def read_trace(path):
    reqs = []
    with open(path, newline="") as f:
        for i, row in enumerate(csv.DictReader(f)):
            r = Req()
            r.ordinal = i + 1
            r.id = row["id"]
            r.arr = secs_to_ns(row["arrival"])
            r.P = int(row["prompt_tokens"])
            r.m = int(row["output_tokens"])
            mt = (row.get("max_tokens") or "").strip()
            r.maxtok = int(mt) if mt else None
            ca = (row.get("cancel_at") or "").strip()
            r.cancel = secs_to_ns(ca) if ca else None
            r.planned = r.maxtok if r.maxtok is not None else r.m
            r.state = "pending"
            r.admit_step = None
            r.ttft = r.e2e = None
            reqs.append(r)
    for a, b in zip(reqs, reqs[1:]):
        assert a.arr <= b.arr, "trace must be in arrival order"
    return reqs


# ---------------------------------------------------------------- first-fit arena (dynamic)
class Arena:
    def __init__(self):
        self.holes = []  # sorted [offset, size] below tail
        self.tail = 0
        self.high = 0
        self.allocated = 0
        self.fragmented = 0

    def free_bytes(self):
        return self.high - self.allocated

    def largest(self):
        best = self.high - self.tail
        for _, s in self.holes:
            best = max(best, s)
        return best

    def ratio(self):
        fr = self.free_bytes()
        lg = self.largest()
        return 1.0 - lg / fr if lg < fr else 0.0

    def alloc(self, b):
        for i, (o, s) in enumerate(self.holes):
            if s >= b:
                if s > b:
                    self.holes[i] = [o + b, s - b]
                else:
                    del self.holes[i]
                self.allocated += b
                return o
        # docs/replay.md: a placement that forced the arena to grow while enough was free;
        # one that ends within the high-water mark takes room the arena already holds.
        if self.tail + b > self.high and self.free_bytes() >= b:
            self.fragmented += 1
        o = self.tail
        self.tail += b
        self.high = max(self.high, self.tail)
        self.allocated += b
        return o

    def free(self, o, b):
        self.allocated -= b
        start, end = o, o + b
        i = bisect.bisect_left(self.holes, [o, 0])
        if i < len(self.holes) and self.holes[i][0] == end:
            end = self.holes[i][0] + self.holes[i][1]
            del self.holes[i]
        if i > 0 and self.holes[i - 1][0] + self.holes[i - 1][1] == start:
            start = self.holes[i - 1][0]
            del self.holes[i - 1]
            i -= 1
        if end == self.tail:
            self.tail = start
        else:
            self.holes.insert(i, [start, end - start])


# ---------------------------------------------------------------- allocator models
# Each holds per-request state, a tuple with one entry per layer group. `op(r, t, k)` brings
# the holding to t tokens, k of them this step's (admission when new), and returns the
# transient bytes (old buffers copied); `parts_with(r, t, st, g)` gives what the state `st`
# holds on group g at length t: (allocated, tail, reservation, padding, duplicate,
# outside_window) in positions; `action_at(r, t)` the token count at which the allocator
# must act again.
class Allocator:
    def __init__(self):
        self.st = {}
        self.total = 0  # allocated bytes
        self.high = 0   # their high-water mark

    def state(self, r):
        return self.st[r.ordinal]

    def parts(self, r, t, g):
        return self.parts_with(r, t, self.st[r.ordinal], g)

    def bytes_of(self, r, st):
        return sum(self.parts_with(r, 0, st, g)[0] * bpp(g) for g in range(len(GROUPS)))

    def set_state(self, r, st):
        old = self.st.get(r.ordinal)
        self.total += self.bytes_of(r, st) - (self.bytes_of(r, old) if old is not None else 0)
        self.high = max(self.high, self.total)
        self.st[r.ordinal] = st

    def release(self, r):
        self.total -= self.bytes_of(r, self.st.pop(r.ordinal))

    def reserved(self):
        return self.high  # a pool (or a table) sized for the run: allocated bytes' high water

    def ext_ratio(self):
        return 0.0


class Paged(Allocator):
    """Per group (dropped, blocks): blocks [dropped, blocks) held."""
    name = "paged:block=16"
    drops = False

    def op(self, r, t, k):
        old = self.st.get(r.ordinal, ((0, 0),) * len(GROUPS))
        new = []
        for g, (d, n) in enumerate(old):
            w = window(g)
            if self.drops and w:
                d = max(d, max(0, (t - k) - w + 1) // BLOCK)
            n = max(n, -(-t // BLOCK))
            # vLLM's bound: past the window a decoding sequence holds at most this many
            assert not (self.drops and w and k == 1) or n - d <= -(-(w - 1) // BLOCK) + 1, (r.id, t)
            new.append((d, n))
        self.set_state(r, tuple(new))
        return 0

    def parts_with(self, r, t, st, g):
        d, n = st[g]
        lo, hi = d * BLOCK, n * BLOCK
        w = window(g)
        outside = max(0, min(hi, t - w) - lo) if w else 0
        return (hi - lo, hi - t, 0, 0, 0, outside)

    def action_at(self, r, t):
        held = self.st[r.ordinal]
        nxt = held[0][1] * BLOCK + 1  # a new block (every group has as many)
        if self.drops:
            for g, (d, n) in enumerate(held):
                w = window(g)
                if w:  # the first held block leaves the window (a decode step at t starts at t - 1)
                    nxt = min(nxt, max(t + 1, (d + 1) * BLOCK + w))
        return nxt


class SlidingWindow(Paged):
    name = "sliding-window:block=16"
    drops = True


class Dense(Allocator):
    """Per group the row's positions."""
    name = "dense-static:reserve=max-tokens"

    def row(self, r):
        if r.planned >= MAXLEN - r.P:
            return MAXLEN
        return r.P + r.planned

    def op(self, r, t, k):
        if r.ordinal not in self.st:
            R = self.row(r)
            self.set_state(r, tuple(min(R, window(g)) if window(g) else R for g in range(len(GROUPS))))
        assert t <= self.row(r)
        return 0

    def parts_with(self, r, t, st, g):
        return ring_parts(r, t, st[g])

    def action_at(self, r, t):
        return math.inf  # a ring fills at W, where the engine calls anyway (next_event)


def ring_parts(r, t, cap):
    """A buffer of `cap` positions, used as a ring once full: unfilled room is reservation up
    to the request's limit (prompt + planned output) and padding past it."""
    limit = r.P + r.planned
    unfilled = max(0, cap - t)
    pad = max(0, cap - max(t, limit))
    return (cap, 0, unfilled - pad, pad, 0, 0)


class Dynamic(Allocator):
    """Per group (offset, capacity)."""
    name = "dynamic:growth=double"

    def __init__(self):
        super().__init__()
        self.arena = Arena()
        self.copied = 0

    def op(self, r, t, k):
        old = self.st.get(r.ordinal, ((-1, 0),) * len(GROUPS))
        new = list(old)
        moves = []
        # every buffer that must grow is placed (in group order) while the old ones still
        # hold their contents; then the old ones are copied and freed
        for g, (off, cap) in enumerate(old):
            w = window(g)
            need = min(t, w) if w else t
            if need > cap:
                grown = min(max(need, 2 * cap), w) if w else max(need, 2 * cap)
                new[g] = (self.arena.alloc(grown * bpp(g)), grown)
                moves.append(g)
        transient = 0
        for g in moves:
            off, cap = old[g]
            if off >= 0:
                self.copied += cap * bpp(g)
                transient += cap * bpp(g)
                self.arena.free(off, cap * bpp(g))
        self.set_state(r, tuple(new))
        return transient

    def parts_with(self, r, t, st, g):
        return ring_parts(r, t, st[g][1])

    def action_at(self, r, t):
        # a buffer is full (a ring, full at W, never grows)
        caps = [cap for g, (_, cap) in enumerate(self.st[r.ordinal]) if not window(g) or cap < window(g)]
        return min(caps, default=math.inf) + 1

    def release(self, r):
        for g, (off, cap) in enumerate(self.st[r.ordinal]):
            if cap > 0:
                self.arena.free(off, cap * bpp(g))
        super().release(r)

    def reserved(self):
        return self.arena.high

    def ext_ratio(self):
        return self.arena.ratio()


class Books:
    """Per-allocator figures. Integrals in positions x ns per group; histograms per group in
    positions and in total bytes."""

    def __init__(self, alloc):
        self.a = alloc
        G = len(GROUPS)
        self.int = [collections.Counter() for _ in range(G)]
        self.int_reserved = 0
        self.hist = {"eff": collections.Counter(), "alloc": collections.Counter(), "res": collections.Counter()}
        self.ghist = [{"eff": collections.Counter(), "alloc": collections.Counter()} for _ in range(G)]
        self.gpeak = [{"eff": (0, None), "alloc": (0, None)} for _ in range(G)]
        self.peak = 0
        self.peak_at = None
        self.peak_split = [dict.fromkeys(PARTS, 0) for _ in range(G)]
        self.res_peak = 0
        self.res_peak_at = None
        self.ext_int = 0.0
        self.ext_max = 0.0
        self.ext_ratio = 0.0
        self.ev = {}      # ordinal -> next event tokens
        self.rec = {}     # ordinal -> (t0, step0, state at the call, sloped?) for carried values
        self.reserved_now = 0


def next_event(bk, r, t):
    """The token count at which the engine next calls the allocator for a decoding request:
    the allocator's own action, the request's end, and every change of a figure's slope (the
    window's start reaching the first position, W, and passing the prompt, P + W: the latter
    changes the effective slope only with n samples, but the engine calls there anyway)."""
    nxt = min(bk.a.action_at(r, t), r.P + r.m)
    for g in range(len(GROUPS)):
        w = window(g)
        if w:
            for at in (w, r.P + w):
                if at > t:
                    nxt = min(nxt, at)
    assert nxt > t
    return nxt


def run_model(reqs, kinds=(Paged, SlidingWindow, Dense, Dynamic)):
    allocs = [k() for k in kinds]
    books = [Books(a) for a in allocs]
    G = len(GROUPS)
    N = len(reqs)
    start = reqs[0].arr
    now = start
    step = 0
    ai = 0
    cq = []
    queue = collections.deque()
    running = []  # admitted and live, admission order
    rep = collections.Counter()
    ttft, e2e, waiting, tpot = [], [], [], []
    queue_int = 0
    queue_mark = start
    queued = 0
    queue_max = 0
    eff_peak, eff_peak_at = 0, None
    iterations = 0

    def tokens(r, s):
        return r.P + (s - r.admit_step) + (1 if r.m > 0 else 0)

    def carried(bk, r, s, g):
        """The request's parts on group g as the engine carries them to step s: the values of
        its last call, moved along that call's slopes (none when its next event was due one
        token later)."""
        t0, s0, st, sloped = bk.rec[r.ordinal]
        p0 = bk.a.parts_with(r, t0, st, g)
        if not sloped:
            return list(p0)
        p1 = bk.a.parts_with(r, t0 + 1, st, g)
        return [a + (b - a) * (s - s0) for a, b in zip(p0, p1)]

    def after_op(bk, transient, t_now, s):
        a = bk.a
        reserved = a.reserved()
        bk.reserved_now = reserved
        v = a.total + transient
        if v > bk.peak:
            bk.peak = v
            bk.peak_at = t_now
            # the split the engine holds at this call: each request's figures carried along
            # the slopes of its last call
            for g in range(G):
                sp = dict.fromkeys(PARTS, 0)
                for r in running:
                    if r.ordinal in bk.rec:
                        for k, x in zip(PARTS, carried(bk, r, s, g)[1:]):
                            sp[k] += x
                bk.peak_split[g] = sp
        if reserved > bk.res_peak:
            bk.res_peak = reserved
            bk.res_peak_at = t_now
        bk.ext_ratio = a.ext_ratio()
        bk.ext_max = max(bk.ext_max, bk.ext_ratio)

    def call(bk, r, t, k, s):
        """The allocator brings r to t tokens (k of them this step's); then the next event is
        scheduled, and the record for carrying made. True when r finishes this step."""
        tr = bk.a.op(r, t, k)
        for g in range(G):
            p = bk.a.parts(r, t, g)
            assert p[0] == effective(t, g) + sum(p[1:]) and min(p) >= 0, (bk.a.name, r.id, t, g, p)
        fin = t >= r.P + r.m
        if fin:
            bk.ev.pop(r.ordinal, None)
            bk.rec[r.ordinal] = (t, s, bk.a.state(r), False)
        else:
            nxt = next_event(bk, r, t)
            bk.ev[r.ordinal] = nxt
            bk.rec[r.ordinal] = (t, s, bk.a.state(r), nxt > t + 1)
        after_op(bk, tr, T, s)
        return fin

    def release_in(bk, r):
        bk.a.release(r)
        bk.ev.pop(r.ordinal, None)
        bk.rec.pop(r.ordinal, None)
        after_op(bk, 0, now, step)

    def release(r, at):
        for bk in books:
            release_in(bk, r)
        running.remove(r)
        r.end_ns = at

    # Spans: between steps and releases every figure is constant; integrate them exactly.
    def add_span(d, s):
        if d <= 0:
            return
        for bk in books:
            eff_b = alloc_b = 0
            for g in range(G):
                sums = [0] * 7  # effective, allocated, tail, reservation, padding, duplicate, outside
                for r in running:
                    t = tokens(r, s)
                    sums[0] += effective(t, g)
                    for i, x in enumerate(bk.a.parts(r, t, g)):
                        sums[i + 1] += x
                for key, x in zip(("eff", "alloc") + PARTS, sums):
                    bk.int[g][key] += x * d
                bk.ghist[g]["eff"][sums[0]] += d
                bk.ghist[g]["alloc"][sums[1]] += d
                eff_b += sums[0] * bpp(g)
                alloc_b += sums[1] * bpp(g)
            assert alloc_b == bk.a.total, (bk.a.name, alloc_b, bk.a.total)
            bk.int_reserved += bk.reserved_now * d
            bk.hist["eff"][eff_b] += d
            bk.hist["alloc"][alloc_b] += d
            bk.hist["res"][bk.reserved_now] += d
            bk.ext_int += bk.ext_ratio * d

    def note_queue(at):
        nonlocal queue_int, queue_mark
        if at > queue_mark:
            queue_int += queued * (at - queue_mark)
            queue_mark = at

    def process(until, mid):
        nonlocal ai, queued, queue_max, span_mark
        due = (lambda x: x < until) if mid else (lambda x: x <= until)
        while True:
            arr = ai < N and due(reqs[ai].arr)
            can = bool(cq) and due(cq[0][0])
            if not arr and not can:
                return
            if arr and (not can or reqs[ai].arr <= cq[0][0]):
                r = reqs[ai]
                ai += 1
                rep["total"] += 1
                if r.P + r.m > MAXLEN:
                    rep["refused_too_long"] += 1
                    r.state = "refused"
                    continue
                note_queue(r.arr)
                queue.append(r)
                queued += 1
                queue_max = max(queue_max, queued)
                r.state = "queued"
                if r.cancel is not None:
                    heapq.heappush(cq, (r.cancel, r.ordinal, r))
            else:
                at, _, r = heapq.heappop(cq)
                if r.state == "queued":
                    rep["cancelled_queued"] += 1
                    note_queue(at)
                    queued -= 1
                    queue.remove(r)
                    r.state = "cancelled"
                elif r.state == "running":
                    rep["cancelled_running"] += 1
                    rep["generated_tokens"] += step - r.admit_step
                    r.state = "cancelled"
                    if mid:
                        add_span(at - span_mark, step)
                        span_mark = at
                    release(r, at if mid else now)

    span_mark = now
    T = now
    while True:
        process(now, False)
        if not running and not queue:
            if ai >= N:
                break
            # idle until the next arrival
            add_span(reqs[ai].arr - now, step)
            now = reqs[ai].arr
            continue
        # ---- one step at `now`
        iterations += 1
        T = now
        finishing = {id(bk): [] for bk in books}
        first = []
        for bk in books:
            for r in running:  # admission order
                t = tokens(r, step)
                if bk.ev.get(r.ordinal) != t:
                    continue
                # what was carried to the step before must be what the old holding gives
                # there (the model's own check that no slope change was missed)
                for g in range(G):
                    assert carried(bk, r, step - 1, g) == list(bk.a.parts(r, t - 1, g)), \
                        (bk.a.name, r.id, t, g, bk.rec[r.ordinal])
                if call(bk, r, t, 1, step):
                    finishing[id(bk)].append(r)
        # consistency: every running request's holding covers its tokens (no missed event)
        for r in running:
            t = tokens(r, step)
            for bk in books:
                for g in range(G):
                    assert bk.a.parts(r, t, g)[1] >= 0, (bk.a.name, r.id, t, g)
        while queue:
            r = queue.popleft()
            note_queue(T)
            queued -= 1
            r.state = "running"
            r.admit_step = step
            r.admit_ns = T
            waiting.append(T - r.arr)
            rep["prompt_tokens"] += r.P
            running.append(r)
            t = tokens(r, step)
            for bk in books:
                if call(bk, r, t, t, step):
                    finishing[id(bk)].append(r)
            if r.m > 0:
                first.append(r)
        # peaks of the values held during the step (effective changes only at steps' starts)
        eff_now = sum(effective(tokens(r, step), g) * bpp(g) for r in running for g in range(G))
        if eff_now > eff_peak:
            eff_peak, eff_peak_at = eff_now, T
        for bk in books:
            for g in range(G):
                for key, v in (("eff", sum(effective(tokens(r, step), g) for r in running)),
                               ("alloc", sum(bk.a.parts(r, tokens(r, step), g)[0] for r in running))):
                    if v > bk.gpeak[g][key][0]:
                        bk.gpeak[g][key] = (v, T)
        end = T + STEP
        span_mark = T
        process(end, True)
        add_span(end - span_mark, step)
        now = end
        step += 1
        for r in first:
            if r.state == "running":
                r.ttft = now - r.arr
        done = [r for r in finishing[id(books[0])] if r.state == "running"]
        for bk in books:
            assert {r.ordinal for r in finishing[id(bk)]} == {r.ordinal for r in finishing[id(books[0])]}
            for r in finishing[id(bk)]:
                if r.state == "running":
                    release_in(bk, r)
        for r in done:
            assert tokens(r, step - 1) == r.P + r.m
            rep["completed"] += 1
            r.e2e = now - r.arr
            e2e.append(r.e2e)
            if r.ttft is not None:  # latencies are over completed requests (docs/replay.md)
                ttft.append(r.ttft)
            if r.m >= 2:  # vLLM's TPOT: (finish - first token) / (m - 1), whole ns rounded down
                tpot.append((now - (r.arr + r.ttft)) // (r.m - 1))
            rep["generated_tokens"] += r.m
            r.state = "done"
            running.remove(r)
        span_mark = now
        # sanity: nobody overran its output
        for r in running:
            assert tokens(r, step - 1) < r.P + r.m, r.id
    note_queue(now)
    return dict(books=books, start=start, end=now, rep=rep, ttft=ttft, e2e=e2e, waiting=waiting, tpot=tpot,
                iterations=iterations, eff_peak=eff_peak, eff_peak_at=eff_peak_at,
                queue_mean=queue_int / (now - start) if now > start else 0.0, queue_max=queue_max)


# ---------------------------------------------------------------- figures
def rank(values, p):
    v = sorted(values)
    return v[(p * len(v) + 99) // 100 - 1]


def lat(values):
    if not values:
        return {"count": 0, "mean_s": None, "p50_s": None, "p99_s": None, "max_s": None}
    return {"count": len(values), "mean_s": (sum(values) / len(values)) / 1e9,
            "p50_s": rank(values, 50) / 1e9, "p99_s": rank(values, 99) / 1e9, "max_s": max(values) / 1e9}


def quantile(hist, p):
    """The engine's time histogram: buckets of 2^shift, shift the least keeping every value
    that was held for some time below 2^16 buckets; lower bucket edge."""
    vals = [v for v, d in hist.items() if d > 0]
    if not vals:
        return 0, 1
    shift = 0
    while max(vals) >> shift >= 65536:
        shift += 1
    b = collections.Counter()
    for v, d in hist.items():
        if d > 0:
            b[v >> shift] += d
    total = sum(b.values())
    seen = 0
    for i in sorted(b):
        seen += b[i]
        if seen * 100 >= total * p:
            return i << shift, 1 << shift
    raise AssertionError


def rounded(x):
    """std::round(x * 1000) / 1000: half away from zero."""
    y = abs(x * 1000.0)
    r = math.floor(y)
    if y - r >= 0.5:
        r += 1
    return math.copysign(r, x) / 1000.0


def figures(m):
    dur = m["end"] - m["start"]
    G = len(GROUPS)
    out = []
    for bk in m["books"]:
        f = {}
        f["requests.total"] = m["rep"]["total"]
        f["requests.completed"] = m["rep"]["completed"]
        f["requests.cancelled_queued"] = m["rep"]["cancelled_queued"]
        f["requests.cancelled_running"] = m["rep"]["cancelled_running"]
        f["requests.refused_too_long"] = m["rep"]["refused_too_long"]
        f["requests.prompt_tokens"] = m["rep"]["prompt_tokens"]
        f["requests.generated_tokens"] = m["rep"]["generated_tokens"]
        f["time.start_s"] = m["start"] / 1e9
        f["time.end_s"] = m["end"] / 1e9
        f["time.duration_ns"] = dur
        f["time.iterations"] = m["iterations"]
        byte_int = lambda k: sum(bk.int[g][k] * bpp(g) for g in range(G))
        mean = lambda k: rounded(float(byte_int(k)) / float(dur))
        at_s = lambda v, at: at / 1e9 if v else None
        f["memory_bytes.effective_tokens.mean"] = mean("eff")
        f["memory_bytes.effective_tokens.peak"] = m["eff_peak"]
        f["memory_bytes.effective_tokens.peak_at_s"] = at_s(m["eff_peak"], m["eff_peak_at"])
        f["memory_bytes.allocated_slots.mean"] = mean("alloc")
        f["memory_bytes.allocated_slots.peak"] = bk.peak
        f["memory_bytes.allocated_slots.peak_at_s"] = at_s(bk.peak, bk.peak_at)
        f["memory_bytes.reserved_slots.mean"] = rounded(float(bk.int_reserved) / float(dur))
        f["memory_bytes.reserved_slots.peak"] = bk.res_peak
        f["memory_bytes.reserved_slots.peak_at_s"] = at_s(bk.res_peak, bk.res_peak_at)
        quantiles = {}
        for key, h in (("effective_tokens", "eff"), ("allocated_slots", "alloc"), ("reserved_slots", "res")):
            for p in (50, 99):
                q, res = quantile(bk.hist[h], p)
                f[f"memory_bytes.{key}.p{p}"] = quantiles[key, p] = q
            f[f"memory_bytes.{key}.quantile_resolution"] = quantiles[key] = res
        f["memory_bytes.effective_tokens.at_end"] = 0
        f["memory_bytes.allocated_slots.at_end"] = 0
        f["memory_bytes.reserved_slots.at_end"] = bk.a.reserved()
        # internal fragmentation: per group mean positions (double) x bytes per position, as
        # the engine; at the allocated peak likewise
        mean_b = dict.fromkeys(PARTS, 0.0)
        peak_b = dict.fromkeys(PARTS, 0.0)
        for g in range(G):
            for k in PARTS:
                mean_b[k] += float(bk.int[g][k]) / float(dur) * bpp(g)
                peak_b[k] += float(bk.peak_split[g][k]) * bpp(g)
        for prefix, d in (("mean", mean_b), ("at_allocated_peak", peak_b)):
            for k in PARTS:
                f[f"internal_fragmentation_bytes.{prefix}.{k}"] = rounded(d[k])
            f[f"internal_fragmentation_bytes.{prefix}.total"] = rounded(sum(d.values()))
        ie, ia = byte_int("eff"), byte_int("alloc")
        f["usage.token_level"] = float(ie) / float(ia) if ia else None
        f["usage.block_level"] = float(ia) / float(bk.int_reserved) if bk.int_reserved else None
        f["external_fragmentation.mean"] = bk.ext_int / dur if dur else 0
        f["external_fragmentation.max"] = bk.ext_max
        if isinstance(bk.a, Dynamic):
            f["external_fragmentation.failed_placements_with_room_free"] = bk.a.arena.fragmented
            f["copied_bytes"] = bk.a.copied
        else:
            f["copied_bytes"] = 0
        # per layer group, in positions
        for g in range(G):
            pre = f"layer_groups.{g}."
            f[pre + "name"] = GROUPS[g][0]
            for key, h in (("effective_tokens", "eff"), ("allocated_slots", "alloc")):
                f[pre + f"{key}.mean"] = rounded(float(bk.int[g][h]) / float(dur))
                v, at = bk.gpeak[g][h]
                f[pre + f"{key}.peak"] = v
                f[pre + f"{key}.peak_at_s"] = at_s(v, at)
                if G == 1:  # one group: the totals' quantiles over its bytes per position
                    for p in (50, 99):
                        f[pre + f"{key}.p{p}"] = quantiles[key, p] // bpp(g)
                    f[pre + f"{key}.quantile_resolution"] = max(1, -(-quantiles[key] // bpp(g)))
                else:
                    for p in (50, 99):
                        q, res = quantile(bk.ghist[g][h], p)
                        f[pre + f"{key}.p{p}"] = q
                    f[pre + f"{key}.quantile_resolution"] = res
                f[pre + f"{key}.at_end"] = 0
            means = {k: float(bk.int[g][k]) / float(dur) for k in PARTS}
            for prefix, d in (("mean", means), ("at_allocated_peak", bk.peak_split[g])):
                for k in PARTS:
                    f[pre + f"internal_fragmentation_positions.{prefix}.{k}"] = rounded(float(d[k]))
                f[pre + f"internal_fragmentation_positions.{prefix}.total"] = rounded(float(sum(d.values())))
        for name, vals in (("ttft", m["ttft"]), ("end_to_end", m["e2e"]), ("tpot", m["tpot"])):
            for k, v in lat(vals).items():
                f[f"latency.{name}.{k}"] = v
        for k, v in lat(m["waiting"]).items():
            f[f"serving.waiting.{k}"] = v
        f["serving.queue_length_mean"] = m["queue_mean"]
        f["serving.queue_length_max"] = m["queue_max"]
        f["leak_check.allocated_bytes_at_end"] = bk.a.total
        out.append((bk.a.name, f))
    return out


def get(d, path):
    for k in path.split("."):
        d = d[int(k)] if isinstance(d, list) else d[k]
    return d


EXACT_FLOATS = ("p50_s", "p99_s", "max_s", "peak_at_s", "start_s", "end_s")
ROUNDED = ("memory_bytes.", "internal_fragmentation_bytes.", "layer_groups.")


def same(k, mine, theirs):
    """(ok, exact): integers, names and ns/1e9 figures exactly; 3-decimal means within 0.001
    relative (exact noted); other doubles within 1e-9 relative."""
    if mine is None or theirs is None:
        return mine is None and theirs is None, True
    if isinstance(mine, str) or isinstance(theirs, str):
        return mine == theirs, True
    if isinstance(mine, int) and isinstance(theirs, int) and not isinstance(mine, bool):
        return mine == theirs, True
    if k.endswith(EXACT_FLOATS):
        return mine == theirs, True
    if mine == theirs:
        return True, True
    if k.startswith(ROUNDED):
        return abs(mine - theirs) <= 1e-3 * abs(theirs), False
    return abs(mine - theirs) <= 1e-9 * max(abs(theirs), 1e-300), False


def compare(trace, js, verbose=False):
    assert js["model"]["name"] == MODEL, (js["model"]["name"], MODEL)
    groups = [(g["name"], g["window_tokens"], g["bytes_per_position"]) for g in js["model"]["layer_groups"]]
    assert groups == GROUPS and js["model"]["max_model_len"] == MAXLEN, groups
    m = run_model(read_trace(trace))
    bad = total = inexact = 0
    runs = js["runs"]
    assert len(runs) == len(m["books"]), (len(runs), len(m["books"]))
    for (name, f), run in zip(figures(m), runs):
        assert run["allocator"] == name, (run["allocator"], name)
        for k, mine in f.items():
            theirs = get(run, k)
            total += 1
            ok, exact = same(k, mine, theirs)
            if not ok or verbose or not exact:
                tag = "ok" if ok and exact else ("ok~" if ok else "MISMATCH")
                print(f"{tag:8s} {name:32s} {k:70s} model={mine!r} kvsim={theirs!r}")
            bad += not ok
            inexact += ok and not exact
    return bad, total, inexact, m


def run_kvsim(trace):
    out = subprocess.run([KVSIM, "replay", trace, "--model", MODEL, "--allocator", ALLOCS,
                          "--cost", "constant:step=1ms,prefill-token=0ps", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


if __name__ == "__main__":
    argv = sys.argv[1:]
    for opt in ("--kvsim", "--model"):
        if opt in argv:
            i = argv.index(opt)
            if opt == "--kvsim":
                KVSIM = argv[i + 1]
            else:
                set_model(argv[i + 1])
            del argv[i:i + 2]
    args = [a for a in argv if a != "-v"]
    trace = args[0]
    js = json.load(open(args[1])) if len(args) > 1 else run_kvsim(trace)
    bad, total, inexact, m = compare(trace, js, verbose="-v" in sys.argv)
    print(f"{trace} [{MODEL}]: {total - bad}/{total} figures match ({inexact} within tolerance, "
          f"not bit-equal); requests {m['rep']['total']}, completed {m['rep']['completed']}, "
          f"cancelled {m['rep']['cancelled_queued']}+{m['rep']['cancelled_running']}")
    sys.exit(1 if bad else 0)
