#!/usr/bin/env python3
"""Independent model of SGLang's RadixCache under a KV budget, checked against
`kvsim replay --allocator radix:page=N --kv-budget BYTES` on traces where requests never
overlap (each arrives after the previous one finished), so that no scheduler is needed.

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
"""
import csv
import heapq
import json
import os
import random
import subprocess
import sys

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
            node.lock += d
            assert node.lock >= 0
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

def run(kvsim, trace, N, budget, scratch):
    per = os.path.join(scratch, "per-request.csv")
    proc = subprocess.run([kvsim, "replay", trace, "--model", "llama-3.1-8b", "--allocator", f"radix:page={N}",
                           "--kv-budget", str(budget), "--cost", "constant:step=1ms,prefill-token=0ps",
                           "--json", "--per-request", per], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"kvsim failed ({proc.returncode}): {proc.stderr.strip()}")
    run = json.loads(proc.stdout)["runs"][0]
    pc = run["prefix_cache"]
    if pc.get("block_tokens") != N:
        raise RuntimeError(f"kvsim's prefix_cache.block_tokens is {pc.get('block_tokens')}, not the page {N}")
    figures = {k: pc[k] for k in ("queried_tokens", "hit_tokens", "queried_blocks", "hit_blocks", "evicted_bytes")}
    figures["evictable_at_end"] = pc["evictable_bytes"]["at_end"]
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
] + [("directed: " + k, "directed.jsonl", directed_trace, (k,), v[1:]) for k, v in DIRECTED.items()]


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
