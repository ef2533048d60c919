#!/usr/bin/env python3
"""Independent model of vLLM v1's automatic prefix caching on sliding-window layers (the
SlidingWindowManager and BlockPool of vllm/v1/core/), checked against
`kvsim replay --allocator sliding-window:block=16,prefix-caching=on --kv-budget BYTES` on
models whose layers all slide (one KV-cache group): mistral-7b-v0.1 (W = 4,096) and
phi-3-mini-4k (W = 2,047, off the 16-token grid), under a scheduler kept trivial (every
arrival admitted at once, as tools/xcheck/radix_model.py's overlapping cases).

Usage: window_prefix_model.py --kvsim PATH [--case K] SCRATCH_DIR   (--cases: print how many)

Written from docs/replay.md and vLLM's source, not from kvsim's allocator, pool or engine
code. B = 16 (block), W the window. "replay.md" = docs/replay.md; "stkcm.py" = vLLM's
vllm/v1/core/single_type_kv_cache_manager.py, "block_pool.py" = vllm/v1/core/block_pool.py.
Rules, with their sources:
  * pool: budget // (B x bytes per position) blocks (replay.md, "Serving under a memory
    budget"); one group, so one block a block.
  * identity (replay.md, "Sharing across requests", Identity): block k of a prompt of P
    tokens has a trace identity iff it is a full prompt block (k < P // B) and, token ids
    given, it is the prompt's first (k + 1) x B ids; hashes given per H tokens (native
    prefix_hashes), hash i = ((k + 1) x B - 1) // H exists, identity (k, H, hashes 0..i).
    Exact identities (interned chains), not hashes. Every other full block (a generated
    block, a prompt block past the given hashes) gets an identity only its request can
    produce and is cached too, under a budget (replay.md, "Blocks of the request's own").
  * accounting (replay.md, "The engine", Accounting convention): a step allocates a slot for
    every token it produces; the prefill step holds P + 1 positions, a decode step one more,
    so a request ends holding P + m positions (one more than vLLM).
  * hit (replay.md, "Sharing on sliding-window layers"; stkcm.py SlidingWindowManager.
    find_longest_cache_hit): over the first max = (P - 1) // B identities (the last-token
    rule, num_tokens - 1), searched from the right, the first run of n = ceil((W - 1) / B)
    contiguous cached identities wins and the hit ends at the run's end; with no such run
    the leading run of cached identities (possibly 0). "Cached" = some block holds the
    identity in the hash table, referenced or in the free queue. One group: the
    UnitaryKVCacheCoordinator uses this rule alone.
  * which block a cached identity gives: the oldest surviving copy (block_pool.py's
    BlockHashToBlockMap keeps every block cached under a hash in insertion order;
    get_one_block returns the first; a popped block leaves it). replay.md says only "two
    requests computing the same block both cache it" (the paged row): gap, from vLLM.
  * what a hit of L tokens holds (replay.md; stkcm.py add_local_computed_blocks with
    get_num_skipped_tokens = max(0, c - W + 1)): the blocks wholly before L - W + 1 (the
    first (L - W + 1) // B) are not taken, not touched: they stay where they are; the others
    are touched (a block in the free queue leaves it; ref + 1).
  * the prefill step (replay.md table row "sliding-window": "A whole prompt longer than W is
    held during its prefill step, as vLLM allocates for the chunk before dropping"): new
    blocks for positions L .. P (ceil((P + 1) / B) - L / B of them), taken from the free
    queue's head in one go (get_new_blocks: popleft_n, then each evicted if cached), then
    the prompt's full blocks from L / B to P // B - 1 are cached under their identities (a
    copy of an identity already cached is cached too). A prompt block without trace
    identity gets the request's own. Cached at allocation time (vLLM's allocate_slots calls
    cache_blocks), so an admission later in the same step can hit them.
  * the window at each later step (replay.md table row: "a step that starts with c tokens
    computed skips positions before c - W + 1"; stkcm.py remove_skipped_blocks): at a step
    of a request holding c = P + g positions at its start (g tokens produced), the blocks
    k < (c - W + 1) // B not yet dropped are freed, the last of them first (the loop runs
    from the highest index down to the first already-null one), still cached ("a cached one
    enters the free queue still cached"). c is the positions held (kvsim's count), not
    vLLM's num_computed_tokens (one less): replay.md's "a live request of t tokens keeps the
    positions from s = max(0, t - W) on" with t = c + 1 after the step. Then, if c % B == 0,
    one new block is taken (the slot of the token the step produces).
  * caching of generated blocks (replay.md, "Blocks of the request's own": cached once its KV
    is computed, num_tokens_to_cache = min(computed + new, num_tokens), "a position just
    sampled is not computed yet"): at the step starting at c, block c // B - 1 becomes cached
    when c % B == 0 (with its own identity when it is past the prompt's full blocks). So at
    release (P + m - 1) // B blocks are cached: when (P + m) % B == 0 the last block, full
    in kvsim's P + m positions, is NOT cached (its last position is the token just sampled).
    Gap: the docs do not spell out this release case; the rule above is their caching rule
    applied to it.
  * free queue (replay.md paged row, FreeKVCacheBlockQueue; block_pool.py free_blocks,
    get_new_blocks): never-used blocks first, then freed blocks least recently freed first; a
    release frees the request's blocks tail first (reversed block table, null blocks
    skipped); a block another running request still references is not freed. A cached
    block popped for a new block is evicted (its identity copy dropped).
  * engine (replay.md, "The engine", 1.-4.; radix_model.py's model_overlap): time jumps to
    the next arrival when nothing runs or waits; steps are 1 ms apart otherwise; a step
    takes the arrivals due at or before its start; running requests grow first in running
    (admission) order (window, then block), then the waiting requests are admitted in
    arrival order (file order at one instant), each whole (prefill in one step: the step
    token budget is 100,000); the step producing a request's last token releases it at its
    end, in running order (decodes in running order, then the prefills that complete, in
    the order scheduled: the same order here).
  * figures (replay.md, "Sharing across requests", hit-rate paragraph, "Evictable", "Where
    they are"): queried_tokens = sum P, hit_tokens = sum L, queried_blocks = sum P // B,
    hit_blocks = sum L / B over first admissions; evicted_bytes = cached blocks popped x
    block bytes; evictable_bytes.at_end = cached blocks in the free queue at the end x block
    bytes; evictable_bytes.peak = the most cached blocks in the free queue at once x block
    bytes (it only grows when blocks are freed); memory_bytes.allocated_slots.peak = the
    most blocks referenced (blocks with ref > 0; evictable blocks are free room) x block
    bytes, sampled after every operation.
Budget (budget_for): the schedule must never wait for memory. vLLM's admission counts
ceil(num_tokens / B) - max(skipped, hit blocks) + the taken hit blocks nobody references
(stkcm.py get_num_blocks_to_allocate; replay.md: "a hit nobody references leaves the free
queue and counts"); with --reserve-full-isl on, the whole sequence so far (the prompt, fewer
positions than the P + 1 of the first step). Either count is at most what the admission adds
to the blocks referenced, so a capacity of the most blocks ever referenced admits everything
at once (budget "exact"; at one block less kvsim preempts in the "exact" random cases, so
the peak is exact). The other cases take, besides, at every admission, the blocks referenced
before it plus ceil((P + 1) / B) less its taken hits a running request holds (an upper bound
of either count, skipped hit blocks included), times the case's factor. What is cached
depends on the capacity, and what is referenced on the hits, so a capacity counts as
feasible when the model run at it fits and needs no more; the smallest one bisection finds
above the unbounded run's need is used. Checked: every request's arrival,
first_scheduled, first_token and finish equal the model's step loop (BAD SCHEDULE
otherwise): admitted at the first step starting at or after its arrival, unpreempted,
finished m steps later. Directed case "hit past evicted early blocks" admits a request whose
upper-bound count (157) exceeds the capacity (151) while vLLM's (135) fits: kvsim admits it
at once, so it counts as vLLM does.
Compared (exactly): cached_prompt_tokens per request (--per-request, keyed by id); the JSON's
runs[0].prefix_cache queried_tokens, hit_tokens, queried_blocks, hit_blocks, evicted_bytes,
evictable_bytes.at_end and .peak; runs[0].memory_bytes.allocated_slots.peak.
Cases: random token-id traces (long system prompts, multi-turn sessions extending their last
prompt, exact repeats, cuts of earlier prompts with new tails, one-offs; bursts of arrivals,
up to about 30 running) and native CSV traces with prefix hashes at H = 16 and H = 40, on both
models, two with --reserve-full-isl on; and directed cases on phi-3-mini-4k worked by hand
(DIRECTED below: a hit through a chain whose early blocks were evicted; a hole at the hit's
end moving the window run one block left; a hole in the window leaving no run, so the
leading run; the step at which the window frees a block), each also checked against the
model's own hits and evictions. No ordering had to be fitted by experiment: the rules above
reproduced kvsim exactly at the first run. Mutations of the model (window frees at vLLM's
c - 1, window frees first-first, release head-first, the leading run only, the newest copy
of an identity, the last full block cached at release, no own-block caching, no duplicate
copies) each make some case differ.
"""
import csv
import json
import os
import random
import subprocess
import sys
from collections import OrderedDict

