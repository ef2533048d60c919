#!/usr/bin/env python3
"""Independent model of `kvsim replay` under a memory budget with --policy vllm (recompute),
for Llama-3.1-8B (131,072 bytes per position) on paged:block=16, or for a model whose layers
all slide on sliding-window:block=16 (vLLM v1's hybrid manager): Mistral-7B-v0.1 (window
4,096, 131,072 bytes per position, max model len 32,768) or Phi-3-mini-4k (window 2,047, off
the block grid, 393,216 bytes per position, max model len 4,096); with or without (Llama,
paged) prefix caching,
--cost constant:step=1ms,prefill-token=0ps (every step lasts 1 ms), n = 1, native CSV traces
(id, arrival, prompt_tokens, output_tokens[, cancel_at]).

Usage: budget_model.py [--kvsim PATH] [--model NAME] [--allocator paged|sliding-window]
                       [--max-model-len N] [--async | --both] [--peak] [--reserve-full-isl]
                       [--prefix-caching]
                       --config B:T:S[:W][:async][:isl] [--config ...] [-v] TRACE.csv...
       (`:async`, or --async for every configuration, adds `--async-scheduling on`; --both runs
       every configuration synchronously and then asynchronously; `:isl`, or
       --reserve-full-isl for every configuration, adds `--reserve-full-isl on`; --peak also
       compares memory_bytes.allocated_slots.peak, in blocks; --model llama-3.1-8b (default),
       mistral-7b-v0.1 or phi-3-mini-4k; --allocator paged (default) or sliding-window;
       --prefix-caching: paged:block=16,prefix-caching=on, and the prefix-cache figures too)
       (or --blocks B --mbt T --max-running S [--watermark W] for one configuration)
Runs, for every trace and configuration, `kvsim replay TRACE --model NAME --allocator
paged:block=16|sliding-window:block=16 --kv-budget B x 16 x (bytes per position)
--cost constant:step=1ms,prefill-token=0ps --max-batched-tokens T --max-running S
[--max-model-len N] [--watermark W] [--reserve-full-isl on] --per-request F --json` (W omitted
or `default`: kvsim's own 0.01; PATH defaults to $KVSIM, else build-rel/src/kvsim) and compares,
exactly, per request (`--per-request`): outcome, first_scheduled_s, first_token_s, finish_s,
ttft_s, e2e_s, tpot_s, preemptions, arrival_s; per run (JSON `runs[0]`): serving.preemptions,
preempted_requests, max_preemptions_per_request, recomputed_tokens, refused_too_large,
time_at_full_capacity_ns; requests.total, completed, cancelled_queued, cancelled_running,
refused_too_long, generated_tokens; time.duration_ns, time.iterations. Prints what differs
(everything with -v) and exits 1 on any mismatch. BUDGET_DEBUG=1 traces preemptions and
re-admissions on stderr; BUDGET_COVER=1 prints which rule branches the runs took.

Written from docs/replay.md ("The engine", "Serving under a memory budget", "Per-request
output", the allocators' table), `kvsim replay --help` and vLLM's scheduler and KV-cache
manager, not from the engine's, the schedulers' or the allocators' code.

Rules modelled (positions held per request; blocks(x) = ceil(x / 16); capacity C blocks):
  * time in ns; every step lasts 1 ms. At a step's start the arrivals and cancellations due
    at or before it are taken, in time order, an arrival first at one instant; arrivals join
    the back of the waiting queue. When nothing runs or waits, time jumps to the next
    arrival. A cancellation inside a step takes effect at its instant: the request's token of
    that step never comes (a request finishing at the step's end is completed if the
    cancellation falls exactly then: it is taken at the next step's start);
  * accounting: a step allocates, at its start, a slot for every token it produces; the step
    that completes a prefill of `need` tokens also produces an output token (it then holds
    need + 1); a decode step adds one position; a request with prompt P and output m ends
    holding P + m. First token: the end of the step completing its first prefill; finish:
    the end of the step producing token m, when it is released;
  * each step first grows the running requests in the running queue's order (admission
    order; a re-admitted request goes to the back): decodes by one position, then the prefill
    under way (there is at most one, the newest) by min(remaining, T - tokens taken), so a
    prefill gets what T leaves after one token per decoding sequence;
  * a running request that cannot get its blocks: when it is the only running request it is
    refused (`refused_too_large`: it outgrows the whole budget alone); otherwise the last of
    the running queue is preempted by recompute (freed, its generated tokens kept, put at the
    front of the waiting queue; several victims of one step keep admission order there) and
    it tries again, unless the victim was itself. A step that preempted admits nothing;
  * admission, when nothing was preempted: waiting requests in queue order, nobody
    overtaking the head, while fewer than S sequences run and the step has tokens left. The
    chunk is min(need, T - tokens taken), need = prompt + tokens generated before a
    preemption, plus one position when it completes `need`. It must fit the free blocks and,
    while any request runs (requests admitted earlier in this step included), leave
    int(W x C) blocks free (v0's `watermark_blocks = int(watermark * num_gpu_blocks)`, as the
    docs give it: a float product, truncated). A head whose first chunk, min(need, T), does
    not fit C blocks is refused as soon as it heads the queue (nothing need have left);
  * --reserve-full-isl on (docs: "the blocks of its whole sequence so far must fit too";
    vLLM's allocate_slots(full_sequence_must_fit=True) asks get_num_blocks_to_allocate for
    min(request.num_tokens, max_model_len) first): before the chunk, blocks(need) must fit the
    free blocks, leaving the watermark too while any request runs (the docs leave open
    whether the watermark applies; kvsim applies it, as later vLLMs add watermark_blocks to
    both checks; BUDGET_ISL_NO_WM=1: not). When it does not, admission stops (time at full
    capacity); a head whose whole sequence can never fit C blocks is refused at the head;
  * tokens recomputed: positions a preemption discarded (its computed positions: P + g for a
    decoding request, the prefill's computed part otherwise) that a later prefill chunk
    computes again, counted chunk by chunk as the chunks are scheduled: a re-prefill that is
    preempted or cancelled before reaching the old length counts only what it reached;
  * generated tokens: every output token produced, those of requests later refused or
    cancelled included;
  * time at full capacity: the duration of each step in which a growth forced a preemption
    or an admission was refused for room (free blocks or watermark);
  * run duration: from the first arrival to the end of the last step (or a later arrival);
    a step with nothing scheduled (every running request preempted, or the head refused
    alone) runs no forward pass and lasts 1 ns (docs/replay.md, "Cost models").

Sliding-window:block=16 (the allocators' table: "paged, and on sliding-window groups the blocks
wholly before the window are freed: a step that starts with c tokens computed skips positions
before c - W + 1"; vLLM: SlidingWindowManager.get_num_skipped_tokens = max(0, c - W + 1),
remove_skipped_blocks frees the blocks wholly before it; kvsim's c is one more than vLLM's
num_computed_tokens, as its positions are), the lines marked SLIDING:
  * a request holds blocks(held) - dropped blocks; at each allocator call for this step's
    tokens (a decode whose next position starts a block or whose window passes a block, a
    prefill chunk) c = the positions it holds, and the blocks wholly before c - W + 1 are
    freed first, before the new blocks are counted (allocate_slots calls
    remove_skipped_blocks before get_num_blocks_to_allocate, even when the allocation then
    fails). So a prompt prefilled in one step is held whole in that step (c = 0) and dropped
    at the next, and a decoding sequence holds at most ceil((W - 1) / 16) + 1 blocks;
  * admission (c = 0, nothing computed: no prefix caching) counts blocks(chunk) as paged does;
    a preempted request is freed whole and its re-prefill starts again from c = 0, so it
    too is counted blocks(L) at L positions, for the watermark (L = its chunk's positions)
    and with --reserve-full-isl for the whole sequence (L = P + g), with no window skipped
    (free() dropped its num_cached_block; get_num_blocks_to_allocate, vLLM 0.19);
  * ASYNC: c includes the previous step's tokens (a scheduled chunk counts as computed), as
    in vLLM 0.19; vllm#47728 (later) frees on the processed count, one step later;
  * within a step the decodes grow in running order, as vLLM's scheduler walks self.running,
    each allocate_slots freeing what its own window passed first: a request short of a
    block finds the blocks older requests' windows freed this step;
  * vLLM 0.20 (vllm#40946) caps the whole sequence's count at
    cdiv(min(W - 1 + T, max_model_len), 16) + 1 for every request: BUDGET_ISL_CAP=1.

Prefix caching (`--prefix-caching`: `--allocator paged:block=16,prefix-caching=on`, Llama only;
docs/replay.md "Sharing across requests" and the allocators' table, docs/fidelity.md "kvsim's
vLLM schedule against vLLM v1's code"; vLLM: kv_cache_manager.py `get_computed_blocks`,
`allocate_slots`, `free`; single_type_kv_cache_manager.py `get_num_blocks_to_allocate`,
`cache_blocks`, `free`, `FullAttentionManager.find_longest_cache_hit`; block_pool.py
`get_cached_block`, `cache_full_blocks`, `get_new_blocks`, `_maybe_evict_cached_block`, `touch`,
`free_blocks`; kv_cache_utils.py `FreeKVCacheBlockQueue`), traces with `prefix_block_tokens`
16 and `prefix_hashes` (gen_budget_trace.py --prefix), the lines marked PREFIX:
  * identity: prompt block k (k < P // 16) the trace gives a hash for is the chain of the given
    hashes 0..k, shared by every request whose hashes agree up to k; every other full block (a
    generated block, a prompt block past the given hashes) has an identity only its request
    can produce (docs: `own_block_hash`; vLLM hashes the tokens, and the trace says nothing
    about generated tokens, so they are the request's own);
  * the pool (Pool): C blocks, a free queue (never-used blocks first, in id order; a new block
    is popped from the head, and a cached one is evicted then, its identity dropped; a freed
    block is appended at the tail, a request's blocks tail first, `free_blocks(reversed(...))`,
    and only when no other request references it); the cache keeps every block cached under
    an identity, duplicates included (two requests computing one block both cache it), and a
    lookup takes the first cached of them (`get_one_block`). Free blocks = the free queue's
    length: cached blocks nobody references are free, for admission and in the peak;
  * admission (a waiting or preempted request, nothing computed): hits = the leading run of
    its identities found cached, at most (P + g - 1) // 16 blocks (`max_cache_hit_length =
    request.num_tokens - 1`, so a re-admitted request's hits may cover its generated tokens);
    the chunk is min(P + g - 16 x hits, T - tokens taken) (cached tokens take none of the
    token budget) and holds 16 x hits + chunk (+1 when it completes) positions; it counts
    blocks(positions) - hits + (hits nobody references) blocks (`get_num_blocks_to_allocate`),
    against the free blocks and the watermark as before; with --reserve-full-isl,
    blocks(P + g) - hits + (unreferenced hits) first. Once admitted the hits are referenced
    (an unreferenced one taken off the free queue, `touch`) before its new blocks are popped.
    A failed admission touches nothing (allocate_slots returns None before
    `allocate_new_computed_blocks`; BUDGET_PC_REFRESH=1 reads kvsim's documented difference,
    docs/fidelity.md "A failed admission refreshes the blocks it would have hit");
  * caching: every allocation (admission, prefill chunk, decode) caches the request's full
    blocks below the tokens computed once the step's tokens are: `num_tokens_to_cache =
    min(computed + new, request.num_tokens)`, at scheduling. A chunk caches min(done + chunk,
    P + g) // 16 blocks; a decode holding h positions before the step computes position h - 1
    (the token sampled last) and caches h // 16 (the token it samples is not computed yet).
    ASYNC: request.num_tokens lacks the previous step's sampled token when the step is planned
    (output placeholders), so a decode caches (h - 1) // 16 (BUDGET_PC_ASYNC_NO_LAG=1: h // 16);
  * preemption and release (finish, cancellation, refusal) free the request's blocks as
    above (ASYNC: a running request cancelled in or after a step first caches what that step
    computed, held - 1 positions, as the next step's plan, made as the step began, did; not
    when the step completes it, as that plan skips a request at max_tokens); a victim keeps
    its identities, so back at the head it finds its prompt and generated blocks that were
    not evicted meanwhile. Tokens recomputed: the positions the
    re-prefill computes below what it had computed (its hits are not computed);
  * OBSERVED 3: a head whose first chunk at a whole step's budget can never fit is refused (as
    without caching), counted as an admission is: blocks(16 x hits + min(P + g - 16 x hits,
    T) (+1)) - hits + (hits nobody references) > C (so a head whose hits are held by a
    running request waits, and is refused once they are freed). vLLM refuses nothing at
    admission (its pool holds max_model_len); the docs give the rule without caching, and
    with it this reading matched kvsim where counting the hits as free (or only
    min(P + g, T)) did not. A head that fails this only with its hits (without them,
    blocks(min(P + g, T) (+1)) <= C) is not refused there: it waits, as vLLM's does, since
    the hits may be evicted meanwhile, and is refused if alone it still does not fit
    (docs/replay.md, the progress guarantee);
  * figures: per request `cached_prompt_tokens` (16 x hits at its first admission); the JSON's
    prefix_cache: queried tokens (P) and blocks (P // 16) and hits at first admissions, the
    lookups after a preemption apart (P + g, 16 x hits), blocks evicted (a cached block popped
    for a new one), and cached blocks in the free queue at the end (evictable).

Asynchronous scheduling (`--async-scheduling on`; docs/replay.md "Asynchronous scheduling"),
the lines marked ASYNC:
  * a step that directly follows a step in which something ran was planned when that step
    began: it admits only requests that arrived at or before the previous step's start (the
    queue is FCFS, so admission stops at the first later arrival; a request not yet seen is
    not refused either);
  * a request that completes in step k, or is cancelled within it (vLLM processes the abort
    with the step's output, after the next plan; its outcome and times are the
    cancellation's), keeps its place in the running
    list and its blocks while step k + 1 is planned: it takes no tokens and does not grow, it
    counts against S, its blocks are taken for growth, admission and the watermark; when a
    request cannot grow and the running list's last entry is such a completion, it is
    preempted for nothing (a preemption for it and the run, its blocks freed, its outcome
    and times unchanged, nothing queued, and the step admits nothing); when the growing
    request is itself the last entry (an older completion holds the blocks) it preempts
    itself as usual. The completions' blocks are freed once the plan is made; when that left
    the plan empty (every running request preempted itself, nothing scheduled), vLLM's empty
    step skips the forward pass and the plan is made again at once, at the same instant and
    within the same step, with no lag and admissions allowed;
  * no lag when nothing else runs: at a step's start, after the cancellations due then,
    only completions left: their blocks are freed first and the step admits as if
    synchronous. Also when the plan's growth refused the only running request (it outgrew
    the budget alone): then nothing runs when the admissions are planned (LAG_AT_ADMISSION;
    the docs leave the instant open, kvsim judges it at admission: BUDGET_LAG_AT_START=1
    gives the other reading, which differs from kvsim on 10 of the 187 seeded/case runs);
  * chunked prefills and decodes continue every step, as before.

Where the docs said nothing, the model followed kvsim, and docs/replay.md now says so:
  OBSERVED 1: a refusal (growing alone, or a head that can never fit) is not time at full
    capacity, and the step in which the last running request is refused still counts as an
    iteration of 1 ms (an empty step) even when nothing else is left.
  OBSERVED 2: a request cancelled after its first admission counts as `cancelled_running`
    even when the cancellation finds it back in the waiting queue after a preemption;
    `finish_s` of a cancelled request is its cancellation instant.
Two rules this model first read differently from kvsim, where kvsim was changed:
  * a head whose first chunk can never fit is refused as soon as it heads the queue in a
    step with room under S and tokens left, as vLLM v0 refuses AllocStatus.NEVER
    (`_schedule_prefills`: FINISHED_IGNORED, popleft, continue); kvsim had left it blocking
    the queue until nothing else ran;
  * the watermark is int(W * C) in double precision, as vLLM v0's Python computes it: with
    W = 0.29 and C = 100, int(28.999999999999996) = 28 blocks; kvsim had taken the exact
    product's floor, 29.
"""
import csv
import json
import os
import subprocess
import sys
import tempfile

