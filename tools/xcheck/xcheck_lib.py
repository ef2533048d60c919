"""What the independent models in tools/xcheck share: kvsim's time format, the comparison of
a model's figures with kvsim's, and arrivals in bursts for seeded traces. Nothing here models
kvsim; each model keeps its own rules, written from docs/replay.md.
"""
import csv
from decimal import Decimal

STEP_NS = 10**6  # --cost constant:step=1ms


def secs_to_ns(text):
    """A trace's or --per-request's decimal seconds, exactly, in ns."""
    d = Decimal(text) * 1_000_000_000
    assert d == d.to_integral_value(), text
    return int(d)


def fmt(ns):
    """ns as --per-request writes seconds (None for an empty field)."""
    return None if ns is None else f"{ns // 10**9}.{ns % 10**9:09d}"


class Tally:
    """Figures compared, the model's against kvsim's: call it with (key, mine, theirs). Keeps a
    line for each mismatch (for every figure when verbose)."""

    def __init__(self, verbose=False, width=40):
        self.bad = self.total = 0
        self.lines = []
        self.verbose, self.width = verbose, width

    def __call__(self, key, mine, theirs):
        self.total += 1
        ok = mine == theirs
        self.bad += not ok
        if not ok or self.verbose:
            self.lines.append(f"{'ok' if ok else 'MISMATCH':8s} {key:{self.width}s} model={mine!r} kvsim={theirs!r}")


def check_schedule(chk, r, row):
    """One request's schedule against its --per-request row: outcome, first scheduling, first
    token, finish (ns, None when it never came) and preemptions."""
    chk(f"{r.id} outcome", r.outcome, row["outcome"])
    chk(f"{r.id} first_scheduled_s", fmt(r.first_sched), row["first_scheduled_s"] or None)
    chk(f"{r.id} first_token_s", fmt(r.first_tok), row["first_token_s"] or None)
    chk(f"{r.id} finish_s", fmt(r.finish), row["finish_s"] or None)
    chk(f"{r.id} preemptions", r.npre, int(row["preemptions"]))


def burst_arrivals(rng, n, mean_gap_ms, cuts, idle_ms):
    """n arrival times (ns), nondecreasing, from rng. A draw u below cuts[0] puts an arrival at
    the previous one's instant, below cuts[1] inside the same 1 ms step, below cuts[2] after an
    idle gap of idle_ms = (lo, hi) milliseconds off the 1 ms grid, and otherwise after an
    exponential gap of mean mean_gap_ms."""
    t = 0
    out = []
    for _ in range(n):
        out.append(t)
        u = rng.random()
        if u < cuts[0]:
            gap = 0
        elif u < cuts[1]:
            gap = rng.randrange(0, STEP_NS)
        elif u < cuts[2]:
            gap = rng.randrange(*idle_ms) * STEP_NS + rng.randrange(1, STEP_NS)
        else:
            gap = int(rng.expovariate(1.0 / mean_gap_ms) * STEP_NS)
        t += gap
    return out


def read_native(path, make):
    """The requests of a native CSV trace (id, arrival, prompt_tokens, output_tokens, and
    optionally cancel_at): for each row a make() given ordinal (1-based), id, arr (ns), P, m
    and cancel (ns or None), paired with its row for the model's own columns."""
    out = []
    with open(path, newline="") as f:
        for i, row in enumerate(csv.DictReader(f)):
            r = make()
            r.ordinal = i + 1
            r.id = row["id"]
            r.arr = secs_to_ns(row["arrival"])
            r.P = int(row["prompt_tokens"])
            r.m = int(row["output_tokens"])
            ca = (row.get("cancel_at") or "").strip()
            r.cancel = secs_to_ns(ca) if ca else None
            out.append((r, row))
    return out


def report_case(label, run):
    """Runs one case, run() -> (summary line, schedule problems, differences), and prints
    `label: ok|DIFFERS|BAD SCHEDULE|FAILED summary` with what went wrong. Returns whether it
    failed."""
    try:
        line, problems, diffs = run()
    except RuntimeError as e:
        print(f"{label}: FAILED ({e})")
        return True
    bad = problems + diffs
    status = "ok" if not bad else "DIFFERS" if diffs else "BAD SCHEDULE"
    print(f"{label}: {status} {line}")
    more = [f"... {len(problems) - 5} more"] if len(problems) > 5 else []
    for d in problems[:5] + more + diffs:
        print("   ", d)
    return bool(bad)
