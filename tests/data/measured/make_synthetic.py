#!/usr/bin/env python3
"""Writes tests/data/measured/synthetic/: a measured run whose ticks follow kvsim's linear
cost rule exactly, for calibrate's test to recover the coefficients.

The rule (include/kvsim/calibrate.h): a tick busy throughout lasts
    S * base + P * prefill_token + G * decode_seq,   S = G / D,
with D the mean number of requests decoding in the tick (a request decodes from its
first_token_ts to its last_token_ts) and G the tokens decode steps produced. Given the
requests (hence D) and each tick's prompt tokens P, G is solved for:
    G = (tick - P * prefill_token) / (base / D + decode_seq),
and the timeseries' generated tokens are G plus the first tokens of the tick (F: those come
from prefill steps).
Coefficients: base 10 ms, prefill_token 50 us, decode_seq 200 us, context_token 0.

Also writes synthetic-dp2-independent/ and synthetic-dp2-together/: the same requests served
by two data-parallel engines, the fit being per engine. Each engine takes S = G / D steps a
tick and decodes G / 2 of its tokens, and prefills P / 2 of the prompt tokens when the
engines step independently, all P when they step together (a model with experts):
    tick = S * base + P_e * prefill_token + (G / 2) * decode_seq,
    G = (tick - P_e * prefill_token) / (base / D + decode_seq / 2).
Run once by hand; the files are committed.
"""
import json
import os

BASE, PREFILL, DECODE = 0.010, 50e-6, 200e-6
WALL0 = 1767225600.0        # 2026-01-01T00:00:00Z
MONO0 = 1000.0              # vLLM's monotonic clock at the run's start

reqs = []
for i in range(10):
    reqs.append({"request_id": f"syn-{i}", "input_toks": 100 + 10 * i, "output_toks": 50 + i,
                 "arrival_time": WALL0, "queued_ts": MONO0, "scheduled_ts": MONO0,
                 "first_token_ts": MONO0 + 0.5 + 0.3 * i, "last_token_ts": MONO0 + 8 + 0.5 * i})

def decoding_mean(t0, t1):
    return sum(max(0.0, min(t1, r["last_token_ts"]) - max(t0, r["first_token_ts"])) for r in reqs) / (t1 - t0)

def write_run(name, dp, together):
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    os.makedirs(here, exist_ok=True)
    rows = []
    for t in range(1, 14):
        t0, t1 = MONO0 + t - 1, MONO0 + t
        d = decoding_mean(t0, t1)
        p = 1000.0 * (t % 3) + 300.0 * (t % 2)
        p_e = p if together or dp == 1 else p / dp
        g = (1.0 - p_e * PREFILL) / (BASE / d + DECODE / dp) if d > 0 else 0.0
        f = sum(1 for r in reqs if t0 < r["first_token_ts"] <= t1)
        rows.append(f"{t}.0,{p!r},{g + f!r},10,0,0.0")
    model = "Qwen/Qwen3-30B-A3B-Instruct-2507" if dp > 1 else "meta-llama/Llama-3.1-8B"
    with open(os.path.join(here, "meta.json"), "w") as f:
        json.dump({"model": model, "vllm_version": "0.19.0",
                   "engine_kwargs": {"tensor_parallel_size": 1, "data_parallel_size": dp, "max_num_seqs": 128,
                                     "max_num_batched_tokens": 2048, "max_model_len": None},
                   "dataset_path": "workloads/none.jsonl", "started_at": "2026-01-01T00:00:00Z",
                   "tick_seconds": 1.0}, f, indent=2)
    with open(os.path.join(here, "requests.jsonl"), "w") as f:
        for r in reqs:
            f.write(json.dumps(r) + "\n")
    with open(os.path.join(here, "timeseries.csv"), "w") as f:
        f.write("t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n")
        f.write("\n".join(rows) + "\n")


write_run("synthetic", 1, False)
write_run("synthetic-dp2-independent", 2, False)
write_run("synthetic-dp2-together", 2, True)
