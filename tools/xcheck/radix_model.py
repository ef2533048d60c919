#!/usr/bin/env python3
"""Independent model of SGLang's RadixCache under a KV budget, checked against
`kvsim replay --allocator radix:page=N --kv-budget BYTES` on traces where requests never
overlap (each arrives after the previous one finished), so that no scheduler is needed, and
on traces where they overlap under a scheduler kept trivial (every arrival admitted at once;
see "Overlapping requests" below).

Usage: radix_model.py --kvsim PATH [--case K] [--page N] SCRATCH_DIR   (--cases: print how many)

Written from docs/replay.md and SGLang's source, not from kvsim's allocator code. Rules, with
where each comes from ("replay.md" = docs/replay.md; "radix_cache.py" etc. = SGLang's
python/sglang/srt/mem_cache/ and managers/ files):
  * pool: budget // (page x bytes per position) pages (replay.md, "Serving under a memory
    budget"); free = pages - pages in the tree - pages only the running request holds.
  * identity: page k of a prompt of P tokens has one iff it is a full prompt page (k < P // N)
    and, token ids given, it is the prompt's first (k + 1) x N ids; hashes given per H tokens
    (native prefix_hashes), hash i = ((k + 1) x N - 1) // H exists, identity (k, H, hashes
    0..i) (replay.md, "Sharing across requests", Identity; "The radix cache's granularity").
    Identities are exact tuples here, not hashes.
  * accounting: a step allocates a slot for every token it produces; the prefill step
    (P <= the step's token budget here, so one chunk) allocates the prompt and the first
    output token, each decode step one more position, so a request holds P + 1 positions
    after its prefill step and P + m at its end (replay.md, "The engine", Accounting
    convention). Pages: the prefill allocates ceil((P + 1) / N) - h pages (h the hit pages)
    as ONE allocation; a decode step allocates a page when its token starts one. That the
    prompt's pages and the first output token's slot are one allocation (so one evict() of
    all of them) is not said in the docs; it was established by a two-request experiment
    with kvsim (the "whole allocation" directed case pins it); SGLang's alloc_for_extend
    likewise allocates a request's extend tokens at once.
  * match at admission (radix_cache.py match_prefix / _match_prefix_helper): the key is the
    identified pages, at most floor((P - 1) / N) of them (replay.md table row: the last-token
    rule, adjust_max_prefix_ids). The walk stamps the root and every child it enters with the
    op's time, including a child in which the match ends, which is split there
    (_split_node); the suffix keeps that stamp, the new prefix node is stamped too.
  * the matched path is locked (inc_lock_ref) while the request runs; after the prefill the
    lock moves to the end of its inserted prompt (cache_unfinished_req: dec_lock_ref old,
    inc_lock_ref new_last_node). replay.md says only "the path is locked while the request
    runs"; the move of the lock onto the newly inserted pages is SGLang's. (With one request
    at a time its own new pages are always the most recently stamped, so this move is not
    observable here unless a request could not fit alone.)
  * insertion after the prefill step (replay.md; radix_cache.py cache_unfinished_req,
    _insert_helper): the full identified prompt pages; the walk stamps every node it enters,
    splits a node the key diverges inside, adds the rest as a new leaf; pages already in the
    tree past the hit are duplicates and the request's copies are freed at once (replay.md).
  * release (replay.md; cache_finished_req): the prompt is inserted again the same way (a new
    op, new stamps), then the sequence's other full pages, floor((P + m) / N) - (identified
    prompt pages), join as one leaf under the prompt's last node that nothing matches; the
    partial last page is freed; the path is unlocked.
  * eviction (replay.md; radix_cache.py evict; mem_cache/common.py evict_from_tree_cache): an
    allocation of k pages that does not fit in the free pages calls evict(k x N positions):
    unlocked leaves popped least recently stamped first, a whole node at a time, until at
    least k x N positions were freed or nothing is evictable; a parent whose last child went
    and that is unlocked joins the candidates with its own stamp; locked nodes never go;
    the root never goes.
  * time: one logical clock, one tick per match or insert operation (SGLang's
    time.monotonic() per _match_prefix_helper / _insert_helper call). Within one operation
    only one path is stamped; two evictable leaves with the same stamp would make the order
    depend on a tie: the model counts such pops and fails the case if one happens.
  * figures (replay.md, "Sharing across requests", hit-rate paragraph; block = page):
    queried_tokens = sum P, hit_tokens = sum h x N, queried_blocks = sum P // N, hit_blocks =
    sum h; evicted_bytes = positions evicted x bytes per position; evictable at end = every
    tree position (nothing is locked at the end).
Cases: random traces (token ids; native prefix_hashes at H = 4, 5, 6, 16, whose prompt tails past
the last hash are identity-less prompt pages) at pages 1, 4, 16 under budgets of 1x to 5x the
largest request's pages, and a few directed traces of 2 to 5 requests whose figures were worked
out by hand (the duplicate page of the last-token rule at pages 1 and 4, evict() of the whole
allocation, the stamp a splitting match leaves on the suffix). Checks per request
(cached_prompt_tokens of --per-request) and the JSON's prefix_cache figures; verifies from the
per-request CSV that every request completed unpreempted, was admitted at its arrival, ran m
steps and started after the previous one finished; exits 1 on any difference.

Overlapping requests (model_overlap; the cases named "overlap" and "directed overlap"). kvsim
runs with OVERLAP_FLAGS (--watermark 0 --max-running 1000 --max-batched-tokens 100000, the
default --policy vllm) so that only memory could delay an admission, and a budget of a factor
(1 to 1.3) of the most pages the running requests hold at any allocation, that allocation
included: their locked paths (the union of their identified prompt pages), their own pages
and the allocation with its duplicate page. That peak does not depend on what else the tree
caches, so an unbounded run of the model gives it; at it nothing waits, while the tree's
unlocked part is squeezed to nothing at the peak and evicted throughout. (At one page less,
kvsim delays or preempts a request in every random case: the peak is exact.) The engine, from
replay.md "The engine" and "Serving under a memory budget" and budget_model.py's docstring:
  * steps: when nothing runs or waits, time jumps to the next arrival; otherwise the next
    step starts when the last ends, 1 ms later (constant cost). A step takes the arrivals due
    at or before its start (an arrival inside a step waits for the next);
  * within a step: the running requests grow first, in running (admission) order, a decode
    taking a page when its token starts one (position P + g + 1, g tokens produced, starts
    a page iff (P + g) % N == 0), evicting as above if none is free; then every waiting
    request is admitted, in arrival order (a trace's file order at one instant), each whole
    before the next: match (a tick), lock, the prefill's one allocation of ceil((P + 1) / N)
    - h pages, insert (a tick: cache_unfinished_req), duplicates freed, lock moved. kvsim
    inserts when the chunk is allocated (replay.md's radix row: "so a request admitted later
    in the same step already matches what an earlier one of that step is computing"), and
    frees a duplicate at once ("is freed at once, where SGLang holds both copies until the
    step's forward pass is done"): both are kvsim's documented simplifications, modelled;
  * the step's end: each request that produced its last token is released (insert: a tick;
    the unmatchable leaf; unlock) in running order (replay.md, "The engine", 4.: decodes in
    running order, then prefills that complete in the order scheduled, which is the same
    order here, every request being admitted at once);
  * allocated slots (JSON memory_bytes.allocated_slots.peak): locked tree pages plus own
    pages, in positions, the most at a step's end before the releases (a step only adds to
    it until then); unlocked tree pages are free room, not allocated (replay.md, "Evictable").
Checked besides: every request's arrival, first_scheduled_s, first_token_s and finish_s
equal the model's step loop's (BAD SCHEDULE otherwise), so kvsim admitted every request at
the first step starting at or after its arrival and preempted none. Traces: make_prompts or
repeat_prompts with arrivals in bursts (a quarter at the previous one's instant, a fifth
within the same 1 ms, a few after an idle gap off the millisecond grid, exponential gaps
otherwise), up to about 20 running and 5 to 7 admitted in one step. Directed cases,
worked by hand in DIRECTED_OVERLAP and checked against the model too: a locked path that
survives an eviction taking a newer unlocked leaf; two requests in one step with the same
prompt (the second hits the first's pages and frees its duplicate); two releases at one
step's end (the first released is evicted first). No ordering had to be established by
experiment: the documented rules above reproduced kvsim exactly at the first run.
"""
import csv
import heapq
import json
import os
import random
import subprocess
import sys

