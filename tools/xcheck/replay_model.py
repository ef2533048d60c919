#!/usr/bin/env python3
"""Independent model of `kvsim replay` in demand mode with --cost constant:step=1ms,
prefill-token=0ps, for paged:block=16, dense-static:reserve=max-tokens and
dynamic:growth=double, Llama-3.1-8B (131,072 bytes per token, max length 131,072).

Usage: replay_model.py [--kvsim PATH] [-v] TRACE.csv [KVSIM_JSON]
(runs kvsim itself when no JSON is given; PATH defaults to $KVSIM, else build-rel/src/kvsim).
Prints the figures that differ (all of them with -v) and exits 1 on any mismatch.

Written from docs/replay.md, not from the engine's code, so that the two can disagree. The one
exception is the split of internal fragmentation at the allocated peak, which follows the
engine's rule for requests whose calls come later in the peak's step (docs/replay.md).

Rules modelled:
  * every step lasts STEP ns; at its start, arrivals/cancellations due at or before the start
    are taken (arrival first at one instant); then running requests grow by one token, then
    every queued request is admitted, holding prompt + 1 positions (prompt if output is 0);
  * a request with output m finishes at the end of the step producing token m;
  * a cancellation inside a step frees the request at its own instant; one at a boundary
    frees it before the next step;
  * when nothing is running or queued, time jumps to the next arrival.
Allocation orders within a step (needed only for the dynamic arena and its copy transients):
growth events in the order they were scheduled, then admissions in queue order.
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

BPT = 131072
MAXLEN = 131072
STEP = 1_000_000
BLOCK = 16
KVSIM = os.environ.get("KVSIM", "build-rel/src/kvsim")
ALLOCS = "paged:block=16,dense-static:reserve=max-tokens,dynamic:growth=double"


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
        if self.free_bytes() >= b:
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
# Each holds per-request state; `op(r, t)` brings the holding to t tokens (admission when new)
# and returns the transient (old buffer positions copied); `parts(r, t)` gives
# (allocated, tail, reservation, padding) in positions; `next_event(r)` the token count at
# which the allocator must act again.
class Paged:
    name = "paged:block=16"

    def __init__(self):
        self.blocks = {}

    def op(self, r, t):
        self.blocks[r.ordinal] = max(self.blocks.get(r.ordinal, 0), -(-t // BLOCK))
        return 0

    def parts_with(self, r, t, st):
        alloc = st * BLOCK
        return (alloc, alloc - t, 0, 0)

    def state(self, r):
        return self.blocks[r.ordinal]

    def parts(self, r, t):
        return self.parts_with(r, t, self.blocks[r.ordinal])

    def next_event(self, r):
        return self.blocks[r.ordinal] * BLOCK + 1

    def release(self, r):
        del self.blocks[r.ordinal]

    def ext_ratio(self):
        return 0.0


class Dense:
    name = "dense-static:reserve=max-tokens"

    def __init__(self):
        self.rows = {}
        self.high = 0
        self.total = 0

    def row(self, r):
        if r.planned >= MAXLEN - r.P:
            return MAXLEN
        return r.P + r.planned

    def op(self, r, t):
        if r.ordinal not in self.rows:
            self.rows[r.ordinal] = self.row(r)
            self.total += self.rows[r.ordinal]
            self.high = max(self.high, self.total)
        assert t <= self.rows[r.ordinal]
        return 0

    def state(self, r):
        return self.rows[r.ordinal]

    def parts_with(self, r, t, row):
        limit = r.P + r.planned
        pad = max(0, row - max(t, limit))
        return (row, 0, row - t - pad, pad)

    def parts(self, r, t):
        return self.parts_with(r, t, self.rows[r.ordinal])

    def next_event(self, r):
        return math.inf

    def release(self, r):
        self.total -= self.rows.pop(r.ordinal)

    def ext_ratio(self):
        return 0.0


class Dynamic:
    name = "dynamic:growth=double"

    def __init__(self):
        self.buf = {}  # ordinal -> (offset, capacity)
        self.arena = Arena()
        self.copied = 0

    def op(self, r, t):
        off, cap = self.buf.get(r.ordinal, (-1, 0))
        if t <= cap:
            return 0
        new = t if cap == 0 else max(t, 2 * cap)
        noff = self.arena.alloc(new * BPT)
        transient = 0
        if off >= 0:
            self.copied += cap * BPT
            transient = cap
            self.arena.free(off, cap * BPT)
        self.buf[r.ordinal] = (noff, new)
        return transient

    def state(self, r):
        return self.buf.get(r.ordinal, (-1, 0))[1]

    def parts_with(self, r, t, cap):
        limit = r.P + r.planned
        unfilled = max(0, cap - t)
        pad = max(0, cap - max(t, limit))
        return (cap, 0, unfilled - pad, pad)

    def parts(self, r, t):
        return self.parts_with(r, t, self.buf.get(r.ordinal, (-1, 0))[1])

    def next_event(self, r):
        return self.state(r) + 1

    def release(self, r):
        off, cap = self.buf.pop(r.ordinal, (-1, 0))
        if cap > 0:
            self.arena.free(off, cap * BPT)

    def ext_ratio(self):
        return self.arena.ratio()


class Books:
    """Per-allocator figures."""

    def __init__(self, alloc):
        self.a = alloc
        self.int = collections.Counter()  # time integrals (positions x ns)
        self.hist = {"eff": collections.Counter(), "alloc": collections.Counter(), "res": collections.Counter()}
        self.peak = 0
        self.peak_at = None
        self.peak_split = (0, 0, 0)
        self.res_peak = 0
        self.res_peak_at = None
        self.ext_int = 0.0
        self.ext_max = 0.0
        self.ext_ratio = 0.0
        self.counter = 0
        self.ev = {}      # ordinal -> (next event tokens, push order)
        self.rec = {}     # ordinal -> (t0, step0, state at op, slopes?) for carried values
        self.alloc_total = 0  # positions
        self.hist_mark = None

    def reserved(self):
        a = self.a
        if isinstance(a, Paged):
            return None  # tracked as high water below
        if isinstance(a, Dense):
            return a.high * BPT
        return a.arena.high


def run_model(reqs):
    allocs = [Paged(), Dense(), Dynamic()]
    books = [Books(a) for a in allocs]
    for b in books:
        b.paged_high = 0
    N = len(reqs)
    start = reqs[0].arr
    now = start
    step = 0
    ai = 0
    cq = []
    queue = collections.deque()
    running = []  # admitted and live, admission order
    rep = collections.Counter()
    ttft, e2e, waiting = [], [], []
    queue_int = 0
    queue_mark = start
    queued = 0
    queue_max = 0
    eff_peak, eff_peak_at = 0, None
    iterations = 0

    def tokens(r, s):
        return r.P + (s - r.admit_step) + (1 if r.m > 0 else 0)

    def after_op(bk, transient, t_now, s):
        a = bk.a
        if isinstance(a, Paged):
            total = sum(a.blocks.values()) * BLOCK
            bk.paged_high = max(bk.paged_high, total)
            reserved = bk.paged_high * BPT
        elif isinstance(a, Dense):
            total = a.total
            reserved = a.high * BPT
        else:
            total = sum(c for _, c in a.buf.values())
            reserved = a.arena.high
        bk.alloc_total = total
        bk.reserved_now = reserved
        v = (total + transient) * BPT
        if v > bk.peak:
            bk.peak = v
            bk.peak_at = t_now
            # the split the engine holds at this op: each request's figures carried along
            # the slopes of its last refresh
            sp = [0, 0, 0]
            for r in running:
                if r.ordinal not in bk.rec:
                    continue
                t0, s0, st, sloped = bk.rec[r.ordinal]
                p0 = a.parts_with(r, t0, st)
                if sloped:
                    p1 = a.parts_with(r, t0 + 1, st)
                    k = s - s0
                    p = [p0[i] + (p1[i] - p0[i]) * k for i in range(4)]
                else:
                    p = p0
                for i in range(3):
                    sp[i] += p[i + 1]
            bk.peak_split = tuple(sp)
        if reserved > bk.res_peak:
            bk.res_peak = reserved
            bk.res_peak_at = t_now
        bk.ext_ratio = a.ext_ratio()
        bk.ext_max = max(bk.ext_max, bk.ext_ratio)

    def schedule(bk, r, t, s):
        """After an op at t tokens: the next event (or none), and the record for carrying."""
        nxt = min(bk.a.next_event(r), r.P + r.m)
        if t >= r.P + r.m:
            bk.ev.pop(r.ordinal, None)
            bk.rec[r.ordinal] = (t, s, bk.a.state(r), False)
            return True  # finishing
        bk.ev[r.ordinal] = (nxt, bk.counter)
        bk.counter += 1
        bk.rec[r.ordinal] = (t, s, bk.a.state(r), nxt > t + 1)
        return False

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

    # Spans: the totals are piecewise constant; record them for integrals and histograms.
    def span_values(bk, s):
        eff = alloc = tail = resv = pad = 0
        for r in running:
            t = tokens(r, s)
            al, ta, re, pa = bk.a.parts(r, t)
            eff += t
            alloc += al
            tail += ta
            resv += re
            pad += pa
        return eff, alloc, tail, resv, pad

    def add_span(d, s):
        if d <= 0:
            return
        for bk in books:
            eff, alloc, tail, resv, pad = span_values(bk, s) if running else (0, 0, 0, 0, 0)
            assert alloc == bk.alloc_total, (bk.a.name, alloc, bk.alloc_total)
            bk.int["eff"] += eff * d
            bk.int["alloc"] += alloc * d
            bk.int["tail"] += tail * d
            bk.int["res"] += resv * d
            bk.int["pad"] += pad * d
            bk.int["reserved"] += bk.reserved_now * d
            bk.hist["eff"][eff * BPT] += d
            bk.hist["alloc"][alloc * BPT] += d
            bk.hist["res"][bk.reserved_now] += d
            bk.ext_int += bk.ext_ratio * d

    for bk in books:
        bk.reserved_now = 0

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
            due = sorted((o, ordn) for ordn, (tok, o) in bk.ev.items())
            byord = {r.ordinal: r for r in running}
            for o, ordn in due:
                r = byord[ordn]
                t = tokens(r, step)
                if bk.ev[ordn][0] != t:
                    continue
                tr = bk.a.op(r, t)
                fin = schedule(bk, r, t, step)
                after_op(bk, tr, T, step)
                if fin:
                    finishing[id(bk)].append(r)
        # consistency: every running request's holding covers its tokens (no missed event)
        for r in running:
            t = tokens(r, step)
            for bk in books:
                assert bk.a.parts(r, t)[0] >= t, (bk.a.name, r.id, t)
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
                tr = bk.a.op(r, t)
                fin = schedule(bk, r, t, step)
                after_op(bk, tr, T, step)
                if fin:
                    finishing[id(bk)].append(r)
            if r.m > 0:
                first.append(r)
        # every request ends exactly at P + m
        eff_now = sum(tokens(r, step) for r in running)
        if eff_now * BPT > eff_peak:
            eff_peak, eff_peak_at = eff_now * BPT, T
        end = T + STEP
        span_mark = T
        process(end, True)
        add_span(end - span_mark, step)
        now = end
        step += 1
        for r in first:
            if r.state == "running":
                r.ttft = now - r.arr
                ttft.append(r.ttft)
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
            rep["generated_tokens"] += r.m
            r.state = "done"
            running.remove(r)
        span_mark = now
        # sanity: nobody overran its output
        for r in running:
            assert tokens(r, step - 1) < r.P + r.m, r.id
    note_queue(now)
    return dict(books=books, start=start, end=now, rep=rep, ttft=ttft, e2e=e2e, waiting=waiting,
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
        mean = lambda k: rounded(float(bk.int[k] * BPT) / float(dur))
        f["memory_bytes.effective_tokens.mean"] = mean("eff")
        f["memory_bytes.effective_tokens.peak"] = m["eff_peak"]
        f["memory_bytes.effective_tokens.peak_at_s"] = m["eff_peak_at"] / 1e9 if m["eff_peak"] else None
        f["memory_bytes.allocated_slots.mean"] = mean("alloc")
        f["memory_bytes.allocated_slots.peak"] = bk.peak
        f["memory_bytes.allocated_slots.peak_at_s"] = bk.peak_at / 1e9 if bk.peak else None
        f["memory_bytes.reserved_slots.mean"] = rounded(float(bk.int["reserved"]) / float(dur))
        f["memory_bytes.reserved_slots.peak"] = bk.res_peak
        f["memory_bytes.reserved_slots.peak_at_s"] = bk.res_peak_at / 1e9 if bk.res_peak else None
        for key, h in (("effective_tokens", "eff"), ("allocated_slots", "alloc"), ("reserved_slots", "res")):
            for p in (50, 99):
                q, res = quantile(bk.hist[h], p)
                f[f"memory_bytes.{key}.p{p}"] = q
            f[f"memory_bytes.{key}.quantile_resolution"] = res
        # internal fragmentation: mean positions (double) x bytes per position, as the engine
        slots = lambda k: float(bk.int[k]) / float(dur)
        fr = {"tail": slots("tail") * BPT, "reservation": slots("res") * BPT, "padding": slots("pad") * BPT}
        for k, v in fr.items():
            f[f"internal_fragmentation_bytes.mean.{k}"] = rounded(v)
        f["internal_fragmentation_bytes.mean.total"] = rounded(sum(fr.values()))
        for k, v in zip(("tail", "reservation", "padding"), bk.peak_split):
            f[f"internal_fragmentation_bytes.at_allocated_peak.{k}"] = rounded(float(v) * BPT)
        f["usage.token_level"] = float(bk.int["eff"] * BPT) / float(bk.int["alloc"] * BPT) if bk.int["alloc"] else 0
        f["usage.block_level"] = float(bk.int["alloc"] * BPT) / float(bk.int["reserved"]) if bk.int["reserved"] else 0
        f["external_fragmentation.mean"] = bk.ext_int / dur if dur else 0
        f["external_fragmentation.max"] = bk.ext_max
        if isinstance(bk.a, Dynamic):
            f["external_fragmentation.failed_placements_with_room_free"] = bk.a.arena.fragmented
            f["copied_bytes"] = bk.a.copied
        else:
            f["copied_bytes"] = 0
        for name, vals in (("ttft", m["ttft"]), ("end_to_end", m["e2e"])):
            for k, v in lat(vals).items():
                f[f"latency.{name}.{k}"] = v
        for k, v in lat(m["waiting"]).items():
            f[f"serving.waiting.{k}"] = v
        f["serving.queue_length_mean"] = m["queue_mean"]
        f["serving.queue_length_max"] = m["queue_max"]
        out.append((bk.a.name, f))
    return out


def get(d, path):
    for k in path.split("."):
        d = d[k]
    return d


EXACT_FLOATS = ("p50_s", "p99_s", "max_s", "peak_at_s", "start_s", "end_s")
ROUNDED = ("memory_bytes.", "internal_fragmentation_bytes.")


def same(k, mine, theirs):
    """(ok, exact): integers and ns/1e9 figures exactly; 3-decimal means within 0.001
    relative (exact noted); other doubles within 1e-9 relative."""
    if mine is None or theirs is None:
        return mine is None and theirs is None, True
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
    m = run_model(read_trace(trace))
    bad = total = inexact = 0
    for (name, f), run in zip(figures(m), js["runs"]):
        assert run["allocator"] == name, (run["allocator"], name)
        for k, mine in f.items():
            theirs = get(run, k)
            total += 1
            ok, exact = same(k, mine, theirs)
            if not ok or verbose or not exact:
                tag = "ok" if ok and exact else ("ok~" if ok else "MISMATCH")
                print(f"{tag:8s} {name:32s} {k:58s} model={mine!r} kvsim={theirs!r}")
            bad += not ok
            inexact += ok and not exact
    return bad, total, inexact, m


def run_kvsim(trace):
    out = subprocess.run([KVSIM, "replay", trace, "--model", "llama-3.1-8b", "--allocator", ALLOCS,
                          "--cost", "constant:step=1ms,prefill-token=0ps", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


if __name__ == "__main__":
    argv = sys.argv[1:]
    if "--kvsim" in argv:
        i = argv.index("--kvsim")
        KVSIM = argv[i + 1]
        del argv[i:i + 2]
    args = [a for a in argv if a != "-v"]
    trace = args[0]
    js = json.load(open(args[1])) if len(args) > 1 else run_kvsim(trace)
    bad, total, inexact, m = compare(trace, js, verbose="-v" in sys.argv)
    print(f"{trace}: {total - bad}/{total} figures match ({inexact} within tolerance, not bit-equal); "
          f"requests {m['rep']['total']}, "
          f"completed {m['rep']['completed']}, cancelled {m['rep']['cancelled_queued']}+{m['rep']['cancelled_running']}")
    sys.exit(1 if bad else 0)
