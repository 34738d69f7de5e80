#!/usr/bin/env python3
# Summary of `ncu --metrics gpu__time_duration.sum[,launch__grid_size] --csv --page raw` over `ferry run`:
# device time per forward pass (an embed_kernel starts one) and, for the last pass, per kernel; with the
# grid size metric also the last pass's launches in order (LABEL-launches.txt beside the CSV) and its 30
# longest launches. Usage: ncu-step-summary.py CSV LABEL
import csv, sys, collections, re, os
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
h = next(i for i, r in enumerate(rows) if "Kernel Name" in r and "gpu__time_duration.sum" in r)
kn, dt = rows[h].index("Kernel Name"), rows[h].index("gpu__time_duration.sum")
gs = rows[h].index("launch__grid_size") if "launch__grid_size" in rows[h] else None
def short(n):
    n = re.sub(r"^void ", "", n).replace("unnamed>::", "").replace("ferry::cuda::", "")
    return n.split("(")[0].split("<")[0]
def tmpl(n):  # the template arguments, if any: tells the instantiations of one kernel apart
    n = re.sub(r"^void ", "", n).split("(")[0]
    return n[n.index("<"):] if "<" in n else ""
ks = []
for r in rows[h + 1:]:
    if len(r) > dt:
        try:
            grid = r[gs].replace(",", "") if gs is not None and len(r) > gs else ""
            ks.append((short(r[kn]), float(r[dt].replace(",", "")) / 1e3, grid, tmpl(r[kn])))  # ns -> us
        except ValueError: pass
passes, cur = [], None
for k in ks:
    if k[0] == "embed_kernel":
        cur = []; passes.append(cur)
    if cur is not None: cur.append(k)
print(f"{sys.argv[2]}: {len(ks)} kernels, {len(passes)} passes (embed_kernel starts one)")
for i, p in enumerate(passes):
    print(f"  pass {i}: {len(p)} kernels, device time {sum(k[1] for k in p):8.1f} us")
last = passes[-1] if passes else []
agg = collections.defaultdict(lambda: [0, 0.0])
for name, us, _, _ in last:
    agg[name][0] += 1; agg[name][1] += us
tot = sum(v[1] for v in agg.values())
print(f"  last decode step by kernel ({tot:.1f} us):")
for k, (c, us) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f"    {k:40s} {c:4d} {us:8.1f} us {100 * us / tot:5.1f} %  {us / c:6.1f} us/launch")
if gs is not None and last:
    out = os.path.join(os.path.dirname(sys.argv[1]), f"{sys.argv[2]}-launches.txt")
    with open(out, "w") as f:
        t = 0.0
        for i, (name, us, grid, tp) in enumerate(last):
            t += us
            f.write(f"{i:4d} {t:8.1f} {us:7.2f} us grid {grid:>6s} {name} {tp}\n")
    print(f"  last decode step, 30 longest launches (all in order: {out}):")
    for i, (name, us, grid, tp) in sorted(enumerate(last), key=lambda kv: -kv[1][1])[:30]:
        print(f"    #{i:3d} {us:7.2f} us grid {grid:>6s} {name} {tp[:60]}")
