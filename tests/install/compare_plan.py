"""compare_plan.py [--pipeline] OUT.txt CLI.json — check that a C guide
example (docs/guide-c.md) printed the plan that `dynapipe plan --json` wrote
for the same file and options. plan_lengths.c: the same global batches, and
per micro-batch the same replica, shape, sample ids and predicted time
(printed with 17 significant digits, so compared exactly). plan_pipeline.c
(--pipeline; the JSON from --schedule auto): per global batch the same
schedule, makespan (to the 3 decimals printed) and samples of each
micro-batch in execution order (through replica_plans' map). Exit 1 with
the first difference."""
import json
import re
import sys


def parse(path):
    batches = []
    head = re.compile(r"batch (\d+): (\d+) samples, (\d+) micro-batches, predicted ([0-9.]+) ms$")
    row = re.compile(r"  mb (\d+): replica (\d+), (\d+) x (\d+) tokens, (\S+) ms, samples((?: \d+)*)$")
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            m = head.match(line)
            if m:
                batches.append({"n_samples": int(m[2]), "n_mbs": int(m[3]),
                                "objective": float(m[4]), "mbs": []})
                continue
            m = row.match(line)
            if not m or not batches:
                sys.exit(f"compare_plan: {path}: unexpected line {line!r}")
            batches[-1]["mbs"].append({"replica": int(m[2]), "rows": int(m[3]), "input_len": int(m[4]),
                                       "time_ms": float(m[5]), "samples": [int(x) for x in m[6].split()]})
    return batches


def check_pipeline(out_path, json_path):
    head = re.compile(r"batch (\d+): (\S+), makespan ([0-9.]+) ms$")
    row = re.compile(r"  runs (\d+): samples((?: \d+)*)$")
    printed = []
    with open(out_path) as f:
        for line in f:
            line = line.rstrip("\n")
            m = head.match(line)
            if m:
                printed.append((m[2], float(m[3]), []))
            elif row.match(line) and printed:
                printed[-1][2].append([int(x) for x in row.match(line)[2].split()])
            else:
                sys.exit(f"compare_plan: {out_path}: unexpected line {line!r}")
    with open(json_path) as f:
        cli = json.load(f)["global_batches"]
    if len(printed) != len(cli) or not printed:
        sys.exit(f"compare_plan: {len(printed)} batches printed, {len(cli)} in the JSON")
    for b, ((schedule, makespan, order), c) in enumerate(zip(printed, cli)):
        rp = c["replica_plans"][0]
        want = [c["microbatches"][k]["samples"] for k in rp["microbatches"]]
        if schedule != rp["schedule"] or abs(makespan - rp["makespan_ms"]) > 5e-4 or order != want:
            sys.exit(f"compare_plan: batch {b}: printed {schedule} {makespan} {order}, "
                     f"JSON {rp['schedule']} {rp['makespan_ms']} {want}")
    print(f"compare_plan: {len(printed)} batches' execution orders agree")


def main():
    if sys.argv[1] == "--pipeline":
        check_pipeline(sys.argv[2], sys.argv[3])
        return
    out = parse(sys.argv[1])
    with open(sys.argv[2]) as f:
        cli = json.load(f)["global_batches"]
    if len(out) != len(cli) or not out:
        sys.exit(f"compare_plan: {len(out)} batches printed, {len(cli)} in the JSON")
    for b, (o, c) in enumerate(zip(out, cli)):
        if o["n_samples"] != c["n_samples"] or o["n_mbs"] != len(c["microbatches"]) or \
                len(o["mbs"]) != o["n_mbs"] or abs(o["objective"] - c["objective_ms"]) > 5e-4:
            sys.exit(f"compare_plan: batch {b}: summary differs: {o} vs {c['n_samples']} samples, "
                     f"{len(c['microbatches'])} micro-batches, {c['objective_ms']} ms")
        for m, (om, cm) in enumerate(zip(o["mbs"], c["microbatches"])):
            for key in ("replica", "rows", "input_len", "time_ms", "samples"):
                if om[key] != cm[key]:
                    sys.exit(f"compare_plan: batch {b} mb {m}: {key} {om[key]} vs {cm[key]}")
    print(f"compare_plan: {len(out)} batches, {sum(len(o['mbs']) for o in out)} micro-batches agree")


main()
