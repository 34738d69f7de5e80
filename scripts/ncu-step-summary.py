#!/usr/bin/env python3
# Summary of `ncu --metrics gpu__time_duration.sum --csv --page raw` over `ferry run`: device time per forward
# pass (an embed_kernel starts one) and, for the last pass, per kernel. Usage: ncu-step-summary.py CSV LABEL
import csv, sys, collections, re
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
h = next(i for i, r in enumerate(rows) if "Kernel Name" in r and "gpu__time_duration.sum" in r)
kn, dt = rows[h].index("Kernel Name"), rows[h].index("gpu__time_duration.sum")
def short(n):
    n = re.sub(r"^void ", "", n).replace("unnamed>::", "").replace("ferry::cuda::", "")
    return n.split("(")[0].split("<")[0]
ks = []
for r in rows[h + 1:]:
    if len(r) > dt:
        try: ks.append((short(r[kn]), float(r[dt].replace(",", "")) / 1e3))  # ns -> us
        except ValueError: pass
passes, cur = [], None
for name, us in ks:
    if name == "embed_kernel":
        cur = []; passes.append(cur)
    if cur is not None: cur.append((name, us))
print(f"{sys.argv[2]}: {len(ks)} kernels, {len(passes)} passes (embed_kernel starts one)")
for i, p in enumerate(passes):
    print(f"  pass {i}: {len(p)} kernels, device time {sum(u for _, u in p):8.1f} us")
last = passes[-1] if passes else []
agg = collections.defaultdict(lambda: [0, 0.0])
for name, us in last:
    agg[name][0] += 1; agg[name][1] += us
tot = sum(v[1] for v in agg.values())
print(f"  last decode step by kernel ({tot:.1f} us):")
for k, (c, us) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f"    {k:40s} {c:4d} {us:8.1f} us {100 * us / tot:5.1f} %  {us / c:6.1f} us/launch")
