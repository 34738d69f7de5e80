#!/usr/bin/env python3
# Two decode steps' launch lists side by side (LABEL-launches.txt files of ncu-step-summary.py, e.g. two arms
# of one call, or one arm of two builds on the same card): per kernel name, launches and device time in each
# and the difference, largest change first; then the step totals. Usage: ncu-step-diff.py A.txt B.txt
import collections, sys


def load(path):
    agg = collections.defaultdict(lambda: [0, 0.0])
    for line in open(path):
        f = line.split()
        if len(f) < 7 or f[3] != "us" or f[4] != "grid":
            continue
        # index, running total, us, "us", "grid", grid size, name [template]
        name = " ".join(f[6:]).split(" <")[0] if f[6] != "rownorm::" else "rownorm:: " + " ".join(f[7:])
        agg[name][0] += 1
        agg[name][1] += float(f[2])
    return agg


a, b = load(sys.argv[1]), load(sys.argv[2])
names = sorted(set(a) | set(b), key=lambda n: -abs(b.get(n, [0, 0.0])[1] - a.get(n, [0, 0.0])[1]))
print(f"A = {sys.argv[1]}\nB = {sys.argv[2]}")
print(f"{'kernel':58s} {'A n':>4s} {'A us':>9s} {'B n':>4s} {'B us':>9s} {'B - A':>9s}")
for n in names:
    (ca, ua), (cb, ub) = a.get(n, [0, 0.0]), b.get(n, [0, 0.0])
    print(f"{n[:58]:58s} {ca:4d} {ua:9.1f} {cb:4d} {ub:9.1f} {ub - ua:+9.1f}")
ta, tb = sum(v[1] for v in a.values()), sum(v[1] for v in b.values())
na, nb = sum(v[0] for v in a.values()), sum(v[0] for v in b.values())
print(f"{'step':58s} {na:4d} {ta:9.1f} {nb:4d} {tb:9.1f} {tb - ta:+9.1f}")