import xcheck_lib

STEP = 1_000_000
BLOCK = 16
# --model: (bytes per position, sliding window W or 0 for full attention, max model length);
# every layer of these slides with one window, or none does: one layer group
MODELS = {"llama-3.1-8b": (131072, 0, 131072),
          "mistral-7b-v0.1": (131072, 4096, 32768),
          "phi-3-mini-4k": (393216, 2047, 4096)}  # a window off the 16-token block grid
MODEL = "llama-3.1-8b"
BPP, WINDOW, MAXLEN = MODELS[MODEL]
BLOCK_BYTES = BLOCK * BPP
SLIDING = False  # --allocator sliding-window: blocks behind the window are freed
PREFIX = False  # --prefix-caching: paged:block=16,prefix-caching=on (vLLM's automatic prefix caching)
# PREFIX + ASYNC: a decode's tokens to cache are capped at request.num_tokens, which under
# asynchronous scheduling lacks the previous step's token (vLLM 0.19); BUDGET_PC_ASYNC_NO_LAG=1:
# cached as in synchronous scheduling
PC_ASYNC_LAG = not os.environ.get("BUDGET_PC_ASYNC_NO_LAG")
# PREFIX: a failed admission touches nothing (vLLM's allocate_slots returns None first);
# BUDGET_PC_REFRESH=1: its unreferenced hits go back to the free queue's tail, as kvsim's
# admit-then-release does (docs/fidelity.md, "A failed admission refreshes the blocks ...")
PC_REFRESH = bool(os.environ.get("BUDGET_PC_REFRESH"))
FULL_ISL = False  # --reserve-full-isl on (every configuration; `:isl` for one)
# SLIDING + FULL_ISL: vLLM 0.19 counts the whole sequence's blocks, uncapped; BUDGET_ISL_CAP=1
# caps them at cdiv(min(W - 1 + T, max model len), 16) + 1 as vLLM 0.20 does (vllm#40946,
# SlidingWindowSpec.max_admission_blocks_per_request)
ISL_CAP = bool(os.environ.get("BUDGET_ISL_CAP"))
ISL_WM = not os.environ.get("BUDGET_ISL_NO_WM")
KVSIM = os.environ.get("KVSIM", "build-rel/src/kvsim")
COVER = __import__("collections").Counter()
DEBUG = bool(os.environ.get("BUDGET_DEBUG"))
# ASYNC: "nothing else running" is judged when the admissions are planned (after the growth,
# whose refusal of a lone request leaves nothing running), not at the step's start;
# BUDGET_LAG_AT_START=1 judges it at the start (the first reading of the docs).
PEAK = False  # --peak
LAG_AT_ADMISSION = not os.environ.get("BUDGET_LAG_AT_START")
# ASYNC: a plan made at the previous step's start sees the arrivals due at that instant (taken
# at its start, as every step takes them); BUDGET_STRICT_LAG=1 hides them too.
STRICT_LAG = bool(os.environ.get("BUDGET_STRICT_LAG"))


