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
Also writes synthetic-cached/ and workloads/synthetic-cached.jsonl: the same rule, with the
requests arriving 0.3 s apart and sharing their first 96 prompt tokens (6 blocks of 16), so
vLLM's prefix cache serves each request after the first 96 tokens, which no step computes.
The timeseries credits them all the same, as vLLM's prompt throughput does (a whole prompt
at its first token): the prompt column is the computed tokens P of the rule plus 96 for
every request but the first whose first token falls in the tick.
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

def ticks(dp=1, together=False):
    """Each tick's number, computed prompt tokens P, decoded tokens G and first tokens."""
    for t in range(1, 14):
        t0, t1 = MONO0 + t - 1, MONO0 + t
        d = decoding_mean(t0, t1)
        p = 1000.0 * (t % 3) + 300.0 * (t % 2)
        p_e = p if together or dp == 1 else p / dp
        g = (1.0 - p_e * PREFILL) / (BASE / d + DECODE / dp) if d > 0 else 0.0
        firsts = [i for i, r in enumerate(reqs) if t0 < r["first_token_ts"] <= t1]
        yield t, p, g, firsts

def write_run(name, dp, together):
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    os.makedirs(here, exist_ok=True)
    rows = [f"{t}.0,{p!r},{g + len(firsts)!r},10,0,0.0" for t, p, g, firsts in ticks(dp, together)]
    model = "Qwen/Qwen3-30B-A3B-Instruct-2507" if dp > 1 else "meta-llama/Llama-3.1-8B"
    write_files(here, model, dp, {"dataset_path": "workloads/none.jsonl"}, reqs, rows)

def write_files(here, model, dp, meta_extra, requests, rows):
    """meta.json, requests.jsonl and timeseries.csv of a run in `here`."""
    meta = {"model": model, "vllm_version": "0.19.0",
            "engine_kwargs": {"tensor_parallel_size": 1, "data_parallel_size": dp, "max_num_seqs": 128,
                              "max_num_batched_tokens": 2048, "max_model_len": None}}
    meta.update(meta_extra)
    meta.update({"started_at": "2026-01-01T00:00:00Z", "tick_seconds": 1.0})
    with open(os.path.join(here, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
    with open(os.path.join(here, "requests.jsonl"), "w") as f:
        for r in requests:
            f.write(json.dumps(r) + "\n")
    with open(os.path.join(here, "timeseries.csv"), "w") as f:
        f.write("t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n")
        f.write("\n".join(rows) + "\n")


def write_cached_run():
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "synthetic-cached")
    os.makedirs(here, exist_ok=True)
    shared = 96
    timed = [dict(r, arrival_time=WALL0 + 0.3 * i, queued_ts=MONO0 + 0.3 * i, scheduled_ts=MONO0 + 0.3 * i)
             for i, r in enumerate(reqs)]
    rows = []
    for t, p, g, firsts in ticks():
        credited = p + shared * sum(1 for i in firsts if i > 0)
        rows.append(f"{t}.0,{credited!r},{g + len(firsts)!r},10,0,0.0")
    write_files(here, "meta-llama/Llama-3.1-8B", 1,
                {"kv_cache": {"num_gpu_blocks": 1000, "block_size": 16},
                 "dataset_path": "workloads/synthetic-cached.jsonl"}, timed, rows)
    workloads = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workloads")
    os.makedirs(workloads, exist_ok=True)
    with open(os.path.join(workloads, "synthetic-cached.jsonl"), "w") as f:
        for i, r in enumerate(reqs):
            ids = list(range(1, shared + 1)) + [1000 * (i + 1) + j for j in range(r["input_toks"] - shared)]
            f.write(json.dumps({"input_toks": r["input_toks"], "output_toks": r["output_toks"],
                                "arrival_time_ns": 300_000_000 * i, "input_tok_ids": ids}) + "\n")


write_run("synthetic", 1, False)
write_run("synthetic-dp2-independent", 2, False)
write_run("synthetic-dp2-together", 2, True)
write_cached_run()
