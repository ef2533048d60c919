#!/usr/bin/env python3
"""A seeded random trace for replay_model.py:
gen_trace.py SEED N OUT [mean_gap_ms] [--prompt-max P] [--output-max M]

Arrivals at identical instants, on the millisecond grid and after long idle gaps; prompts of
1..P tokens (default 3000), outputs of 1..M (default 500); some max_tokens, some at or past
the model's length; about 5% cancellations at arrival, on the grid and mid-step."""
import random, sys
args = sys.argv[1:]
opts = {"--prompt-max": 3000, "--output-max": 500}
for k in opts:
    if k in args:
        i = args.index(k)
        opts[k] = int(args[i + 1])
        del args[i:i + 2]
seed, n, out = int(args[0]), int(args[1]), args[2]
gap = float(args[3]) if len(args) > 3 else 40.0
rng = random.Random(seed)
t = rng.randrange(0, 10**9)  # ns
rows = []
for i in range(n):
    u = rng.random()
    if i and u < 0.08:
        pass  # same instant as the previous arrival
    elif u < 0.12:
        t += rng.randrange(1, 4) * 1_000_000  # on the previous arrival's ms grid
    elif u < 0.15:
        t += rng.randrange(2_000, 5_000) * 1_000_000  # long idle gap
    else:
        t += int(rng.expovariate(1.0 / (gap * 1e6)))
    P = rng.randint(1, opts["--prompt-max"])
    m = rng.randint(1, opts["--output-max"])
    mt = ""
    r = rng.random()
    if r < 0.4:
        mt = str(rng.randint(m, m + 1000))
    elif r < 0.45:
        mt = str(m)
    elif r < 0.47:
        mt = str(rng.choice([131072, 131072 - P, 200000]))
    ca = ""
    if rng.random() < 0.05:
        k = rng.random()
        if k < 0.15:
            c = t  # at arrival
        elif k < 0.45:
            c = t + rng.randrange(0, m + 2) * 1_000_000  # on the arrival's ms grid
        else:
            c = t + rng.randrange(0, (m + 3) * 1_000_000)
        ca = f"{c // 10**9}.{c % 10**9:09d}"
    rows.append(f"q{i},{t // 10**9}.{t % 10**9:09d},{P},{m},{mt},{ca}")
with open(out, "w") as f:
    f.write("id,arrival,prompt_tokens,output_tokens,max_tokens,cancel_at\n")
    f.write("\n".join(rows) + "\n")