import xcheck_lib

BYTES_PER_POSITION = 131072  # llama-3.1-8b, bf16: 32 layers x 8 KV heads x 128 x 2 x 2 bytes
STEP_NS = 10**6  # constant:step=1ms


class Req:
    def __init__(self, rid, arrival_ns, prompt, output, tokens=None, hashes=None, hash_block=0):
        self.id, self.arr, self.P, self.m = rid, arrival_ns, prompt, output
        self.tokens, self.hashes, self.H = tokens, hashes, hash_block

    def identities(self, N):
        """Identities of the prompt's leading full pages that have one, page 0 first."""
        out = []
        for k in range(self.P // N):
            if self.tokens is not None:
                out.append(tuple(self.tokens[: (k + 1) * N]))
            else:
                i = ((k + 1) * N - 1) // self.H
                if i >= len(self.hashes):
                    break
                out.append((k, self.H, tuple(self.hashes[: i + 1])))
        return out


# ---- the radix tree --------------------------------------------------------------------

class Node:
    __slots__ = ("key", "parent", "children", "lock", "stamp")

    def __init__(self, key, parent, stamp):
        self.key = key  # a list of page identities
        self.parent = parent
        self.children = {}  # first page identity -> Node
        self.lock = 0
        self.stamp = stamp


class Tree:
    def __init__(self, page, capacity_pages):
        self.N = page
        self.capacity = capacity_pages
        self.root = Node([], None, 0)
        self.root.lock = 1
        self.clock = 0
        self.tree_pages = 0
        self.own_pages = 0  # pages the running request holds outside the tree
        self.evicted_positions = 0
        self.ties = 0
        self.unique = 0
        self.locked_pages = 0  # pages of locked nodes (the running requests' paths)
        self.peak_need = 0  # most pages held (locked + own) at an allocation, with it

    def free(self):
        return self.capacity - self.tree_pages - self.own_pages

    def tick(self):
        self.clock += 1
        return self.clock

    def _split(self, child, n):
        """Split `child` after its first n pages; returns the new prefix node."""
        new = Node(child.key[:n], child.parent, self.clock)  # TreeNode() stamps at creation
        new.lock = child.lock
        child.parent.children[new.key[0]] = new
        child.key = child.key[n:]
        child.parent = new
        new.children[child.key[0]] = child
        return new

    @staticmethod
    def _common(a, b):
        i = 0
        n = min(len(a), len(b))
        while i < n and a[i] == b[i]:
            i += 1
        return i

    def match(self, key):
        """match_prefix: (pages matched, last node)."""
        if not key:
            return 0, self.root  # empty key: nothing stamped
        t = self.tick()
        node = self.root
        node.stamp = t
        matched = 0
        while key and key[0] in node.children:
            child = node.children[key[0]]
            child.stamp = t
            n = self._common(child.key, key)
            if n < len(child.key):
                new = self._split(child, n)
                matched += n
                node = new
                break
            matched += n
            node = child
            key = key[n:]
        return matched, node

    def insert(self, key):
        """_insert_helper: (pages already in the tree, the node at the key's end)."""
        t = self.tick()
        node = self.root
        node.stamp = t
        total = 0
        while key and key[0] in node.children:
            node = node.children[key[0]]
            node.stamp = t
            n = self._common(node.key, key)
            total += n
            key = key[n:]
            if n < len(node.key):
                node = self._split(node, n)
        if key:
            leaf = Node(list(key), node, t)
            node.children[key[0]] = leaf
            self.tree_pages += len(key)
            node = leaf
        return total, node

    def add_unmatchable(self, parent, pages):
        """A leaf of `pages` pages no key can match, stamped with the current op's time."""
        self.unique += 1
        key = [("own", self.unique, j) for j in range(pages)]
        leaf = Node(key, parent, self.clock)
        parent.children[key[0]] = leaf
        self.tree_pages += pages

    def lock(self, node, d):
        while node is not self.root:
            if node.lock == 0 and d > 0:
                self.locked_pages += len(node.key)
            node.lock += d
            assert node.lock >= 0
            if node.lock == 0:
                self.locked_pages -= len(node.key)
            node = node.parent

    def evict(self, positions):
        heap = []
        seq = 0
        stack = [self.root]
        while stack:
            x = stack.pop()
            stack.extend(x.children.values())
            if x is not self.root and not x.children and x.lock == 0:
                heap.append((x.stamp, seq, x))
                seq += 1
        heapq.heapify(heap)
        done = 0
        while done < positions and heap:
            stamp, _, x = heapq.heappop(heap)
            if heap and heap[0][0] == stamp:
                self.ties += 1
            done += len(x.key) * self.N
            self.tree_pages -= len(x.key)
            p = x.parent
            del p.children[x.key[0]]
            if p is not self.root and not p.children and p.lock == 0:
                heapq.heappush(heap, (p.stamp, seq, p))
                seq += 1
        self.evicted_positions += done

    def allocate(self, pages):
        self.peak_need = max(self.peak_need, self.locked_pages + self.own_pages + pages)
        if self.free() < pages:
            self.evict(pages * self.N)
        if self.free() < pages:
            raise RuntimeError(f"model: {pages} pages do not fit ({self.free()} free): budget too small")
        self.own_pages += pages

    def positions(self):
        total = 0
        stack = [self.root]
        while stack:
            x = stack.pop()
            total += len(x.key) * self.N
            stack.extend(x.children.values())
        return total


def ceil_div(a, b):
    return -(-a // b)


def model(reqs, N, capacity_pages):
    tree = Tree(N, capacity_pages)
    per_request = {}
    queried = hits = queried_blocks = hit_blocks = 0
    for r in sorted(reqs, key=lambda r: r.arr):
        ids = r.identities(N)
        limit = (r.P - 1) // N if r.P > 0 else 0
        h, node = tree.match(ids[:limit])
        tree.lock(node, +1)
        # prefill step: the prompt past the hit and the first output token, one allocation
        tree.allocate(ceil_div(r.P + 1, N) - h)
        # cache_unfinished_req: insert the identified prompt pages, free duplicates, move the lock
        present, end = tree.insert(ids)
        assert present >= h
        tree.own_pages -= len(ids) - h  # duplicates freed, the new pages now the tree's
        tree.lock(end, +1)
        tree.lock(node, -1)
        # decode steps: tokens P + 2 .. P + m, a page whenever a token starts one
        for pos in range(r.P + 2, r.P + r.m + 1):
            if (pos - 1) % N == 0:
                tree.allocate(1)
        # cache_finished_req: insert the prompt again, the rest of the full pages as an
        # unmatchable leaf, free the partial page, unlock
        _, end2 = tree.insert(ids)
        assert end2 is end
        rest = (r.P + r.m) // N - len(ids)
        if rest > 0:
            tree.add_unmatchable(end, rest)
        tree.own_pages -= ceil_div(r.P + r.m, N) - len(ids)
        assert tree.own_pages == 0, tree.own_pages
        tree.lock(end, -1)
        per_request[r.id] = h * N
        queried += r.P
        hits += h * N
        queried_blocks += r.P // N
        hit_blocks += h
    assert tree.positions() == tree.tree_pages * N
    figures = {
        "queried_tokens": queried,
        "hit_tokens": hits,
        "queried_blocks": queried_blocks,
        "hit_blocks": hit_blocks,
        "evicted_bytes": tree.evicted_positions * BYTES_PER_POSITION,
        "evictable_at_end": tree.tree_pages * N * BYTES_PER_POSITION,
    }
    return figures, per_request, tree.ties


def model_overlap(reqs, N, capacity):
    """The same cache under kvsim's engine with requests overlapping in time: every arrival
    admitted at the first step starting at or after it (the caller checks kvsim did so),
    every step 1 ms. Returns (figures, cached tokens per request, ties, schedule, stats):
    schedule maps a request to (first step's start, finish) in ns."""
    tree = Tree(N, capacity)
    order = sorted(reqs, key=lambda r: r.arr)  # stable: the file's order at one instant
    per_request, schedule = {}, {}
    queried = hits = queried_blocks = hit_blocks = 0
    stats = {"peak_held": 0, "max_running": 0, "max_admitted": 0, "steps": 0}
    waiting, running = [], []
    ai = 0
    now = None
    while ai < len(order) or waiting or running:
        if not running and not waiting:  # idle: time jumps to the next arrival
            now = order[ai].arr if now is None else max(now, order[ai].arr)
        while ai < len(order) and order[ai].arr <= now:  # arrivals due at the step's start
            waiting.append(order[ai])
            ai += 1
        # running requests grow first, in running (admission) order: the token this step
        # produces is position P + g + 1, and takes a page when it starts one
        for r in running:
            if (r.P + r.g) % N == 0:
                tree.allocate(1)
                r.own += 1
        # then admissions in arrival order, each whole: match, the prefill's one allocation,
        # cache_unfinished_req's insert (so a later admission of this step matches it)
        for r in waiting:
            ids = r.identities(N)
            limit = (r.P - 1) // N if r.P > 0 else 0
            h, node = tree.match(ids[:limit])
            tree.lock(node, +1)
            pages = ceil_div(r.P + 1, N) - h
            tree.allocate(pages)
            present, end = tree.insert(ids)
            assert present >= h
            tree.own_pages -= len(ids) - h  # duplicates freed at once, the new pages the tree's
            r.own = pages - (len(ids) - h)
            tree.lock(end, +1)
            tree.lock(node, -1)
            r.ids, r.end, r.g = ids, end, 0
            schedule[r.id] = [now, None]
            per_request[r.id] = h * N
            queried += r.P
            hits += h * N
            queried_blocks += r.P // N
            hit_blocks += h
            running.append(r)
        stats["max_admitted"] = max(stats["max_admitted"], len(waiting))
        waiting = []
        stats["max_running"] = max(stats["max_running"], len(running))
        stats["peak_held"] = max(stats["peak_held"], tree.locked_pages + tree.own_pages)
        stats["steps"] += 1
        now += STEP_NS
        # the step's end: those that produced their last token are released, in running order
        still = []
        for r in running:
            r.g += 1
            if r.g < r.m:
                still.append(r)
                continue
            _, end2 = tree.insert(r.ids)
            assert end2 is r.end
            rest = (r.P + r.m) // N - len(r.ids)
            if rest > 0:
                tree.add_unmatchable(r.end, rest)
            assert r.own == ceil_div(r.P + r.m, N) - len(r.ids)
            tree.own_pages -= r.own
            tree.lock(r.end, -1)
            schedule[r.id][1] = now
        running = still
    assert tree.own_pages == 0 and tree.locked_pages == 0
    assert tree.positions() == tree.tree_pages * N
    figures = {
        "queried_tokens": queried,
        "hit_tokens": hits,
        "queried_blocks": queried_blocks,
        "hit_blocks": hit_blocks,
        "evicted_bytes": tree.evicted_positions * BYTES_PER_POSITION,
        "evictable_at_end": tree.tree_pages * N * BYTES_PER_POSITION,
    }
    stats["peak_need"] = tree.peak_need
    return figures, per_request, tree.ties, schedule, stats


# ---- traces ----------------------------------------------------------------------------

def make_prompts(rng, n, vocab):
    """Token-id prompts: system prompts of odd lengths, multi-turn sessions that extend their
    previous prompt, exact repeats, cuts of earlier prompts with a new tail (matches ending
    inside nodes), random one-offs."""
    def fresh(k):
        return [rng.randrange(1, vocab + 1) for _ in range(k)]
    systems = [fresh(k) for k in (15, 16, 17, 31, 33, 100)]
    sessions = []
    out = []
    for _ in range(n):
        u = rng.random()
        if u < 0.25 and sessions:
            s = rng.randrange(len(sessions))
            prompt = sessions[s] + fresh(rng.randint(1, 60))
            if len(prompt) > 900:
                prompt = list(rng.choice(systems)) + fresh(rng.randint(1, 40))
            sessions[s] = prompt
        elif u < 0.55:
            prompt = list(rng.choice(systems)) + fresh(rng.randint(0, 120))
            if rng.random() < 0.3:
                sessions.append(prompt)
        elif u < 0.70 and out:
            prompt = list(rng.choice(out[-30:]))
        elif u < 0.85 and out:
            base = rng.choice(out[-40:])
            prompt = base[: rng.randint(1, len(base))] + fresh(rng.randint(0, 30))
        else:
            prompt = fresh(rng.randint(1, 200))
        out.append(prompt)
    return out


def repeat_prompts(rng, n, vocab):
    """Short prompts from a small pool, mostly exact repeats (the last-token rule and its
    duplicate page at every hit that covers the prompt), some with a short new tail."""
    pool = [[rng.randrange(1, vocab + 1) for _ in range(rng.randint(1, 40))] for _ in range(12)]
    out = []
    for _ in range(n):
        prompt = list(rng.choice(pool))
        if rng.random() < 0.3:
            prompt += [rng.randrange(1, vocab + 1) for _ in range(rng.randint(1, 8))]
        out.append(prompt)
    return out


def arrivals(rng, outputs):
    """Arrival times (ns) spaced so each request finishes before the next arrives."""
    t = 0
    out = []
    for m in outputs:
        out.append(t)
        t += (m + 3) * STEP_NS + rng.randrange(0, 3 * STEP_NS)
    return out


def token_trace(path, seed, n, vocab, repeats=False):
    rng = random.Random(seed)
    prompts = (repeat_prompts if repeats else make_prompts)(rng, n, vocab)
    outputs = [rng.randint(1, 40) if rng.random() < 0.8 else rng.randint(41, 150) for _ in prompts]
    reqs = []
    with open(path, "w") as f:
        for i, (prompt, m, t) in enumerate(zip(prompts, outputs, arrivals(rng, outputs))):
            f.write(json.dumps({"input_toks": len(prompt), "output_toks": m, "arrival_time_ns": t,
                                "input_tok_ids": prompt}) + "\n")
            reqs.append(Req(str(i + 1), t, len(prompt), m, tokens=prompt))  # ids 1-based by line
    return reqs


DIRECTED = {
    # the last-token rule's duplicate: B finds 2 of its 3 tokens, computes token 3 again and
    # frees its copy at once; kept, it would push B's sixth decode step into an eviction
    "duplicate (page 1)": ([([1, 2, 3], 1), ([1, 2, 3], 6)], 1, 10),
    "duplicate (page 4)": ([([50, 51, 52, 53], 1), (list(range(1, 9)), 1), (list(range(1, 9)), 13)], 4, 7),
    # an allocation evicts as many positions as it takes, not only its shortfall
    "whole allocation": ([([1, 2, 3, 4], 2), ([6, 7, 8, 9], 1)], 1, 10),
    # the suffix of a split node is stamped by the match that split it: D's eviction takes
    # C's nodes before A's [6..10], which E then finds
    "split stamps": ([(list(range(1, 11)), 1), (list(range(20, 26)), 1), ([1, 2, 3, 4, 5, 30, 31], 1),
                              (list(range(40, 47)), 1), (list(range(1, 11)), 1)], 1, 24),
}


def directed_trace(path, which):
    reqs = []
    t = 0
    with open(path, "w") as f:
        for i, (prompt, m) in enumerate(DIRECTED[which][0]):
            f.write(json.dumps({"input_toks": len(prompt), "output_toks": m, "arrival_time_ns": t,
                                "input_tok_ids": prompt}) + "\n")
            reqs.append(Req(str(i + 1), t, len(prompt), m, tokens=prompt))
            t += (m + 3) * STEP_NS
    return reqs


class Overlapping(list):
    """Requests of a trace that overlap in time: checked with model_overlap."""


def burst_arrivals(rng, n, mean_gap_ms):
    """Arrivals in bursts: a quarter at the previous one's instant, a fifth within the same
    1 ms step, a few after an idle gap of 200-400 ms off the grid, exponential gaps otherwise."""
    return xcheck_lib.burst_arrivals(rng, n, mean_gap_ms, (0.25, 0.45, 0.48), (200, 400))


def overlap_trace(path, seed, n, vocab, mean_gap_ms, repeats=False):
    rng = random.Random(seed)
    prompts = (repeat_prompts if repeats else make_prompts)(rng, n, vocab)
    outputs = [rng.randint(1, 40) if rng.random() < 0.8 else rng.randint(41, 150) for _ in prompts]
    reqs = Overlapping()
    with open(path, "w") as f:
        for i, (prompt, m, t) in enumerate(zip(prompts, outputs, burst_arrivals(rng, n, mean_gap_ms))):
            f.write(json.dumps({"input_toks": len(prompt), "output_toks": m, "arrival_time_ns": t,
                                "input_tok_ids": prompt}) + "\n")
            reqs.append(Req(str(i + 1), t, len(prompt), m, tokens=prompt))
    return reqs


# Directed traces of overlapping requests: (requests as (arrival in ms, prompt, output), page,
# capacity in pages, the hits per request and the positions evicted, worked out by hand).
# "tN" is the clock after N ticks; "own" the pages a request holds outside the tree.
DIRECTED_OVERLAP = {
    # A's locked path survives an eviction that takes a newer unlocked leaf instead. Page 1,
    # capacity 10.
    # step 0 (0 ms): A match [1,2,3] (t1) misses; allocates 5; insert [1,2,3,4] (t2): leaf X,
    #   locked by A; A own 1 (its position 5).
    # step 1 (1 ms): A's token 2 (position 6) takes a page, own 2. B arrives: match [5,6] (t3)
    #   misses; allocates 4 (free 10 - 4 - 2 = 4); insert [5,6,7] (t4): leaf Y; B own 1: 10 of
    #   10. At the step's end B (m 1) is released: insert (t5: Y stamped 5), the rest
    #   (3 + 1) - 3 = 1 page an unmatchable leaf Y' under Y (stamp 5); Y unlocked.
    # step 2: A's token 3 (position 7), no page free: evict(1): X (stamp 2) is the least
    #   recently used but locked; Y' (stamp 5) goes, 1 position, and Y becomes a leaf.
    # step 3: A's token 4 (position 8): evict(1): Y goes, 3 positions; 2 pages free. A (m 4)
    #   is released at the step's end: insert (t6), the rest 8 - 4 = 4 pages a leaf X' under
    #   X; 8 pages in the tree, nothing locked.
    # step 4 (4 ms): C [1,2,3,4,9] m 1: match [1,2,3,4] (t7) finds X: 4 hits; allocates
    #   6 - 4 = 2 (free 2); insert (t8): new leaf [9], own 1; released: insert (t9), the rest
    #   a leaf of 1: 10 pages.
    # Hits 0, 0, 4; evicted 1 + 3 = 4 positions (had X gone instead of Y', C would find 0).
    "locked path survives": ([(0, [1, 2, 3, 4], 4), (1, [5, 6, 7], 1), (4, [1, 2, 3, 4, 9], 1)],
                             1, 10, ([0, 0, 4], 4)),
    # Two requests admitted in one step with the same prompt: the second finds what the first
    # inserted at its allocation (kvsim inserts when the chunk is allocated: replay.md's radix
    # row, "so a request admitted later in the same step already matches what an earlier one
    # of that step is computing"; SGLang's would find nothing), and frees at once its copy of
    # the page the last-token rule made it compute again ("is freed at once, where SGLang
    # holds both copies until the step's forward pass is done"). Page 4, capacity 6.
    # step 0: Z [40,41,42,43] m 1: a key of (4 - 1) // 4 = 0 pages; allocates ceil(5 / 4) = 2;
    #   insert [q] (t1), own 1; released: insert (t2), rest 5 // 4 - 1 = 0, the partial page
    #   freed. Tree [q] (1 page, stamp 2, unlocked).
    # step 1 (1 ms): A [1..8] m 3: match [p1] (t3) misses; allocates ceil(9 / 4) = 3 (free 5);
    #   insert [p1,p2] (t4), locked; A own 1. B [1..8] m 2: match [p1] (t5) finds 1 page
    #   (splitting [p1,p2]); allocates 3 - 1 = 2 (free 6 - 3 - 1 = 2: no eviction); insert
    #   (t6) finds both pages: B's copy of p2 freed, B own 1. Free 6 - 3 - 2 = 1.
    # step 2 (2 ms): decodes (position 10) take no page. C [50,51,52] m 1: no key; allocates 1
    #   page, the free one (had B kept its copy of p2, C would evict [q]). At the step's end B
    #   and C are released (B's partial page freed; C's full page 4 // 4 = 1 an unmatchable
    #   leaf).
    # step 3 (3 ms): D [40,41,42,43,44] m 1: match [q] (t..): 1 page, 4 tokens: [q] survived.
    # Hits 0, 0, 4, 0, 4; nothing evicted.
    "same prompt in one step": ([(0, [40, 41, 42, 43], 1), (1, list(range(1, 9)), 3),
                                 (1, list(range(1, 9)), 2), (2, [50, 51, 52], 1),
                                 (3, [40, 41, 42, 43, 44], 1)], 4, 6, ([0, 0, 4, 0, 4], 0)),
    # Requests released at one step's end are released in running order (replay.md, "The
    # engine", 4.), each insert a tick, so the earlier one's nodes are the older. Page 1,
    # capacity 10.
    # step 0: A [1,2,3] m 2, then B [4,5,6] m 2, both miss; each allocates 4 and inserts its
    #   prompt. Step 1: their tokens 2 take a page each (own 2 each); both released at its end,
    #   A first: insert (tA), rest 5 - 3 = 2 leaf under [1,2,3]; then B (tB > tA) the same.
    #   Tree 10 pages, all unlocked.
    # step 2: C [7,8,9] m 1: misses; allocates 4, none free: evict(4): A's rest (2, tA), then
    #   A's prompt node, now a leaf with stamp tA (3): 5 positions. Released: tree B 5, C 4.
    # step 3: E [4,5,6,9] m 1: match [4,5,6]: 3 hits (B's prompt, survived); allocates 2, 1
    #   free: evict(2): B's rest (2, tB, older than C's rest): B's prompt node, locked by E,
    #   stays. Insert [4,5,6,9]; released: rest 1. Tree 3 + 1 + 1 + 4 = 9 pages.
    # Hits 0, 0, 0, 3; evicted 5 + 2 = 7 positions (with B released first, E would find 0).
    "release order": ([(0, [1, 2, 3], 2), (0, [4, 5, 6], 2), (2, [7, 8, 9], 1), (3, [4, 5, 6, 9], 1)],
                      1, 10, ([0, 0, 0, 3], 7)),
}


def directed_overlap_trace(path, which):
    reqs = Overlapping()
    with open(path, "w") as f:
        for i, (t_ms, prompt, m) in enumerate(DIRECTED_OVERLAP[which][0]):
            t = t_ms * STEP_NS
            f.write(json.dumps({"input_toks": len(prompt), "output_toks": m, "arrival_time_ns": t,
                                "input_tok_ids": prompt}) + "\n")
            reqs.append(Req(str(i + 1), t, len(prompt), m, tokens=prompt))
    reqs.expected = DIRECTED_OVERLAP[which][3]
    return reqs


def native_trace(path, seed, n, vocab, H):
    """Native CSV, chained hashes of each prompt's full H-token blocks."""
    rng = random.Random(seed)
    prompts = make_prompts(rng, n, vocab)
    outputs = [rng.randint(1, 40) if rng.random() < 0.8 else rng.randint(41, 150) for _ in prompts]
    table = {}
    reqs = []
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "arrival", "prompt_tokens", "output_tokens", "prefix_block_tokens", "prefix_hashes"])
        for i, (prompt, m, t) in enumerate(zip(prompts, outputs, arrivals(rng, outputs))):
            hs = [table.setdefault(tuple(prompt[: (b + 1) * H]), len(table) + 1)
                  for b in range(len(prompt) // H)]
            rid = f"r{i}"
            w.writerow([rid, f"{t // 10**9}.{t % 10**9:09d}", len(prompt), m, H, " ".join(map(str, hs))])
            reqs.append(Req(rid, t, len(prompt), m, hashes=hs, hash_block=H))
    return reqs


# ---- comparison ------------------------------------------------------------------------

# the overlapping cases' engine settings: no watermark, and neither the running sequences nor
# a step's tokens bound anything, so that only memory could delay an admission
OVERLAP_FLAGS = ["--watermark", "0", "--max-running", "1000", "--max-batched-tokens", "100000"]


def run(kvsim, trace, N, budget, scratch, extra=()):
    per = os.path.join(scratch, "per-request.csv")
    proc = subprocess.run([kvsim, "replay", trace, "--model", "llama-3.1-8b", "--allocator", f"radix:page={N}",
                           "--kv-budget", str(budget), "--cost", "constant:step=1ms,prefill-token=0ps",
                           *extra, "--json", "--per-request", per], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"kvsim failed ({proc.returncode}): {proc.stderr.strip()}")
    run = json.loads(proc.stdout)["runs"][0]
    pc = run["prefix_cache"]
    if pc.get("block_tokens") != N:
        raise RuntimeError(f"kvsim's prefix_cache.block_tokens is {pc.get('block_tokens')}, not the page {N}")
    figures = {k: pc[k] for k in ("queried_tokens", "hit_tokens", "queried_blocks", "hit_blocks", "evicted_bytes")}
    figures["evictable_at_end"] = pc["evictable_bytes"]["at_end"]
    if extra:
        figures["allocated_peak"] = run["memory_bytes"]["allocated_slots"]["peak"]
    with open(per) as f:
        rows = list(csv.DictReader(f))
    return figures, rows


def check_schedule(rows, reqs):
    """Every request completed, was admitted at its arrival, and started after the previous
    one finished: the schedule the model assumes."""
    problems = []
    by_id = {r.id: r for r in reqs}
    if len(rows) != len(reqs):
        problems.append(f"{len(rows)} per-request rows for {len(reqs)} requests")
    prev_finish = None
    for row in sorted(rows, key=lambda row: float(row["arrival_s"])):
        rid = row["id"]
        if row["outcome"] != "completed" or row["preemptions"] != "0":
            problems.append(f"request {rid}: {row['outcome']}, {row['preemptions']} preemptions")
            continue
        start, finish = float(row["first_scheduled_s"]), float(row["finish_s"])
        if abs(start - float(row["arrival_s"])) > 1e-9:
            problems.append(f"request {rid}: admitted at {start}, arrived at {row['arrival_s']}")
        if prev_finish is not None and start <= prev_finish:
            problems.append(f"request {rid}: starts at {start}, before the previous finished ({prev_finish})")
        r = by_id.get(rid)
        if r is None or int(row["prompt_tokens"]) != r.P or int(row["output_tokens"]) != r.m:
            problems.append(f"request {rid}: not the trace's request")
        elif abs(finish - start - r.m * 1e-3) > 1e-9:
            problems.append(f"request {rid}: ran {finish - start} s for {r.m} tokens")
        prev_finish = finish
    return problems


def ns_text(t):
    return f"{t // 10**9}.{t % 10**9:09d}"


def check_overlap_schedule(rows, reqs, schedule):
    """Every request completed unpreempted, admitted at the first step starting at or after
    its arrival and finished when the model's step loop says: the schedule model_overlap
    assumes (steps 1 ms apart while anything runs, the next arrival's instant when idle)."""
    problems = []
    by_id = {r.id: r for r in reqs}
    if len(rows) != len(reqs):
        problems.append(f"{len(rows)} per-request rows for {len(reqs)} requests")
    for row in rows:
        rid = row["id"]
        r = by_id.get(rid)
        if r is None or int(row["prompt_tokens"]) != r.P or int(row["output_tokens"]) != r.m:
            problems.append(f"request {rid}: not the trace's request")
            continue
        if row["outcome"] != "completed" or row["preemptions"] != "0":
            problems.append(f"request {rid}: {row['outcome']}, {row['preemptions']} preemptions")
            continue
        start, finish = schedule[rid]
        want = (ns_text(r.arr), ns_text(start), ns_text(start + STEP_NS), ns_text(finish))
        got = (row["arrival_s"], row["first_scheduled_s"], row["first_token_s"], row["finish_s"])
        if want != got:
            problems.append(f"request {rid}: arrival, admission, first token, finish {', '.join(got)} s; "
                            f"the model's step loop: {', '.join(want)}")
    return problems


def run_overlap_case(kvsim, name, path, reqs, N, budget_spec, scratch):
    """One overlapping case at page N; returns (status line, problems, diffs)."""
    if isinstance(budget_spec, tuple):
        capacity = budget_spec[1]
    else:
        # the most pages the running requests hold at an allocation, with it (locked paths,
        # own pages, and the allocation, its duplicate page included): independent of what
        # the tree caches besides, so an unbounded run gives it. The budget exceeds it by
        # the factor, so nothing waits for room, and the cache's unlocked part is squeezed
        _, _, _, _, st = model_overlap(reqs, N, 10**12)
        capacity = int(st["peak_need"] * budget_spec) + (1 if budget_spec > 1 else 0)
    budget = capacity * N * BYTES_PER_POSITION
    mine, mine_rows, ties, schedule, st = model_overlap(reqs, N, capacity)
    mine["allocated_peak"] = st["peak_held"] * N * BYTES_PER_POSITION
    theirs, rows = run(kvsim, path, N, budget, scratch, OVERLAP_FLAGS)
    problems = check_overlap_schedule(rows, reqs, schedule)
    their_rows = {row["id"]: int(row["cached_prompt_tokens"]) for row in rows}
    diffs = [f"{k}: model {mine[k]}, kvsim {theirs[k]}" for k in mine if mine[k] != theirs[k]]
    row_diffs = [f"request {rid}: model {mine_rows[rid]} cached tokens, kvsim {their_rows.get(rid)}"
                 for rid in mine_rows if mine_rows[rid] != their_rows.get(rid)]
    diffs += row_diffs[:5] + ([f"... {len(row_diffs) - 5} more requests"] if len(row_diffs) > 5 else [])
    if ties:
        diffs.append(f"the model's eviction order met {ties} tie(s) of equal stamps")
    expected = getattr(reqs, "expected", None)
    if expected is not None:  # a directed case: the model against the hand-worked figures
        hits = [mine_rows[r.id] for r in reqs]
        if hits != expected[0] or mine["evicted_bytes"] != expected[1] * BYTES_PER_POSITION:
            diffs.append(f"the model's hits {hits}, evicted {mine['evicted_bytes'] // BYTES_PER_POSITION} "
                         f"positions; worked by hand: {expected[0]}, {expected[1]}")
    else:
        if mine["evicted_bytes"] == 0:
            diffs.append("nothing evicted: the budget does not bind (trace design)")
        if st["max_running"] < 2:
            diffs.append("requests never overlap (trace design)")
    line = (f"(hits {mine['hit_tokens']} of {mine['queried_tokens']} tokens, evicted "
            f"{mine['evicted_bytes']} bytes, capacity {capacity} pages, up to {st['max_running']} "
            f"running, {st['max_admitted']} admitted in one step)")
    return line, problems, diffs


CASES = [
    # (name, file, trace maker, its arguments, budget): the budget in multiples of the
    # largest request's pages at each page size, or (page, pages) for that page size only
    ("token ids, vocab 50, budget 3x", "tok1.jsonl", token_trace, (11, 300, 50), 3),
    ("token ids, vocab 4, budget 2x", "tok2.jsonl", token_trace, (12, 300, 4), 2),
    ("token ids, vocab 1000, budget 5x", "tok3.jsonl", token_trace, (13, 300, 1000), 5),
    ("token ids, vocab 20, budget 1.5x", "tok4.jsonl", token_trace, (14, 300, 20), 1.5),
    ("token ids, vocab 8, budget 1x", "tok5.jsonl", token_trace, (18, 300, 8), 1),
    ("token ids, repeats, budget 1.3x", "rep1.jsonl", token_trace, (20, 400, 50, True), 1.3),
    ("token ids, repeats, budget 3x", "rep2.jsonl", token_trace, (21, 400, 50, True), 3),
    ("native, H=4, budget 3x", "nat4.csv", native_trace, (15, 300, 10, 4), 3),
    ("native, H=6, budget 2x", "nat6.csv", native_trace, (16, 300, 10, 6), 2),
    ("native, H=16, budget 4x", "nat16.csv", native_trace, (17, 300, 30, 16), 4),
    ("native, H=5, budget 1x", "nat5.csv", native_trace, (19, 300, 10, 5), 1),
] + [("directed: " + k, "directed.jsonl", directed_trace, (k,), v[1:]) for k, v in DIRECTED.items()] + [
    # overlapping requests: the budget a factor of the peak the running requests hold
    ("overlap, token ids, vocab 50, budget 1x", "ov1.jsonl", overlap_trace, (31, 300, 50, 7.0), 1.0),
    ("overlap, token ids, vocab 8, budget 1.1x", "ov2.jsonl", overlap_trace, (32, 300, 8, 8.0), 1.1),
    ("overlap, token ids, vocab 1000, budget 1.3x", "ov3.jsonl", overlap_trace, (33, 300, 1000, 8.0), 1.3),
    ("overlap, token ids, repeats, budget 1x", "ov4.jsonl", overlap_trace, (34, 300, 50, 6.0, True), 1.0),
] + [("directed overlap: " + k, "directed-ov.jsonl", directed_overlap_trace, (k,), (v[1], v[2]))
     for k, v in DIRECTED_OVERLAP.items()]


def main():
    args = sys.argv[1:]
    cases = CASES
    if "--cases" in args:  # how many there are, for a caller that runs them apart
        print(len(cases))
        return 0
    kvsim = args[args.index("--kvsim") + 1]
    scratch = args[-1]
    os.makedirs(scratch, exist_ok=True)
    if "--case" in args:  # only case K (0-based): the cases are independent
        cases = [cases[int(args[args.index("--case") + 1])]]
    pages = (1, 4, 16)
    if "--page" in args:
        pages = (int(args[args.index("--page") + 1]),)
    failed = 0
    for name, fname, make, params, budget_spec in cases:
        path = os.path.join(scratch, fname)
        reqs = make(path, *params)
        if isinstance(reqs, Overlapping):
            for N in pages:
                if isinstance(budget_spec, tuple) and N != budget_spec[0]:
                    continue
                failed |= xcheck_lib.report_case(
                    f"radix xcheck {name}, page {N}",
                    lambda: run_overlap_case(kvsim, name, path, reqs, N, budget_spec, scratch))
            continue
        for N in pages:
            if isinstance(budget_spec, tuple):
                if N != budget_spec[0]:
                    continue
                capacity = budget_spec[1]
            else:
                capacity = int(max(ceil_div(r.P + r.m, N) for r in reqs) * budget_spec)
            budget = capacity * N * BYTES_PER_POSITION
            mine, mine_rows, ties = model(reqs, N, capacity)
            try:
                theirs, rows = run(kvsim, path, N, budget, scratch)
            except RuntimeError as e:
                print(f"radix xcheck {name}, page {N}: FAILED ({e})")
                failed = 1
                continue
            problems = check_schedule(rows, reqs)
            their_rows = {row["id"]: int(row["cached_prompt_tokens"]) for row in rows}
            diffs = [f"{k}: model {mine[k]}, kvsim {theirs[k]}" for k in mine if mine[k] != theirs[k]]
            row_diffs = [f"request {rid}: model {mine_rows[rid]} cached tokens, kvsim {their_rows.get(rid)}"
                         for rid in mine_rows if mine_rows[rid] != their_rows.get(rid)]
            diffs += row_diffs[:5] + ([f"... {len(row_diffs) - 5} more requests"] if len(row_diffs) > 5 else [])
            if ties:
                diffs.append(f"the model's eviction order met {ties} tie(s) of equal stamps")
            if mine["evicted_bytes"] == 0 and not isinstance(budget_spec, tuple):
                diffs.append("nothing evicted: the budget does not bind (trace design)")
            bad = problems + diffs
            status = "ok" if not bad else "DIFFERS" if diffs else "BAD SCHEDULE"
            print(f"radix xcheck {name}, page {N}: {status} (hits {mine['hit_tokens']} of "
                  f"{mine['queried_tokens']} tokens, evicted {mine['evicted_bytes']} bytes)")
            for d in problems[:5] + diffs:
                print("   ", d)
            failed |= bool(bad)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
