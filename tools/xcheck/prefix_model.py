#!/usr/bin/env python3
"""Independent model of which prompt blocks vLLM's automatic prefix caching finds, checked
against `kvsim replay --allocator paged:block=B,prefix-caching=on` without a budget; and of
which pages SGLang's radix cache finds, against `radix:page=B` on the same traces.

Usage: prefix_model.py --kvsim PATH [--case K] [--block B] SCRATCH_DIR   (--cases: print how many)

Written from docs/replay.md ("Sharing across requests"), not from the engine's code. Rules:
  * identity: block k (of B tokens) of a prompt of P tokens has an identity iff it is a full
    prompt block (k < P // B) and
      - token ids given: its identity is the prompt's first (k + 1) x B token ids;
      - hashes given per H tokens (Mooncake's hash_ids, H = 512; native prefix_hashes with
        their prefix_block_tokens): the hash i = ((k + 1) x B - 1) // H exists, and its
        identity is (k, H, the given hashes 0..i): two prompts share block k iff their hashes,
        given at the same size, agree up to i;
  * without a budget every request is admitted at the first step at or after its arrival, in
    arrival order, and nothing is ever evicted;
  * at admission the hit is the leading run of blocks whose identities are cached, at most
    (P - 1) // B blocks (the last prompt token is always computed); the admission computes the
    prompt, and every full prompt block with an identity is then cached (the hit ones already
    are; a block computed again, past the limit, is cached a second time);
  * hit rate: queries are the prompt tokens of every admitted request, hits the cached tokens
    (hit blocks x B); in blocks, queries are the full prompt blocks P // B;
  * at the end every cached block is free and evictable: (blocks cached) x B x bytes per
    position (Llama-3.1-8B, bf16: 131,072).
The radix cache (docs/replay.md, the `radix[:page=1]` row and "The radix cache's
granularity"), pages of B tokens, without a budget, differs in one rule: a page the request
computes again that is already in the tree is freed, not kept as a second copy, so the tree
holds each identity once and at the end (blocks cached) is the count of distinct identities
inserted. Its identity of page k is the one above (token k gets one iff the hash of its block
exists), its match the same leading run, at most floor((P - 1) / B) pages, and the pages it
holds without identity (generated tokens, the partial last page) are freed at release.
Exact identities (tuples), not hashes: kvsim's 64-bit chained hashes must agree with them.
Checks per request (cached_prompt_tokens of --per-request) and the JSON's prefix_cache
figures; exits 1 on any difference.
"""
import csv
import json
import os
import random
import subprocess
import sys

BYTES_PER_POSITION = 131072  # llama-3.1-8b, bf16: 32 layers x 8 KV heads x 128 x 2 x 2 bytes


