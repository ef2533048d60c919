#!/usr/bin/env python3
"""A seeded random trace for replay_model.py: gen_trace.py SEED N OUT [mean_gap_ms]

Arrivals at identical instants, on the millisecond grid and after long idle gaps; some
max_tokens, some at or past the model's length; about 5% cancellations at arrival, on the
grid and mid-step."""
import random, sys
seed, n, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
gap = float(sys.argv[4]) if len(sys.argv) > 4 else 40.0
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
    P = rng.randint(1, 3000)
    m = rng.randint(1, 500)
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
