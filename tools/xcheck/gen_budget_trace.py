#!/usr/bin/env python3
"""A seeded random trace for budget_model.py: gen_budget_trace.py SEED N OUT [--prompt-max P]
[--output-max M] [--gap MS] [--cancel FRACTION] [--prefix FRACTION]

Arrivals in bursts (several at one instant, on the millisecond grid, mid-step) with idle gaps;
prompts of 1..P tokens (default 600), outputs of 1..M (default 400), some on block edges.
--prefix F (for --prefix-caching): adds prefix identity (prefix_block_tokens 16, one hash per
full prompt block): a fraction F of the prompts start with one of 4 system prompts (16 to 320
tokens, a prompt shorter than its system prompt is a prefix of it), a tenth of them repeat an
earlier prompt exactly (its length too: the last-token rule) or extend it (a next turn), the
rest share nothing. Drawn from a second generator, so the rest of the trace is the one the
same seed gives without --prefix."""
import random, sys
args = sys.argv[1:]
opts = {"--prompt-max": 600, "--output-max": 400, "--gap": 8.0, "--cancel": 0.0, "--prefix": -1.0}
for k in list(opts):
    if k in args:
        i = args.index(k)
        opts[k] = type(opts[k])(args[i + 1])
        del args[i:i + 2]
seed, n, out = int(args[0]), int(args[1]), args[2]
rng = random.Random(seed)
t = rng.randrange(0, 10**9)
rows = []
prng = random.Random(seed * 7919 + 1)
systems = [prng.choice([16, 32, 47, 48, 100, 200, 320]) for _ in range(4)]
ids = {}
prompts = []  # per request: (P, block keys)
def hid(key):
    return ids.setdefault(key, len(ids) + 1)
for i in range(n):
    u = rng.random()
    if i and u < 0.25:
        pass  # a burst: same instant
    elif u < 0.35:
        t += rng.randrange(1, 4) * 1_000_000  # on the ms grid
    elif u < 0.38:
        t += rng.randrange(200, 2000) * 1_000_000  # idle gap
    else:
        t += int(rng.expovariate(1.0 / (opts["--gap"] * 1e6)))
    def length(mx):
        v = rng.random()
        if v < 0.15:
            return max(1, min(mx, 16 * rng.randint(1, mx // 16 or 1) + rng.choice([-1, 0, 0, 1])))
        if v < 0.3:
            return rng.randint(1, min(mx, 20))
        return rng.randint(1, mx)
    P = length(opts["--prompt-max"])
    m = length(opts["--output-max"])
    ca = ""
    if rng.random() < opts["--cancel"]:
        k = rng.random()
        if k < 0.15:
            c = t
        elif k < 0.45:
            c = t + rng.randrange(0, 3 * (P + m) + 2) * 1_000_000
        else:
            c = t + rng.randrange(0, (3 * (P + m) + 3) * 1_000_000)
        ca = f"{c // 10**9}.{c % 10**9:09d}"
    pre = ""
    if opts["--prefix"] >= 0:
        v = prng.random()
        if v < opts["--prefix"] * 0.1 and prompts:  # an earlier prompt again, or its next turn
            P0, keys0 = prng.choice(prompts)
            if prng.random() < 0.5:
                P, keys = P0, list(keys0)
            else:
                P = min(opts["--prompt-max"], P0 + prng.randint(1, 200))
                keys = list(keys0[:P0 // 16]) + [("u", i, k) for k in range(P0 // 16, P // 16)]
        elif v < opts["--prefix"]:
            s = prng.randrange(4)
            keys = [("s", s, k) if (k + 1) * 16 <= systems[s] else ("u", i, k) for k in range(P // 16)]
        else:
            keys = [("u", i, k) for k in range(P // 16)]
        prompts.append((P, keys))
        pre = ",16," + " ".join(str(hid(k)) for k in keys)
    rows.append(f"q{i},{t // 10**9}.{t % 10**9:09d},{P},{m},{ca}{pre}")
with open(out, "w") as f:
    f.write("id,arrival,prompt_tokens,output_tokens,cancel_at" +
            (",prefix_block_tokens,prefix_hashes" if opts["--prefix"] >= 0 else "") + "\n")
    f.write("\n".join(rows) + "\n")