class Req:
    def __init__(self, rid, arrival_ns, prompt, output, tokens=None, hashes=None, hash_block=0):
        self.id, self.arr, self.P, self.m = rid, arrival_ns, prompt, output
        self.tokens, self.hashes, self.H = tokens, hashes, hash_block

    def identities(self, B):
        """The identities of the prompt's full blocks that have one, block 0 first."""
        out = []
        for k in range(self.P // B):
            if self.tokens is not None:
                out.append(tuple(self.tokens[: (k + 1) * B]))
            else:
                i = ((k + 1) * B - 1) // self.H
                if i >= len(self.hashes):
                    break
                out.append((k, self.H, tuple(self.hashes[: i + 1])))
        return out


def model(reqs, B, radix=False):
    cached = set()
    per_request = {}
    queried = hits_total = queried_blocks = hit_blocks = blocks_cached = 0
    for r in sorted(reqs, key=lambda r: r.arr):  # stable: file order at one instant
        ids = r.identities(B)
        limit = (r.P - 1) // B if r.P > 0 else 0
        h = 0
        while h < min(limit, len(ids)) and ids[h] in cached:
            h += 1
        new = [x for x in ids[h:] if radix and x not in cached]
        for x in ids:
            cached.add(x)
        blocks_cached += len(new) if radix else len(ids) - h
        per_request[r.id] = h * B
        queried += r.P
        hits_total += h * B
        queried_blocks += r.P // B
        hit_blocks += h
    figures = {
        "queried_tokens": queried,
        "hit_tokens": hits_total,
        "queried_blocks": queried_blocks,
        "hit_blocks": hit_blocks,
        "evicted_bytes": 0,
        "evictable_at_end": blocks_cached * B * BYTES_PER_POSITION,
    }
    return figures, per_request


# ---- traces ----------------------------------------------------------------------------

def shared_prompts(rng, n, vocab):
    """Prompts built from a few system prompts and multi-turn sessions, as token ids."""
    systems = [[rng.randrange(vocab) for _ in range(rng.choice([15, 16, 17, 31, 32, 33, 100, 512, 530]))]
               for _ in range(4)]
    sessions = []
    out = []
    for _ in range(n):
        u = rng.random()
        if u < 0.3 and sessions:  # the next turn of a session: its context plus more
            s = rng.randrange(len(sessions))
            prompt = sessions[s] + [rng.randrange(vocab) for _ in range(rng.randint(1, 300))]
            sessions[s] = prompt
        elif u < 0.7:
            prompt = list(rng.choice(systems)) + [rng.randrange(vocab) for _ in range(rng.randint(0, 400))]
            if rng.random() < 0.2:
                sessions.append(prompt)
        elif u < 0.8 and out:  # the very same prompt again (the last-token rule)
            prompt = list(rng.choice(out))
        else:
            prompt = [rng.randrange(vocab) for _ in range(rng.randint(1, 600))]
        if not prompt:
            prompt = [1]
        out.append(prompt)
    return out


def token_trace(path, seed, n):
    rng = random.Random(seed)
    reqs = []
    t = 0
    with open(path, "w") as f:
        for i, prompt in enumerate(shared_prompts(rng, n, 50)):
            t += int(rng.expovariate(1 / 20e6)) if rng.random() > 0.1 else 0
            m = rng.randint(1, 40)
            f.write(json.dumps({"input_toks": len(prompt), "output_toks": m, "arrival_time_ns": t,
                                "input_tok_ids": prompt}) + "\n")
            reqs.append(Req(str(i + 1), t, len(prompt), m, tokens=prompt))  # kvsim numbers JSONL lines from 1
    return reqs


def hashed(prompt, H, table, partial=False):
    """Chained identities of a prompt's full H-blocks, as small integers; with `partial`, of
    its last partial block too, as Mooncake gives one id to every block, ceil(P / H) in all."""
    out = []
    blocks = -(-len(prompt) // H) if partial else len(prompt) // H
    for i in range(blocks):
        key = tuple(prompt[: (i + 1) * H])
        out.append(table.setdefault(key, len(table)))
    return out


def content_hashed(prompt, H, table):
    """Per-block content identities, NOT chained: equal blocks after different prefixes get
    the same hash, which must not make them shared (the rule compares hashes 0..i)."""
    return [table.setdefault(tuple(prompt[i * H:(i + 1) * H]), len(table)) for i in range(len(prompt) // H)]


def native_trace(path, seed, n, H, chained=True):
    rng = random.Random(seed)
    table = {}
    reqs = []
    t = 0
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "arrival", "prompt_tokens", "output_tokens", "prefix_block_tokens", "prefix_hashes"])
        for i, prompt in enumerate(shared_prompts(rng, n, 3)):
            t += int(rng.expovariate(1 / 20e6)) if rng.random() > 0.1 else 0
            m = rng.randint(1, 40)
            hs = hashed(prompt, H, table) if chained else content_hashed(prompt, H, table)
            w.writerow([i, f"{t // 10**9}.{t % 10**9:09d}", len(prompt), m, H, " ".join(map(str, hs))])
            reqs.append(Req(str(i), t, len(prompt), m, hashes=hs, hash_block=H))
    return reqs


def mooncake_trace(path, seed, n):
    rng = random.Random(seed)
    table = {}
    reqs = []
    t_ms = 0
    with open(path, "w") as f:
        for i, prompt in enumerate(shared_prompts(rng, n, 2)):
            prompt = prompt * 4  # long enough for 512-token blocks
            t_ms += rng.randint(0, 30)
            m = rng.randint(1, 40)
            hs = hashed(prompt, 512, table, partial=True)
            f.write(json.dumps({"timestamp": t_ms, "input_length": len(prompt), "output_length": m,
                                "hash_ids": hs}) + "\n")
            reqs.append(Req(str(i + 1), t_ms * 10**6, len(prompt), m, hashes=hs, hash_block=512))
    return reqs


# ---- comparison ------------------------------------------------------------------------

def run(kvsim, trace, B, scratch, radix=False):
    spec = f"radix:page={B}" if radix else f"paged:block={B},prefix-caching=on"
    per = os.path.join(scratch, "per-request.csv")
    out = subprocess.run([kvsim, "replay", trace, "--model", "llama-3.1-8b", "--allocator", spec,
                          "--cost", "constant:step=1ms,prefill-token=0ps", "--json", "--per-request", per],
                         check=True, capture_output=True, text=True).stdout
    run = json.loads(out)["runs"][0]
    pc = run["prefix_cache"]
    figures = {k: pc[k] for k in ("queried_tokens", "hit_tokens", "queried_blocks", "hit_blocks", "evicted_bytes")}
    figures["evictable_at_end"] = pc["evictable_bytes"]["at_end"]
    with open(per) as f:
        rows = {row["id"]: int(row["cached_prompt_tokens"]) for row in csv.DictReader(f)}
    return figures, rows


def main():
    args = sys.argv[1:]
    kvsim = args[args.index("--kvsim") + 1]
    scratch = args[-1]
    cases = [
        ("token ids", os.path.join(scratch, "tokens.jsonl"), token_trace, (1, 400)),
        ("native, H=16", os.path.join(scratch, "native16.csv"), native_trace, (2, 400, 16)),
        ("native, H=48", os.path.join(scratch, "native48.csv"), native_trace, (3, 400, 48)),
        ("native, H=7", os.path.join(scratch, "native7.csv"), native_trace, (4, 400, 7)),
        ("native, H=4, content hashes", os.path.join(scratch, "content4.csv"), native_trace, (6, 400, 4, False)),
        ("mooncake, H=512", os.path.join(scratch, "mooncake.jsonl"), mooncake_trace, (5, 300)),
    ]
    if "--cases" in args:  # how many there are, for a caller that runs them apart
        print(len(cases))
        return 0
    if "--case" in args:  # only case K (0-based): the cases are independent
        cases = [cases[int(args[args.index("--case") + 1])]]
    blocks = (1, 16, 32)
    if "--block" in args:  # only block size B
        blocks = (int(args[args.index("--block") + 1]),)
    failed = 0
    for name, path, make, params in cases:
        reqs = make(path, *params)
        for B in blocks:
            for radix in (False, True):
                mine, mine_rows = model(reqs, B, radix)
                theirs, their_rows = run(kvsim, path, B, scratch, radix)
                diffs = [f"{k}: model {mine[k]}, kvsim {theirs[k]}" for k in mine if mine[k] != theirs[k]]
                diffs += [f"request {rid}: model {mine_rows[rid]} cached tokens, kvsim {their_rows.get(rid)}"
                          for rid in mine_rows if mine_rows[rid] != their_rows.get(rid)][:5]
                status = "ok" if not diffs else "DIFFERS"
                what = f"radix, page {B}" if radix else f"block {B}"
                print(f"prefix xcheck {name}, {what}: {status} (hits {mine['hit_tokens']} of "
                      f"{mine['queried_tokens']} tokens, {mine['evictable_at_end']} bytes cached at the end)")
                for d in diffs:
                    print("   ", d)
                failed |= bool(diffs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