def blocks(x):
    return -(-x // BLOCK)


def held_blocks(r):
    """Blocks a request holds: those of its positions less those its window dropped."""
    return blocks(r.held) - r.dropped


def identity(r, k):
    """PREFIX: block k's identity: the chain of the given hashes 0..k for a full prompt block
    the trace identifies (two prompts share block k iff their hashes agree up to k), else one
    only this request can produce (a generated block, a prompt block past the given hashes)."""
    while len(r.ids) <= k:
        j = len(r.ids)
        if j < min(len(r.hashes), r.P // BLOCK):
            r.ids.append(("p",) + tuple(r.hashes[:j + 1]))
        else:
            r.ids.append(("own", r.ordinal, j))
    return r.ids[k]


class Pool:
    """PREFIX: vLLM v1's BlockPool (block_pool.py) over C blocks: a free queue
    (kv_cache_utils.py FreeKVCacheBlockQueue: popleft for a new block, remove for a touched
    hit, append at the tail on free), every block's ref count and hash, and the cache
    (hash -> the blocks cached under it, first cached first: get_one_block returns the first;
    duplicates are kept, cache_full_blocks does not de-duplicate)."""

    def __init__(self, cap):
        self.queue = {b: None for b in range(cap)}  # insertion-ordered: head first
        self.ref = [0] * cap
        self.hash = [None] * cap
        self.cache = {}
        self.evicted = 0

    def free_count(self):
        return len(self.queue)

    def hits(self, r, need):
        """get_computed_blocks: the leading run of r's identities found cached, at most
        (need - 1) // 16 blocks (max_cache_hit_length = request.num_tokens - 1)."""
        out = []
        for k in range((need - 1) // BLOCK):
            c = self.cache.get(identity(r, k))
            if not c:
                break
            out.append(c[0])
        return out

    def touch(self, blocks):
        for b in blocks:
            if self.ref[b] == 0:
                del self.queue[b]
            self.ref[b] += 1

    def take(self, n):
        """get_new_blocks: n blocks from the queue's head, a cached one evicted."""
        out = []
        for _ in range(n):
            b = next(iter(self.queue))
            del self.queue[b]
            h = self.hash[b]
            if h is not None:
                lst = self.cache[h]
                lst.remove(b)
                if not lst:
                    del self.cache[h]
                self.hash[b] = None
                self.evicted += 1
                COVER["prefix: cached block evicted"] += 1
            assert self.ref[b] == 0
            self.ref[b] = 1
            out.append(b)
        return out

    def free(self, blocks):
        """free_blocks(reversed(req_blocks)): tail first, so its last blocks go first."""
        for b in reversed(blocks):
            self.ref[b] -= 1
            assert self.ref[b] >= 0
            if self.ref[b] == 0:
                self.queue[b] = None

    def cache_blocks(self, r, upto):
        """cache_full_blocks for r's full blocks below `upto` tokens not cached yet."""
        n = upto // BLOCK
        for k in range(r.ncached, n):
            b = r.blocks[k]
            assert self.hash[b] is None
            h = identity(r, k)
            self.hash[b] = h
            self.cache.setdefault(h, []).append(b)
        r.ncached = max(r.ncached, n)

    def evictable(self):
        return sum(1 for b in self.queue if self.hash[b] is not None)


def set_model(name):
    global MODEL, BPP, WINDOW, MAXLEN, BLOCK_BYTES
    MODEL = name
    BPP, WINDOW, MAXLEN = MODELS[name]
    BLOCK_BYTES = BLOCK * BPP


secs_to_ns = xcheck_lib.secs_to_ns


class Req:
    __slots__ = ("ordinal", "id", "arr", "P", "m", "cancel", "g", "held", "need", "done",
                 "first_sched", "first_tok", "finish", "npre", "outcome", "discarded", "adm",
                 "lingering", "cache_on_free", "dropped", "ev",
                 "hashes", "blocks", "ncached", "cached_first", "ids")

    def decoding(self):
        return self.done >= self.need


def read_trace(path):
    reqs = []
    for r, row in xcheck_lib.read_native(path, Req):
        r.g = 0          # output tokens produced
        r.held = 0       # positions held
        r.need = 0       # tokens of the current prefill (prompt + g at its admission)
        r.done = 0       # of them computed
        r.first_sched = r.first_tok = r.finish = None
        r.npre = 0
        r.outcome = None
        r.discarded = 0  # the most positions of its sequence it ever had computed
        r.lingering = False  # ASYNC: completed (or cancelled) in the previous step, blocks still held
        r.cache_on_free = True  # ASYNC, PREFIX: what its last step computed is cached when freed
        r.dropped = 0    # SLIDING: leading blocks freed, wholly behind the window
        # PREFIX: the given per-block hashes (prefix_block_tokens 16), the block ids held in
        # order, how many of them are cached (vLLM's num_cached_block), the tokens found
        # cached at the first admission (cached_prompt_tokens)
        hs = (row.get("prefix_hashes") or "").split()
        if hs:
            assert int(row["prefix_block_tokens"]) == BLOCK, "prefix hashes must be per 16 tokens"
        r.hashes = [int(h) for h in hs]
        r.blocks = []
        r.ncached = 0
        r.cached_first = None
        r.ids = []
        reqs.append(r)
    for a, b in zip(reqs, reqs[1:]):
        assert a.arr <= b.arr, "trace must be in arrival order"
    return reqs


def run_model(reqs, cap, T, S, wm, async_sched=False, full_isl=False):
    wm_blocks = int(wm * cap)
    free = cap
    waiting = []   # queue order
    running = []   # admission order
    now = None
    prev_start = None  # ASYNC: the start of the step before this one
    carry_full = False  # ASYNC: a plan redone at once
    st = dict(preemptions=0, recomputed=0, full_ns=0, iterations=0, refused_large=0,
              refused_long=0, end=None, admissions=0, arrived=0,
              cancelled_running=0, cancelled_queued=0, peak_end=0, peak_mid=0,
              pc_queried=0, pc_hits=0, pc_queried_blocks=0, pc_hit_blocks=0,
              pc_pre_queried=0, pc_pre_hits=0)
    pool = Pool(cap) if PREFIX else None

    def release(r):
        nonlocal free
        if PREFIX:
            pool.free(r.blocks)
            r.blocks = []
            r.ncached = 0
            free = pool.free_count()
        else:
            free += held_blocks(r)
        r.held = 0
        r.dropped = 0

    def free_lingering(r):
        """ASYNC: a completion's output processed: vLLM's AsyncScheduler caches the blocks its
        last step computed (`_update_request_with_output`: cache_blocks(num_computed_tokens -
        num_output_placeholders), the step's P + m - 1 positions), then frees it."""
        if PREFIX and PC_ASYNC_LAG and r.cache_on_free:
            if r.outcome == "cancelled":
                COVER["prefix async: cancelled after the next plan cached its step"] += 1
            pool.cache_blocks(r, r.held - 1)
        running.remove(r)
        release(r)
        r.lingering = False

    def grow(r, newheld, computed):
        """Allocate r's blocks for `newheld` positions; PREFIX: popped from the free queue's
        head (evicting), then its full blocks below `computed` tokens cached (allocate_slots:
        num_tokens_to_cache = min(computed + new, request.num_tokens), at scheduling)."""
        nonlocal free
        if PREFIX:
            r.blocks += pool.take(blocks(newheld) - len(r.blocks))
            free = pool.free_count()
            pool.cache_blocks(r, computed)
        else:
            free -= blocks(newheld) - blocks(r.held)
        st["peak_mid"] = max(st["peak_mid"], cap - free)
        r.held = newheld

    def drop(r):
        """SLIDING: the call for this step's tokens starts with c = r.held positions computed
        and frees the blocks wholly before c - W + 1 (get_num_skipped_tokens), before it
        counts the new blocks (allocate_slots: remove_skipped_blocks first, even when the
        allocation then fails)."""
        nonlocal free
        if not SLIDING or not WINDOW:
            return
        d = max(r.dropped, max(0, r.held - WINDOW + 1) // BLOCK)
        if d > r.dropped:
            COVER["window dropped blocks"] += 1
            if not r.decoding():
                COVER["window dropped blocks of a prefill under way"] += 1
            free += d - r.dropped
            r.dropped = d

    def recompute(r, tok):
        """A prefill chunk of `tok` positions from r.done: those below what the request had
        computed before a preemption are computed again (counted as scheduled, chunk by chunk,
        so a re-prefill preempted or cancelled part-way counts only what it reached)."""
        st["recomputed"] += max(0, min(r.done + tok, r.discarded) - r.done)

    def preempt(v):
        if DEBUG:
            print(f"  t={now} preempt {v.id} held={v.held} g={v.g} need={v.need} done={v.done}",
                  file=sys.stderr)
        running.remove(v)
        release(v)
        v.npre += 1
        st["preemptions"] += 1
        # the positions it had computed (not a slot allocated for this step's token)
        v.discarded = max(v.discarded, v.P + v.g if v.decoding() else v.done)
        v.need = 0
        v.done = 0
        return v

    # arrivals and cancellations in time order, an arrival first at one instant
    events = sorted([(r.arr, 0, r.ordinal, r) for r in reqs] +
                    [(r.cancel, 1, r.ordinal, r) for r in reqs if r.cancel is not None],
                    key=lambda e: e[:3])
    ei = 0

    def finishes_now(r):
        """Inside a step: r produces its last token in it."""
        tok = scheduled.get(r)
        if tok is None or r.g + 1 < r.m:
            return False
        return r.decoding() or r.done + tok == r.need

    def process(until, strict):
        """Take the events due at or before `until` (before it, when strict: inside a step)."""
        nonlocal ei
        while ei < len(events) and (events[ei][0] < until if strict else events[ei][0] <= until):
            at, kind, _, r = events[ei]
            ei += 1
            if kind == 0:
                st["arrived"] += 1
                if r.P + r.m > MAXLEN or r.m > MAXLEN or r.P == 0:
                    r.outcome = "refused"
                    st["refused_long"] += 1
                    continue
                waiting.append(r)
            elif r.outcome is None:
                if r in running:
                    if DEBUG:
                        print(f"  t={at} cancel running {r.id} npre={r.npre} held={r.held} "
                              f"g={r.g} need={r.need} done={r.done}", file=sys.stderr)
                    cache_step = PREFIX and PC_ASYNC_LAG and async_sched and not (strict and finishes_now(r))
                    if async_sched and strict:
                        # ASYNC: the abort is processed when the step's output comes back, after
                        # the next step was planned: like a completion in this step it keeps its
                        # place and its blocks through that plan (and may be preempted for
                        # nothing); its row is written now, with its preemptions so far
                        COVER["async: cancelled within a step, held through the next plan"] += 1
                        r.lingering = True
                        r.cache_on_free = cache_step
                        st["cancelled_running"] += 1
                        r.outcome = "cancelled"
                        r.finish = at
                        continue
                    if cache_step:
                        # ASYNC: the next step's plan, made as this step began, cached what
                        # this step computes (request.num_tokens then holds the token it
                        # reads), unless this step completes r (that plan skips a request at
                        # max_tokens); the abort is processed when the step ends
                        COVER["prefix async: cancelled after the next plan cached its step"] += 1
                        pool.cache_blocks(r, r.held - 1)
                    running.remove(r)
                    release(r)
                    st["cancelled_running"] += 1
                elif r in waiting:
                    waiting.remove(r)
                    # OBSERVED 2: admitted once, then preempted: counted as running
                    st["cancelled_running" if r.first_sched is not None else "cancelled_queued"] += 1
                else:
                    continue
                r.outcome = "cancelled"
                r.finish = at  # OBSERVED 2: finish_s of a cancelled request is its cancellation

    while True:
        # ASYNC: the step this one follows planned it while it ran. With nothing else running
        # (only the previous step's completions), vLLM's plan was empty and it plans again
        # once the outputs arrive: no lag, and the completions' blocks are freed first.
        def unlag():
            for r in [r for r in running if r.lingering]:
                COVER["async: nothing else running, lingering freed first"] += 1
                free_lingering(r)
        if async_sched and all(r.lingering for r in running):
            unlag()
        # the next step's start
        if not running and not waiting:
            # idle until the next arrival (a cancellation then finds nothing to cancel)
            while ei < len(events) and events[ei][1] == 1 and not (running or waiting):
                process(events[ei][0], False)
            if ei >= len(events):
                break
            t_next = events[ei][0]
            now = t_next if now is None else max(now, t_next)
        active_before = any(not r.lingering for r in running)
        process(now, False)
        lag = False
        if async_sched and active_before and not any(not r.lingering for r in running):
            # (taken first, as every step takes them: then nothing else runs, no lag)
            COVER["async: a cancellation at the step's start left nothing running"] += 1
        if async_sched:
            # decided after the cancellations due at this instant are taken
            if any(not r.lingering for r in running):
                lag = True
                COVER["async: lagged plan"] += 1
                if any(r.lingering for r in running):
                    COVER["async: lagged plan with lingering completions"] += 1
            else:
                unlag()
        if not running and not waiting:
            continue
        had_lingering = lag and any(r.lingering for r in running)
        full = carry_full  # ASYNC: an empty plan redone at once keeps its refusals
        carry_full = False
        refused_alone = 0
        preempted = []
        preempted_nothing = []  # ASYNC: completions preempted for nothing
        scheduled = {}  # request -> tokens this step
        # growth: decodes first, then prefills under way, each in running order (with one
        # prefill under way at most, the newest, this is also vLLM's plain running order)
        for phase in ("decode", "prefill"):
            order = [r for r in running if not r.lingering  # ASYNC: no extra decode for a completion
                     and (phase == "decode") == r.decoding()]
            for r in order:
                if r not in running:
                    continue  # preempted this step
                if phase == "decode":
                    tok, newheld = 1, r.held + 1
                else:
                    left = T - sum(scheduled.values())
                    if left <= 0:
                        continue
                    tok = min(r.need - r.done, left)
                    newheld = r.held + tok + (1 if r.done + tok == r.need else 0)
                drop(r)
                ok = True
                while blocks(newheld) - blocks(r.held) > free:
                    if len(running) == 1:
                        running.remove(r)
                        release(r)
                        r.outcome = "refused"
                        COVER["refused growing alone"] += 1
                        refused_alone += 1
                        st["refused_large"] += 1
                        ok = False
                        break
                    full = True
                    v = running[-1]
                    if v.lingering:
                        # ASYNC: the newest is a completion holding its blocks through this
                        # plan: preempted for nothing (counted, freed, its token still comes)
                        if DEBUG:
                            print(f"  t={now} preempt completed {v.id} held={v.held}", file=sys.stderr)
                        COVER[f"async: completion preempted for nothing in {phase}"] += 1
                        running.remove(v)
                        release(v)
                        v.lingering = False
                        v.npre += 1
                        st["preemptions"] += 1
                        preempted_nothing.append(v)
                        continue
                    if v is r and any(x.lingering for x in running):
                        COVER["async: self-preemption behind an older completion"] += 1
                    preempted.append(preempt(v))
                    COVER[f"preempted in {phase}"] += 1
                    if v is r:
                        COVER["victim is itself"] += 1
                        ok = False
                        break
                    if v in scheduled:  # grown earlier this step: its tokens go back
                        del scheduled[v]
                        COVER["victim grown this step"] += 1
                if not ok:
                    continue  # r left running (refused or preempted)
                if phase == "decode":
                    # vLLM computes position held - 1 (the token sampled last) in this step;
                    # ASYNC: request.num_tokens lacks the previous step's token, one less
                    computed = r.held - (1 if async_sched and PC_ASYNC_LAG else 0)
                else:
                    computed = r.done + tok
                grow(r, newheld, computed)
                scheduled[r] = tok
                if phase == "prefill":
                    recompute(r, tok)
        # victims to the front of the queue, in admission order
        waiting[:0] = sorted(preempted, key=lambda v: v.adm)
        if lag and LAG_AT_ADMISSION and not any(not r.lingering for r in running):
            # ASYNC: the plan's growth refused the only running request (it outgrew the budget
            # alone): nothing else runs when the admissions are planned, so they are not lagged
            COVER["async: lag lifted, no request left running after the growth"] += 1
            lag = False
        if not preempted and not preempted_nothing:
            while waiting:
                if len(running) >= S:
                    break
                left = T - sum(scheduled.values())
                if left <= 0:
                    break
                r = waiting[0]
                if lag and r.arr == prev_start:
                    COVER["async: head arrived exactly at the previous step's start"] += 1
                if lag and (r.arr >= prev_start if STRICT_LAG else r.arr > prev_start):
                    # ASYNC: arrived during the previous step: this plan was made before it came
                    COVER["async: head arrived too late for this plan"] += 1
                    break
                need = r.P + r.g
                # PREFIX: get_computed_blocks, then the chunk is what is not cached (the hits
                # take nothing from the token budget); 0 hits without prefix caching
                hits = pool.hits(r, need) if PREFIX else []
                h = len(hits)
                # hits nobody references are taken off the free queue: they count as new
                # blocks (get_num_blocks_to_allocate: + the computed blocks with ref_cnt == 0);
                # hits a running request holds take no free block
                z = sum(1 for x in hits if pool.ref[x] == 0) if PREFIX else 0
                if h:
                    COVER["prefix: admission with hits"] += 1
                    if z < h:
                        COVER["prefix: hits held by a running request"] += 1
                    if z:
                        COVER["prefix: hits off the free queue"] += 1
                tok = min(need - h * BLOCK, left)
                newheld = h * BLOCK + tok + (1 if h * BLOCK + tok == need else 0)
                b = blocks(newheld) - h + z
                # --reserve-full-isl: allocate_slots(full_sequence_must_fit=True) first asks for
                # the blocks of request.num_tokens (prompt + generated), with no window skips
                # (nothing computed yet), against the free blocks: None stops admission
                fb = blocks(need) - h + z
                if SLIDING and WINDOW and ISL_CAP:
                    fb = min(blocks(need), blocks(min(WINDOW - 1 + T, MAXLEN)) + 1)
                if full_isl and fb < blocks(need):
                    COVER["window: whole sequence counted within the window"] += 1
                # PREFIX (OBSERVED 3): the count of the first chunk at a whole step's token budget,
                # which starts past the hits, must fit the pool: blocks(16 h + min(rest, T)) - h
                # + (hits nobody references) (h = z = 0 without caching)
                first = blocks(h * BLOCK + min(need - h * BLOCK, T) + (1 if need - h * BLOCK <= T else 0)) - h + z
                # ... and refused there only if it would not fit without its hits either: the hits
                # move while others run (evicted, or held again), so one that fits without them
                # waits at the head, as vLLM's waiting request does, and is refused once alone
                never_hit = first > cap or (full_isl and fb > cap)
                never_bare = blocks(min(need, T) + (1 if need <= T else 0)) > cap or (full_isl and blocks(need) > cap)
                if never_hit and not never_bare:
                    COVER["prefix: hits do not fit alone, a whole chunk without them would: waits"] += 1
                if never_hit and never_bare:
                    # (with --reserve-full-isl, also a whole sequence that can never fit)
                    COVER["refused at the head"] += 1
                    if first <= cap:
                        COVER["refused at the head: whole sequence never fits"] += 1
                    waiting.pop(0)
                    r.outcome = "refused"
                    st["refused_large"] += 1
                    continue
                if DEBUG and PREFIX:
                    print(f"  t={now} try {r.id} need={need} hits={h} unref={z} chunk={tok} count={b} "
                          f"whole={fb} free={free} running={len(running)}", file=sys.stderr)
                def refresh():
                    # BUDGET_PC_REFRESH: kvsim's admit-then-release of a failed admission
                    if PC_REFRESH:
                        for x in reversed(hits):
                            if pool.ref[x] == 0:
                                del pool.queue[x]
                                pool.queue[x] = None
                if full_isl:
                    if fb > free or (ISL_WM and running and free - fb < wm_blocks):
                        COVER["whole sequence does not fit"] += 1
                        if b <= free and not (running and free - b < wm_blocks):
                            COVER["whole sequence does not fit, its chunk would"] += 1
                        full = True
                        refresh()
                        break
                if b > free and not running:
                    # alone, and its hits (which nothing runs to evict) do not fit: refused,
                    # not time at full capacity (OBSERVED 1; vLLM would wait for ever)
                    COVER["prefix: refused alone for its hits"] += 1
                    waiting.pop(0)
                    r.outcome = "refused"
                    st["refused_large"] += 1
                    continue
                if b > free or (running and free - b < wm_blocks):
                    if b <= free:
                        COVER["watermark alone refused"] += 1
                    if h:
                        COVER["prefix: admission with hits refused for room"] += 1
                    full = True
                    refresh()
                    break
                if not running and free - b < wm_blocks:
                    COVER["watermark waived, nothing running"] += 1
                if tok < need:
                    COVER["admitted on a partial chunk"] += 1
                waiting.pop(0)
                if PREFIX:
                    pool.touch(hits)
                    r.blocks = list(hits)
                    r.ncached = h
                    r.held = h * BLOCK
                    free = pool.free_count()
                    if r.first_sched is None:
                        r.cached_first = h * BLOCK
                        st["pc_queried"] += r.P
                        st["pc_hits"] += h * BLOCK
                        st["pc_queried_blocks"] += r.P // BLOCK
                        st["pc_hit_blocks"] += h
                    else:
                        st["pc_pre_queried"] += need
                        st["pc_pre_hits"] += h * BLOCK
                        if h:
                            COVER["prefix: re-admission finds its own blocks"] += 1
                        if h * BLOCK > r.P:
                            COVER["prefix: re-admission hit covers generated tokens"] += 1
                grow(r, newheld, min(h * BLOCK + tok, need))
                r.need = need
                r.done = h * BLOCK
                if DEBUG and r.discarded:
                    print(f"  t={now} readmit {r.id} had {r.discarded} chunk {tok}", file=sys.stderr)
                recompute(r, tok)
                if r.first_sched is None:
                    r.first_sched = now
                running.append(r)
                r.adm = st["admissions"]
                st["admissions"] += 1
                scheduled[r] = tok
        # PEAK: blocks held once the step is planned (the completions' included, in async)
        st["peak_end"] = max(st["peak_end"], cap - free)
        # ASYNC: the completions' blocks are freed once this step is planned (same instant)
        for r in [r for r in running if r.lingering]:
            free_lingering(r)
        if async_sched and had_lingering and (preempted or preempted_nothing) and not scheduled and not running:
            # ASYNC: behind a completion's blocks every running request preempted itself: the
            # plan holds nothing, vLLM's empty step skips the forward pass and it plans again
            # at once (the completions' output processed, their blocks freed): the same
            # instant, one step, no lag, admissions allowed
            COVER["async: empty plan redone at once"] += 1
            carry_full = full
            continue
        if not scheduled:
            COVER["empty step"] += 1
            COVER[f"empty step: preempted={bool(preempted)} running={len(running)} "
                  f"waiting={len(waiting)} refused alone={refused_alone}"] += 1
        # the step: one with nothing scheduled runs no forward pass (vLLM's model runner
        # returns at once), and lasts 1 ns, as time moves on at every step
        step = STEP if scheduled else 1
        end = now + step
        st["iterations"] += 1
        if full:
            st["full_ns"] += step
        process(end, True)
        for r, tok in scheduled.items():
            if r.outcome is not None:
                continue  # cancelled inside the step: its token never came
            if r.decoding():
                r.g += 1
            else:
                r.done += tok
                if r.done == r.need:
                    r.g += 1
                    if r.first_tok is None:
                        r.first_tok = end
        for r in list(running):
            if r.outcome == "cancelled":
                continue  # ASYNC: cancelled within the step, held through the next plan
            if r.g >= r.m:
                if async_sched:
                    r.lingering = True  # ASYNC: keeps its place and blocks through the next plan
                else:
                    running.remove(r)
                    release(r)
                r.finish = end
                r.outcome = "completed"
        st["end"] = end
        prev_start = now
        now = end
    for r in [r for r in running if r.lingering]:  # the last step's completions
        free_lingering(r)
    assert free == cap, (free, cap)
    if PREFIX:
        st["pc_evicted"] = pool.evicted
        st["pc_evictable_end"] = pool.evictable()
    return st


fmt = xcheck_lib.fmt


def allocator():
    if PREFIX:
        return "paged:block=16,prefix-caching=on"
    return "sliding-window:block=16" if SLIDING else "paged:block=16"


def run_kvsim(trace, cap, T, S, wm, async_sched=False, full_isl=False):
    with tempfile.TemporaryDirectory() as d:
        pr = os.path.join(d, "per-request.csv")
        cmd = [KVSIM, "replay", trace, "--model", MODEL, "--allocator", allocator(),
               "--kv-budget", str(cap * BLOCK_BYTES), "--cost", "constant:step=1ms,prefill-token=0ps",
               "--max-batched-tokens", str(T), "--max-running", str(S), "--per-request", pr,
               "--json", "--quiet"]
        if MAXLEN != MODELS[MODEL][2]:
            cmd += ["--max-model-len", str(MAXLEN)]
        if wm is not None:
            cmd += ["--watermark", str(wm)]
        if async_sched:
            cmd += ["--async-scheduling", "on"]
        if full_isl:
            cmd += ["--reserve-full-isl", "on"]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        with open(pr, newline="") as f:
            rows = list(csv.DictReader(f))
    return json.loads(out), rows, cmd


def compare(trace, cap, T, S, wm, async_sched=False, full_isl=False, verbose=False):
    js, rows, cmd = run_kvsim(trace, cap, T, S, wm, async_sched, full_isl)
    reqs = read_trace(trace)
    st = run_model(reqs, cap, T, S, 0.01 if wm is None else wm, async_sched, full_isl)
    run = js["runs"][0]
    assert run["allocator"] == allocator()
    assert run["serving"]["capacity_bytes"] == cap * BLOCK_BYTES, run["serving"]["capacity_bytes"]
    if PREFIX:
        assert run["allocator"] == allocator(), run["allocator"]
    (group,) = js["model"]["layer_groups"]
    assert group["bytes_per_position"] == BPP
    assert group.get("window_tokens", 0) == WINDOW, group
    assert js["model"]["max_model_len"] == MAXLEN
    chk = xcheck_lib.Tally(verbose, 48)

    assert len(rows) == len(reqs), (len(rows), len(reqs))
    for r, row in zip(reqs, rows):
        assert row["id"] == r.id and int(row["ordinal"]) == r.ordinal
        xcheck_lib.check_schedule(chk, r, row)
        chk(f"{r.id} arrival_s", fmt(r.arr), row["arrival_s"])
        done = r.outcome == "completed"
        chk(f"{r.id} ttft_s", fmt(r.first_tok - r.arr) if done else None, row["ttft_s"] or None)
        chk(f"{r.id} e2e_s", fmt(r.finish - r.arr) if done else None, row["e2e_s"] or None)
        tpot = (r.finish - r.first_tok) // (r.m - 1) if done and r.m >= 2 else None
        chk(f"{r.id} tpot_s", fmt(tpot), row["tpot_s"] or None)
        if PREFIX:
            # (0 for a request never admitted)
            chk(f"{r.id} cached_prompt_tokens", r.cached_first or 0, int(row["cached_prompt_tokens"]))
    sv, rq, tm = run["serving"], run["requests"], run["time"]
    pre = [r.npre for r in reqs]
    chk("serving.preemptions", st["preemptions"], sv["preemptions"])
    chk("serving.preempted_requests", sum(1 for p in pre if p), sv["preempted_requests"])
    chk("serving.max_preemptions_per_request", max(pre, default=0), sv["max_preemptions_per_request"])
    chk("serving.recomputed_tokens", st["recomputed"], sv["recomputed_tokens"])
    chk("serving.refused_too_large", st["refused_large"], sv["refused_too_large"])
    chk("serving.time_at_full_capacity_ns", st["full_ns"], sv["time_at_full_capacity_ns"])
    chk("requests.completed", sum(r.outcome == "completed" for r in reqs), rq["completed"])
    chk("requests.refused_too_long", st["refused_long"], rq["refused_too_long"])
    chk("requests.total", st["arrived"], rq["total"])
    chk("requests.cancelled_queued", st["cancelled_queued"], rq["cancelled_queued"])
    chk("requests.cancelled_running", st["cancelled_running"], rq["cancelled_running"])
    chk("requests.generated_tokens", sum(r.g for r in reqs),
        rq["generated_tokens"])
    end = max([st["end"] or 0] + [r.arr for r in reqs])
    start = reqs[0].arr if reqs else 0
    chk("time.duration_ns", end - start, tm["duration_ns"])
    chk("time.iterations", st["iterations"], tm["iterations"])
    if PREFIX:  # docs/replay.md "Sharing across requests": queries and hits at first
        # admissions, after preemption apart, blocks evicted, cached and evictable at the end
        pc = run["prefix_cache"]
        chk("prefix_cache.queried_tokens", st["pc_queried"], pc["queried_tokens"])
        chk("prefix_cache.hit_tokens", st["pc_hits"], pc["hit_tokens"])
        chk("prefix_cache.queried_blocks", st["pc_queried_blocks"], pc["queried_blocks"])
        chk("prefix_cache.hit_blocks", st["pc_hit_blocks"], pc["hit_blocks"])
        chk("prefix_cache.preempted_queried_tokens", st["pc_pre_queried"], pc["preempted_queried_tokens"])
        chk("prefix_cache.preempted_hit_tokens", st["pc_pre_hits"], pc["preempted_hit_tokens"])
        chk("prefix_cache.evicted_bytes / block bytes", st["pc_evicted"], pc["evicted_bytes"] / BLOCK_BYTES)
        chk("prefix_cache.evictable_bytes.at_end / block bytes", st["pc_evictable_end"],
            pc["evictable_bytes"]["at_end"] / BLOCK_BYTES)
    if PEAK:  # opt-in: the peak of allocated slots (blocks x 16) at any allocation, a growth
        # that a later preemption of the same plan undoes included (BUDGET_PEAK_END=1: only
        # once each step is planned, a reading kvsim does not follow)
        key = "peak_end" if os.environ.get("BUDGET_PEAK_END") else "peak_mid"
        chk("memory_bytes.allocated_slots.peak / block bytes", st[key],
            run["memory_bytes"]["allocated_slots"]["peak"] // BLOCK_BYTES)
    return chk.bad, chk.total, chk.lines, cmd


def parse_config(text, async_all=False):
    """B:T:S[:W][:async][:isl] (W a fraction, or 'default' or empty for kvsim's own 0.01
    without --watermark; a field `async` adds --async-scheduling on, `isl` --reserve-full-isl
    on)."""
    parts = text.split(":")
    async_sched = async_all
    full_isl = FULL_ISL
    while parts[-1] in ("async", "isl"):
        if parts[-1] == "async":
            async_sched = True
        else:
            full_isl = True
        parts = parts[:-1]
    wm = None if len(parts) < 4 or parts[3] in ("default", "") else float(parts[3])
    return int(parts[0]), int(parts[1]), int(parts[2]), wm, async_sched, full_isl


if __name__ == "__main__":
    argv = sys.argv[1:]
    async_all = "--async" in argv       # every configuration with --async-scheduling on
    both = "--both" in argv             # every configuration synchronous, then asynchronous
    PEAK = "--peak" in argv             # also compare the peak of allocated slots
    FULL_ISL = "--reserve-full-isl" in argv  # every configuration with --reserve-full-isl on
    PREFIX = "--prefix-caching" in argv  # paged:block=16,prefix-caching=on
    argv = [a for a in argv if a not in ("--async", "--both", "--peak", "--reserve-full-isl",
                                         "--prefix-caching")]
    opts = {"--kvsim": None, "--blocks": None, "--mbt": None, "--max-running": None,
            "--watermark": None, "--model": None, "--allocator": None, "--max-model-len": None}
    for k in opts:
        if k in argv:
            i = argv.index(k)
            opts[k] = argv[i + 1]
            del argv[i:i + 2]
    if opts["--kvsim"]:
        KVSIM = opts["--kvsim"]
    if opts["--model"]:
        set_model(opts["--model"])
    if opts["--allocator"]:
        assert opts["--allocator"] in ("paged", "sliding-window"), opts["--allocator"]
        SLIDING = opts["--allocator"] == "sliding-window"
    assert not (PREFIX and (SLIDING or MODEL != "llama-3.1-8b")), "--prefix-caching: paged, llama-3.1-8b"
    if opts["--max-model-len"]:
        MAXLEN = int(opts["--max-model-len"])
    configs = []
    while "--config" in argv:
        i = argv.index("--config")
        configs.append(parse_config(argv[i + 1], async_all))
        del argv[i:i + 2]
    verbose = "-v" in argv
    argv = [a for a in argv if a != "-v"]
    if opts["--blocks"]:
        configs.append((int(opts["--blocks"]), int(opts["--mbt"]), int(opts["--max-running"]),
                        None if opts["--watermark"] is None else float(opts["--watermark"]),
                        async_all, FULL_ISL))
    if both:
        configs = ([c[:4] + (False,) + c[5:] for c in configs] +
                   [c[:4] + (True,) + c[5:] for c in configs])
    if len(argv) < 1 or not configs:
        sys.exit(__doc__)
    failed = 0
    for trace in argv:
        for cap, T, S, wm, async_sched, full_isl in configs:
            bad, total, lines, cmd = compare(trace, cap, T, S, wm, async_sched, full_isl, verbose)
            for l in lines[:40]:
                print(l)
            if len(lines) > 40:
                print(f"... {len(lines) - 40} more lines")
            nreq = len(read_trace(trace))
            print(f"{'MISMATCH' if bad else 'ok':8s} {trace} [{MODEL}, {allocator()}, blocks {cap}, "
                  f"T {T}, S {S}, watermark {wm if wm is not None else 'default'}"
                  f"{', async' if async_sched else ''}{', full isl' if full_isl else ''}]: "
                  f"{total - bad}/{total} figures match, {nreq} requests")
            if bad:
                print("  " + " ".join(cmd).replace(cmd[cmd.index("--per-request") + 1], "OUT.csv"))
            failed += bool(bad)
    if os.environ.get("BUDGET_COVER"):
        print("branches taken:", dict(COVER))
    sys.exit(1 if failed else 0)