import xcheck_lib

B = 16
STEP_NS = 10**6  # constant:step=1ms
MODELS = {
    # name: (window, bytes per position, max model len)
    "mistral-7b-v0.1": (4096, 131072, 32768),
    "phi-3-mini-4k": (2047, 393216, 4096),
}
FLAGS = ["--cost", "constant:step=1ms,prefill-token=0ps", "--watermark", "0", "--max-running", "1000",
         "--max-batched-tokens", "100000"]


def cdiv(a, b):
    return -(-a // b)


class Interner:
    def __init__(self):
        self.table = {}

    def __call__(self, key):
        v = self.table.get(key)
        if v is None:
            v = self.table[key] = len(self.table) + 1
        return v


INTERN = Interner()


class Req:
    def __init__(self, rid, arr, P, m, tokens=None, hashes=None, H=0):
        self.id, self.arr, self.P, self.m = rid, arr, P, m
        self.tokens, self.hashes, self.H = tokens, hashes, H
        self._ids = None

    def identities(self):
        """Trace identities of the prompt's full blocks, block 0 first; None where a block
        has none (a native trace's blocks past the last given hash)."""
        if self._ids is not None:
            return self._ids
        out = []
        if self.tokens is not None:
            parent = 0
            for k in range(self.P // B):
                parent = INTERN(("tok", parent, tuple(self.tokens[k * B:(k + 1) * B])))
                out.append(parent)
        else:
            chain = []
            parent = 0
            for h in self.hashes:
                parent = INTERN(("hash", parent, h))
                chain.append(parent)
            for k in range(self.P // B):
                i = ((k + 1) * B - 1) // self.H
                out.append(INTERN((k, self.H, chain[i])) if i < len(chain) else None)
        self._ids = out
        return out


class Block:
    __slots__ = ("bid", "ref", "ident")

    def __init__(self, bid):
        self.bid, self.ref, self.ident = bid, 0, None


class Pool:
    """vLLM's BlockPool for one group: a free queue (never-used blocks first, then freed
    blocks least recently freed first) and the table of cached identities."""

    def __init__(self, capacity):
        self.capacity = capacity
        self.never_used = capacity
        self.next_id = 0
        self.fq = OrderedDict()  # block id -> Block, least recently freed first
        self.cached = {}  # identity -> OrderedDict(block id -> Block), oldest copy first
        self.referenced = 0
        self.peak_referenced = 0
        self.evicted = 0
        self.overflow = 0  # blocks taken past the capacity (the budget was too small)
        self.n_evictable = 0  # cached blocks in the free queue
        self.peak_evictable = 0

    def note(self):
        if self.referenced > self.peak_referenced:
            self.peak_referenced = self.referenced

    def get(self, ident):
        copies = self.cached.get(ident)
        if not copies:
            return None
        return next(iter(copies.values()))

    def cache(self, blk, ident):
        assert blk.ident is None
        blk.ident = ident
        self.cached.setdefault(ident, OrderedDict())[blk.bid] = blk

    def pop(self):
        if self.never_used > 0:
            self.never_used -= 1
            blk = Block(self.next_id)
            self.next_id += 1
        elif self.fq:
            _, blk = self.fq.popitem(last=False)
            if blk.ident is not None:  # evicted
                self.n_evictable -= 1
                copies = self.cached[blk.ident]
                del copies[blk.bid]
                if not copies:
                    del self.cached[blk.ident]
                blk.ident = None
                self.evicted += 1
        else:  # past the capacity: only to size the budget
            self.overflow += 1
            blk = Block(self.next_id)
            self.next_id += 1
        assert blk.ref == 0
        blk.ref = 1
        self.referenced += 1
        return blk

    def touch(self, blk):
        if blk.ref == 0:
            del self.fq[blk.bid]
            self.referenced += 1
            if blk.ident is not None:
                self.n_evictable -= 1
        blk.ref += 1

    def free(self, blocks):
        for blk in blocks:
            blk.ref -= 1
        for blk in blocks:
            if blk.ref == 0:
                self.fq[blk.bid] = blk
                self.referenced -= 1
                if blk.ident is not None:
                    self.n_evictable += 1
        if self.n_evictable > self.peak_evictable:
            self.peak_evictable = self.n_evictable

    def evictable(self):
        n = sum(1 for b in self.fq.values() if b.ident is not None)
        assert n == self.n_evictable
        return n


def find_hit(pool, ids, P, W):
    """SlidingWindowManager.find_longest_cache_hit: hit blocks h."""
    need = cdiv(W - 1, B)
    mx = (P - 1) // B if P > 0 else 0
    run = 0
    for i in range(mx - 1, -1, -1):
        if ids[i] is not None and pool.get(ids[i]) is not None:
            run += 1
            if run >= need:
                return i + run
        else:
            run = 0
    return run  # the leading run


def model(reqs, W, capacity):
    """The allocator under kvsim's engine, every arrival admitted at the first step starting at
    or after it. Returns (figures, cached tokens per request, schedule, stats)."""
    pool = Pool(capacity)
    order = sorted(reqs, key=lambda r: r.arr)  # stable: file order at one instant
    per_request, schedule = {}, {}
    fig = {"queried_tokens": 0, "hit_tokens": 0, "queried_blocks": 0, "hit_blocks": 0}
    st = {"max_running": 0, "max_admitted": 0, "admit_need": 0, "hits_past_window": 0,
          "skipped_hit_blocks": 0, "dup_cached": 0, "window_frees": 0}
    waiting, running = [], []
    ai = 0
    now = None
    while ai < len(order) or waiting or running:
        if not running and not waiting:
            now = order[ai].arr if now is None else max(now, order[ai].arr)
        while ai < len(order) and order[ai].arr <= now:
            waiting.append(order[ai])
            ai += 1
        # running requests grow first, in running order
        for r in running:
            c = r.P + r.g
            skip = (c - W + 1) // B if c - W + 1 > 0 else 0
            removed = []
            for i in range(skip - 1, -1, -1):
                if r.blocks[i] is None:
                    break
                removed.append(r.blocks[i])
                r.blocks[i] = None
            if removed:
                st["window_frees"] += len(removed)
                pool.free(removed)
            if c % B == 0:
                r.blocks.append(pool.pop())
                pool.note()
                k = c // B - 1
                if r.blocks[k] is not None and r.blocks[k].ident is None:
                    pool.cache(r.blocks[k], INTERN(("own", r.id, k)))
        # (position c starts block c // B exactly when block c // B - 1 becomes full)
        # admissions, in arrival order
        for r in waiting:
            ids = r.identities()
            h = find_hit(pool, ids, r.P, W)
            L = h * B
            if h >= cdiv(W - 1, B):
                st["hits_past_window"] += 1
            skip = (L - W + 1) // B if L - W + 1 > 0 else 0
            st["skipped_hit_blocks"] += skip
            taken = [pool.get(ids[k]) for k in range(skip, h)]
            shared = sum(1 for b in taken if b.ref > 0)
            st["admit_need"] = max(st["admit_need"], pool.referenced + cdiv(r.P + 1, B) - shared)
            for b in taken:
                pool.touch(b)
            r.blocks = [None] * skip + taken
            new = [pool.pop() for _ in range(cdiv(r.P + 1, B) - h)]
            r.blocks += new
            pool.note()
            for k in range(h, r.P // B):
                ident = ids[k] if ids[k] is not None else INTERN(("own", r.id, k))
                if pool.get(ident) is not None:
                    st["dup_cached"] += 1
                pool.cache(r.blocks[k], ident)
            r.g = 0
            schedule[r.id] = [now, None]
            per_request[r.id] = L
            fig["queried_tokens"] += r.P
            fig["hit_tokens"] += L
            fig["queried_blocks"] += r.P // B
            fig["hit_blocks"] += h
            running.append(r)
        st["max_admitted"] = max(st["max_admitted"], len(waiting))
        waiting = []
        st["max_running"] = max(st["max_running"], len(running))
        now += STEP_NS
        still = []
        for r in running:
            r.g += 1
            if r.g < r.m:
                still.append(r)
                continue
            pool.free([b for b in reversed(r.blocks) if b is not None])
            schedule[r.id][1] = now
        running = still
    assert pool.referenced == 0
    bb = B * BPP[0]
    fig["evicted_bytes"] = pool.evicted * bb
    fig["evictable_at_end"] = pool.evictable() * bb
    fig["allocated_peak"] = pool.peak_referenced * bb
    fig["evictable_peak"] = pool.peak_evictable * bb
    st["peak_referenced"] = pool.peak_referenced
    st["overflow"] = pool.overflow
    st["evicted_blocks"] = pool.evicted
    return fig, per_request, schedule, st


BPP = [0]  # bytes per position of the case's model (set per case)


def budget_for(reqs, W, factor):
    """Capacity (blocks) at which nothing waits for memory. factor "exact": the most blocks
    ever referenced (which is, at every admission, at least vLLM's count of what it needs:
    its new blocks and its taken hits nobody referenced); a number: that many times the
    larger of that and the conservative admission count (see the docstring). What is
    cached depends on the capacity and what is referenced on the hits, so a capacity is
    feasible when the model run at it fits and needs no more; the smallest feasible one
    found by bisection above the unbounded run's need is returned."""
    exact = factor == "exact"
    f = 1.0 if exact else factor

    def need(cap):
        st = model(reqs, W, cap)[3]
        if st["overflow"]:
            return None
        return st["peak_referenced"] if exact else max(st["peak_referenced"], st["admit_need"])

    def feasible(cap):
        n = need(cap)
        return n is not None and n <= cap

    lo = int(need(10**7) * f) + (1 if f > 1 else 0)
    hi, step = lo, 1
    while not feasible(hi):
        hi += step
        step *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        if feasible(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


# ---- traces ----------------------------------------------------------------------------

def make_prompts(rng, n, lo, hi, systems_len, vocab=32000):
    """Long token-id prompts: long system prompts plus a new tail, multi-turn sessions that
    extend their last prompt, exact repeats, cuts of earlier prompts with a new tail,
    one-offs; lengths kept within [lo, hi]."""
    def fresh(k):
        return [rng.randrange(1, vocab + 1) for _ in range(k)]
    systems = [fresh(k) for k in systems_len]
    sessions, out = [], []
    for _ in range(n):
        u = rng.random()
        if u < 0.25 and sessions:
            s = rng.randrange(len(sessions))
            prompt = sessions[s] + fresh(rng.randint(1, 500))
            if len(prompt) > hi:
                prompt = list(rng.choice(systems))
                prompt += fresh(rng.randint(0, 800))
            sessions[s] = prompt
        elif u < 0.55:
            sys_p = rng.choice(systems)
            prompt = list(sys_p) + fresh(max(0, rng.randint(lo, hi) - len(sys_p)) if rng.random() < 0.7
                                         else rng.randint(0, 200))
            if rng.random() < 0.3:
                sessions.append(prompt)
        elif u < 0.70 and out:
            prompt = list(rng.choice(out[-30:]))
        elif u < 0.85 and out:
            base = rng.choice(out[-40:])
            cut = rng.randint(min(lo, len(base)), len(base))
            prompt = base[:cut] + fresh(rng.randint(0, 300))
        else:
            prompt = fresh(rng.randint(lo, hi))
        prompt = prompt[:hi]
        if len(prompt) < lo:
            prompt += fresh(lo - len(prompt))
        out.append(prompt)
    return out


def burst_arrivals(rng, n, mean_gap_ms):
    """Arrivals in bursts: a fifth at the previous one's instant, 15% within the same 1 ms
    step, a few after an idle gap of 300-600 ms off the grid, exponential gaps otherwise."""
    return xcheck_lib.burst_arrivals(rng, n, mean_gap_ms, (0.2, 0.35, 0.38), (300, 600))


def outputs(rng, n, hi):
    return [rng.randint(1, 60) if rng.random() < 0.6 else rng.randint(61, hi) for _ in range(n)]


def token_trace(path, seed, n, lo, hi, systems_len, out_hi, gap):
    rng = random.Random(seed)
    prompts = make_prompts(rng, n, lo, hi, systems_len)
    outs = outputs(rng, n, out_hi)
    reqs = []
    with open(path, "w") as f:
        for i, (p, m, t) in enumerate(zip(prompts, outs, burst_arrivals(rng, n, gap))):
            f.write(json.dumps({"input_toks": len(p), "output_toks": m, "arrival_time_ns": t,
                                "input_tok_ids": p}) + "\n")
            reqs.append(Req(str(i + 1), t, len(p), m, tokens=p))  # ids 1-based by line
    return reqs


def native_trace(path, seed, n, lo, hi, systems_len, out_hi, gap, H):
    rng = random.Random(seed)
    prompts = make_prompts(rng, n, lo, hi, systems_len)
    outs = outputs(rng, n, out_hi)
    table, reqs = {}, []
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "arrival", "prompt_tokens", "output_tokens", "prefix_block_tokens", "prefix_hashes"])
        for i, (p, m, t) in enumerate(zip(prompts, outs, burst_arrivals(rng, n, gap))):
            hs, parent = [], 0
            for b in range(len(p) // H):  # chained: hash b names the prefix up to (b + 1) x H
                parent = table.setdefault((parent, tuple(p[b * H:(b + 1) * H])), len(table) + 1)
                hs.append(parent)
            rid = f"r{i}"
            w.writerow([rid, f"{t // 10**9}.{t % 10**9:09d}", len(p), m, H, " ".join(map(str, hs))])
            reqs.append(Req(rid, t, len(p), m, hashes=hs, H=H))
    return reqs


# Directed cases on phi-3-mini-4k (W = 2,047: a hit needs n = ceil(2046 / 16) = 128 contiguous
# cached blocks ending at its end; a step starting at c positions frees blocks
# k < (c - 2046) // 16). Requests: (arrival ms, prompt spec, output); a prompt spec is a list
# of (segment name, length) joined, each named segment the same tokens wherever it appears.
# Each case gives the capacity in blocks and the hits and evicted blocks worked by hand.
DIRECTED = {
    # A hit through a chain whose early blocks were evicted (the full-attention rule would
    # find 0). Capacity 151.
    # step 0: A = a:2400 (150 full blocks) m 2: no hit; takes ceil(2401 / 16) = 151 blocks
    #   (all never-used), caches blocks 0..149.
    # step 1: A at c = 2401: frees k < (2401 - 2046) // 16 = 22: blocks 21, 20, .., 0 enter
    #   the queue in that order (the last first); c % 16 != 0, no new block. Released at the
    #   step's end, tail first: 150 (uncached: one position), 149, .., 22.
    #   Queue: A21 .. A0, A150, A149 .. A22.
    # step 3: X = x:340 m 1: misses; takes ceil(341 / 16) = 22 blocks: A21 .. A0, all cached:
    #   22 evicted. Caches 21 blocks (340 // 16); released: X21 (partial, uncached), X20 .. X0.
    #   Queue: A150, A149 .. A22, X21, X20 .. X0.
    # step 5: C = a:2400 + c:100 (P 2500, max (2499) // 16 = 156 blocks) m 1: blocks 155..150
    #   miss, 149..22 are cached: a run of 128 = n ends at 22: hit 150 blocks, 2400 tokens
    #   (the leading run would be 0: A0 is gone). Skipped (2400 - 2046) // 16 = 22 blocks,
    #   taken 22..149 (128, evictable: vLLM's count 157 - 150 + 128 = 135 <= 151 free).
    #   New ceil(2501 / 16) - 150 = 7: A150 (uncached), X21 (uncached), X20 .. X16 (5 evicted).
    # Hits 0, 0, 2400; evicted 22 + 5 = 27 blocks; at the end cached and free: A22..A149 (128)
    # + X0..X15 (16) + C's 150..155 (6, its block 156 partial) = 150.
    "hit past evicted early blocks": (
        [(0, [("a", 2400)], 2), (3, [("x", 340)], 1), (5, [("a", 2400), ("c", 100)], 1)],
        151, ([0, 0, 2400], 27)),
    # The hit's own window run starts one block earlier when the last block is a hole: the
    # run of 128 is searched from the right, past the hole. Capacity 160.
    # step 0: A = a:2400 m 1: takes 151 of the 160 never-used blocks, caches 0..149; released
    #   at the step's end, tail first. Queue: 9 never-used, then A150, A149, .., A0.
    # step 1: X = x:160 m 1: ceil(161 / 16) = 11 blocks: the 9 never-used, A150 (uncached),
    #   A149 (evicted: the hole). Caches X0..X9; released: queue A148 .. A0, X10, X9 .. X0.
    # step 2: C = a:2400 + c:100 (P 2500; max 2499 // 16 = 156 blocks) m 1: 155..150 miss,
    #   149 is the hole, 148..21 make a run of 128: hit 149 blocks, 2384 tokens. Skipped
    #   (2384 - 2046) // 16 = 21 blocks (A0..A20 stay in the queue, untouched); taken
    #   A21..A148; new ceil(2501 / 16) - 149 = 8 from the head: A20 .. A13 (8 evicted). Caches
    #   149..155 (149 under a's identity again). Released tail first: C156 (uncached),
    #   C155 .. C149, A148 .. A21. Queue: A12 .. A0, X10, X9 .. X0, C156, C155 .. C149,
    #   A148 .. A21.
    # step 3: D = a:2400 + d:50 (max 153) m 1: 152..150 miss; 149 (C's copy) .. 22 make the
    #   run: hit 150 blocks, 2400 tokens; skipped 22 (A21 stays); taken C149, A148 .. A22; new
    #   ceil(2451 / 16) - 150 = 4: A12 .. A9 (4 evicted).
    # Hits 0, 0, 2384, 2400; evicted 1 + 8 + 4 = 13.
    "hole at the hit's end": (
        [(0, [("a", 2400)], 1), (1, [("x", 160)], 1), (2, [("a", 2400), ("c", 100)], 1),
         (3, [("a", 2400), ("d", 50)], 1)],
        160, ([0, 0, 2384, 2400], 13)),
    # A hit cut short: the run within the window has a hole so long that no run of 128 is
    # left, and the hit falls back to the leading run. Capacity 157.
    # step 0: A = a:2400 m 1: 151 blocks (6 never-used left), caches 0..149; released tail
    #   first. Queue: 6 never-used, A150, A149 .. A0.
    # step 1: X = x:1536 m 1: ceil(1537 / 16) = 97 blocks: 6 never-used, A150 (uncached),
    #   A149 .. A60 (90 evicted). Caches 96; released: queue A59 .. A0, X96, X95 .. X0.
    # step 2: C = a:2400 + c:100 (max 156) m 1: 155..60 miss, 59..0 cached: a run of 60 < 128
    #   from the right, so the leading run: hit 60 blocks, 960 tokens (nothing skipped: 960 -
    #   2046 < 0). Taken A0..A59 (vLLM's count: 157 - 60 new + 60 evictable = 157 <= 157);
    #   new 97: X96 (uncached), X95 .. X0 (96 evicted). Caches 60..155; released tail first:
    #   queue C156, C155 .. C60, A59 .. A0.
    # step 3: D = a:2400 + d:50 (max 153) m 1: 152..150 miss; 149..22 (C's copies) make the
    #   run of 128: hit 150 blocks, 2400 tokens; skipped 22; new ceil(2451 / 16) - 150 = 4:
    #   C156 (uncached), C155, C154, C153 (3 evicted).
    # Hits 0, 0, 960, 2400; evicted 90 + 96 + 3 = 189.
    "hole in the window, the leading run": (
        [(0, [("a", 2400)], 1), (1, [("x", 1536)], 1), (2, [("a", 2400), ("c", 100)], 1),
         (3, [("a", 2400), ("d", 50)], 1)],
        157, ([0, 0, 960, 2400], 189)),
    # When the window frees a block: at the step starting with c positions held (kvsim's
    # count, one more than vLLM's num_computed_tokens), blocks k < (c - 2046) // 16. Here the
    # block freed at c = 2110 makes the room an admission of that same step needs (with
    # vLLM's count, c - 1, it would be freed a step later and X would wait: BAD SCHEDULE).
    # Capacity 132.
    # step 0: A = a:2100 m 20: ceil(2101 / 16) = 132 blocks (all of them), caches 0..130.
    # step 1 (c = 2101): frees k < 55 // 16 = 3: A2, A1, A0 (the last first).
    # step 10 (c = 2110): frees k < 64 // 16 = 4: A3. X = x:50 m 1 arrives (10 ms): its 4
    #   blocks are free: pops A2, A1, A0, A3 (4 evicted); caches X0..X2; released at the
    #   step's end, tail first: X3 (uncached), X2, X1, X0.
    # step 12 (c = 2112): a new block, X3 (uncached); block 131 (own) becomes cached.
    # step 19: A's 20th token; released tail first: A132 (uncached), A131, A130 .. A4.
    # step 25: D = a:2100 m 1 (max 2099 // 16 = 131): 130..4 cached (127), 3 evicted: no run
    #   of 128; the leading run is 0 (A0 evicted): hit 0. 132 blocks: X2, X1, X0, A132
    #   (uncached), A131 .. A4: 3 + 1 + 127 = 131 evicted.
    # Hits 0, 0, 0; evicted 4 + 131 = 135.
    "window frees at c - W + 1": (
        [(0, [("a", 2100)], 20), (10, [("x", 50)], 1), (25, [("a", 2100)], 1)],
        132, ([0, 0, 0], 135)),
}


def directed_trace(path, which, rng_seed=7):
    rng = random.Random(rng_seed)
    segs = {}
    reqs = []
    with open(path, "w") as f:
        for i, (t_ms, spec, m) in enumerate(DIRECTED[which][0]):
            p = []
            for name, n in spec:
                s = segs.setdefault(name, [])
                while len(s) < n:
                    s.append(rng.randrange(1, 32001))
                p += s[:n]
            t = t_ms * STEP_NS
            f.write(json.dumps({"input_toks": len(p), "output_toks": m, "arrival_time_ns": t,
                                "input_tok_ids": p}) + "\n")
            reqs.append(Req(str(i + 1), t, len(p), m, tokens=p))
    return reqs


# ---- comparison ------------------------------------------------------------------------

def ns_text(t):
    return f"{t // 10**9}.{t % 10**9:09d}"


def run_kvsim(kvsim, trace, model_name, budget, scratch, extra=()):
    per = os.path.join(scratch, "per-request.csv")
    cmd = [kvsim, "replay", trace, "--model", model_name, "--allocator",
           f"sliding-window:block={B},prefix-caching=on", "--kv-budget", str(budget), *FLAGS, *extra,
           "--json", "--per-request", per]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"kvsim failed ({proc.returncode}): {proc.stderr.strip()}")
    run = json.loads(proc.stdout)["runs"][0]
    pc = run["prefix_cache"]
    if pc.get("block_tokens") != B:
        raise RuntimeError(f"kvsim's prefix_cache.block_tokens is {pc.get('block_tokens')}, not {B}")
    figures = {k: pc[k] for k in ("queried_tokens", "hit_tokens", "queried_blocks", "hit_blocks", "evicted_bytes")}
    figures["evictable_at_end"] = pc["evictable_bytes"]["at_end"]
    figures["evictable_peak"] = pc["evictable_bytes"]["peak"]
    figures["allocated_peak"] = run["memory_bytes"]["allocated_slots"]["peak"]
    if pc.get("preempted_queried_tokens"):
        figures["preempted_queried_tokens"] = pc["preempted_queried_tokens"]
    with open(per) as f:
        rows = list(csv.DictReader(f))
    return figures, rows


def check_schedule(rows, reqs, schedule):
    """Every request completed unpreempted, admitted at the first step starting at or after
    its arrival, finished m steps later: the model's step loop."""
    problems = []
    by_id = {r.id: r for r in reqs}
    if len(rows) != len(reqs):
        problems.append(f"{len(rows)} per-request rows for {len(reqs)} requests")
    for row in rows:
        r = by_id.get(row["id"])
        if r is None or int(row["prompt_tokens"]) != r.P or int(row["output_tokens"]) != r.m:
            problems.append(f"request {row['id']}: not the trace's request")
            continue
        if row["outcome"] != "completed" or row["preemptions"] != "0":
            problems.append(f"request {r.id}: {row['outcome']}, {row['preemptions']} preemptions")
            continue
        start, finish = schedule[r.id]
        want = (ns_text(r.arr), ns_text(start), ns_text(start + STEP_NS), ns_text(finish))
        got = (row["arrival_s"], row["first_scheduled_s"], row["first_token_s"], row["finish_s"])
        if want != got:
            problems.append(f"request {r.id}: arrival, admission, first token, finish {', '.join(got)} s; "
                            f"the model's step loop: {', '.join(want)}")
    return problems


def run_case(kvsim, case, scratch):
    name, model_name, fname, make, params, factor, extra = case
    W, bpp, max_len = MODELS[model_name]
    BPP[0] = bpp
    path = os.path.join(scratch, fname)
    reqs = make(path, *params)
    for r in reqs:
        assert r.P + r.m <= max_len, (r.id, r.P, r.m)
    expected = DIRECTED[params[0]][2] if make is directed_trace else None
    if make is directed_trace:
        capacity = DIRECTED[params[0]][1]
    else:
        capacity = budget_for(reqs, W, factor)
    mine, mine_rows, schedule, st = model(reqs, W, capacity)
    if st["overflow"]:
        raise RuntimeError(f"the model needs {st['overflow']} blocks past the capacity {capacity}")
    budget = capacity * B * bpp
    theirs, rows = run_kvsim(kvsim, path, model_name, budget, scratch, extra)
    problems = check_schedule(rows, reqs, schedule)
    their_rows = {row["id"]: int(row["cached_prompt_tokens"]) for row in rows}
    diffs = [f"{k}: model {mine.get(k)}, kvsim {theirs[k]}" for k in theirs if mine.get(k) != theirs[k]]
    row_diffs = [f"request {rid}: model {mine_rows[rid]} cached tokens, kvsim {their_rows.get(rid)}"
                 for rid in mine_rows if mine_rows[rid] != their_rows.get(rid)]
    diffs += row_diffs[:5] + ([f"... {len(row_diffs) - 5} more requests"] if len(row_diffs) > 5 else [])
    if expected is not None:
        hits = [mine_rows[r.id] for r in reqs]
        if hits != expected[0] or st["evicted_blocks"] != expected[1]:
            diffs.append(f"the model's hits {hits}, evicted {st['evicted_blocks']} blocks; "
                         f"worked by hand: {expected[0]}, {expected[1]}")
    else:
        if st["evicted_blocks"] == 0:
            diffs.append("nothing evicted: the budget does not bind (trace design)")
        if st["hits_past_window"] == 0:
            diffs.append("no hit found by the window rule (trace design)")
    line = (f"(hits {mine['hit_tokens']} of {mine['queried_tokens']} tokens, {st['hits_past_window']} by a "
            f"window run, evicted {st['evicted_blocks']} blocks, capacity {capacity} blocks "
            f"(referenced peak {st['peak_referenced']}), up to {st['max_running']} running, "
            f"{st['max_admitted']} admitted in one step)")
    return line, problems, diffs


MISTRAL_SYS = (4100, 4500, 5003, 2990, 6000)
PHI_SYS = (2100, 2500, 1500, 3000)
CASES = [
    # (name, model, file, maker, params, budget factor, extra kvsim flags); params: seed,
    # requests, prompt lengths lo..hi, system prompt lengths, longest long output, mean gap ms
    # (and H for native traces). Budget "exact": the most blocks ever referenced.
    ("mistral, token ids, seed 1, budget exact", "mistral-7b-v0.1", "m1.jsonl", token_trace,
     (1, 200, 4000, 7000, MISTRAL_SYS, 300, 12.0), "exact", ()),
    ("mistral, token ids, seed 2, budget 1.1x", "mistral-7b-v0.1", "m2.jsonl", token_trace,
     (2, 250, 4000, 7000, MISTRAL_SYS, 400, 9.0), 1.1, ()),
    ("mistral, token ids, seed 3, budget exact, --reserve-full-isl on", "mistral-7b-v0.1", "m3.jsonl",
     token_trace, (3, 200, 4000, 7000, MISTRAL_SYS, 300, 10.0), "exact", ("--reserve-full-isl", "on")),
    ("mistral, native H=16, seed 4, budget 1x", "mistral-7b-v0.1", "m4.csv", native_trace,
     (4, 150, 4000, 7000, MISTRAL_SYS, 300, 10.0, 16), 1.0, ()),
    ("mistral, native H=40, seed 5, budget exact", "mistral-7b-v0.1", "m5.csv", native_trace,
     (5, 150, 4000, 7000, MISTRAL_SYS, 300, 10.0, 40), "exact", ()),
    ("phi-3, token ids, seed 6, budget exact", "phi-3-mini-4k", "p6.jsonl", token_trace,
     (6, 250, 2100, 3600, PHI_SYS, 400, 8.0), "exact", ()),
    ("phi-3, token ids, seed 7, budget 1.05x, --reserve-full-isl on", "phi-3-mini-4k", "p7.jsonl",
     token_trace, (7, 250, 2100, 3600, PHI_SYS, 400, 8.0), 1.05, ("--reserve-full-isl", "on")),
    ("phi-3, native H=16, seed 8, budget 1x", "phi-3-mini-4k", "p8.csv", native_trace,
     (8, 200, 2100, 3600, PHI_SYS, 400, 8.0, 16), 1.0, ()),
] + [("directed: " + k, "phi-3-mini-4k", "directed.jsonl", directed_trace, (k,), None, ())
     for k in DIRECTED]


def main():
    args = sys.argv[1:]
    cases = CASES
    if "--cases" in args:
        print(len(cases))
        return 0
    kvsim = args[args.index("--kvsim") + 1]
    scratch = args[-1]
    os.makedirs(scratch, exist_ok=True)
    if "--case" in args:
        cases = [cases[int(args[args.index("--case") + 1])]]
    failed = 0
    for case in cases:
        name = case[0]
        failed |= xcheck_lib.report_case(f"window-prefix xcheck {name}", lambda: run_case(kvsim, case, scratch))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
