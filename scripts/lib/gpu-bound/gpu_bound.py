"""Upper bounds and an offline placement for the GPU-fragmentation experiment.

Run through scripts/gpu-bound (which installs SciPy for the LP solver);
docs/benchmarks.md, "How much any policy could allocate", says what the
figures mean. For each `paceline sim run ... --tasks --json REPORT` given, it
takes the tasks that arrived (placed or withdrawn: the multiset the policy
was offered, in any order) and the trace's hosts, and prints:

- `devices`: the most GPU any placement could allocate when only the
  devices count: every share on one device (the shares on a device sum to
  at most 1,000 milli-GPU), whole GPUs on wholly free devices. An LP over
  the maximal sets of shares one device can hold (its optimum bounds the
  integer problem from above).
- `node-types`: the same per node type, with each type's CPU and memory
  summed over its nodes as one budget, each pod only on a type one of whose
  nodes could hold it alone. Still a relaxation of the real problem (every
  placement gives a solution of this LP), so still an upper bound.
- `offline`: what one offline placement achieves on the same multiset, the
  whole future known: the shares packed into devices first (largest first,
  best fit), then the device loads (multi-GPU pods first) placed in one of
  two orders, by GPU or by CPU per device (the better of the two is
  printed), each on the host whose CPU beyond what its free devices will
  need it leaves least; CPU-only pods never (they allocate no GPU), and
  what finds no room is left out. Achievable, not optimal.

Both bounds let a placement leave any pod out, as the offline placement
does; the policies in `paceline sim` place every pod that fits when it
arrives.
- `policy`: what the report's policy allocated.
- `most at 96%`: the most pods asking for one share size (`--share`, 810
  milli-GPU by default: on openb the share no other fills well) that any
  placement allocating at least 96% (`--at`) could hold, from the
  node-type LP; beside it how many arrived and how many the policy placed.

Every figure is GPU allocated as a share of the cluster's GPU capacity.
"""

import collections
import json
import sys

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import lil_matrix

DEVICE = 1000


def hosts_of(trace):
    """(cpu, memory, devices) per host of the trace, in order."""
    out = []
    with open(trace) as f:
        for line in f:
            if '"event":"host"' not in line and '"event": "host"' not in line:
                continue
            h = json.loads(line)
            r = h["resources"]
            out.append((r["cpu_millis"], r["memory_mib"], r.get("gpu_milli", 0) // DEVICE))
    return out


def tasks_of(report):
    """(gpu milli, cpu, memory, placed) per task the report's run offered."""
    with open(report) as f:
        d = json.load(f)
    tasks = d.get("tasks")
    if not tasks:
        sys.exit(f"{report}: no tasks (run `paceline sim run` with --tasks)")
    return [
        (t["demand"]["gpu_milli"], t["demand"]["cpu_millis"], t["demand"]["memory_mib"], t["outcome"] == "running")
        for t in tasks
    ]


def maximal_patterns(sizes):
    """Every multiset of share sizes summing to at most one device to which
    no size can be added (sizes descending)."""
    sizes = sorted(set(sizes), reverse=True)
    smallest = sizes[-1]
    out = []

    def walk(i, left, counts):
        if i == len(sizes):
            # Maximal: what is left takes no size.
            if left < smallest:
                out.append(dict(counts))
            return
        s = sizes[i]
        for n in range(left // s, -1, -1):
            if n:
                counts[s] = n
            else:
                counts.pop(s, None)
            walk(i + 1, left - n * s, counts)
        counts.pop(s, None)

    walk(0, DEVICE, {})
    return out


def bound(hosts, tasks, with_cpu, share=None, at_least=None):
    """The LP bound (milli-GPU): per node type (with_cpu) or the whole
    cluster as one type of devices (not with_cpu). With `share` and
    `at_least` (milli-GPU): instead, the most pods asking for that share
    any placement allocating at least `at_least` could hold."""
    gpu_tasks = [t for t in tasks if t[0] > 0]
    if with_cpu:
        types = collections.Counter(h for h in hosts if h[2] > 0)
    else:
        types = collections.Counter({(0, 0, max(h[2] for h in hosts)): sum(h[2] for h in hosts) / max(h[2] for h in hosts)})
    types = sorted(types.items())
    kinds = collections.Counter((g, c, m) if with_cpu else (g, 0, 0) for g, c, m, _ in gpu_tasks)
    kinds = sorted(kinds.items())
    share_sizes = sorted({g for (g, _, _), _ in kinds if g < DEVICE})
    patterns = maximal_patterns(share_sizes) if share_sizes else []
    # Variables: per type, x[pattern] then y[kind that fits the type].
    cols = []  # (type index, "x", pattern index) or (type index, "y", kind index)
    for ti, ((cpu, mem, dev), n) in enumerate(types):
        for pi in range(len(patterns)):
            cols.append((ti, "x", pi))
        for ki, ((g, c, m), _) in enumerate(kinds):
            fits_gpu = g < DEVICE or (g % DEVICE == 0 and g // DEVICE <= dev)
            if fits_gpu and (not with_cpu or (c <= cpu and m <= mem)):
                cols.append((ti, "y", ki))
    col_of = {c: i for i, c in enumerate(cols)}
    rows = []  # (coefficients {col: a}, upper bound)
    for ki, ((g, c, m), n) in enumerate(kinds):
        rows.append(({col_of[(ti, "y", ki)]: 1 for ti in range(len(types)) if (ti, "y", ki) in col_of}, n))
    for ti, ((cpu, mem, dev), n) in enumerate(types):
        devices = {col_of[(ti, "x", pi)]: 1 for pi in range(len(patterns))}
        for ki, ((g, c, m), _) in enumerate(kinds):
            if g >= DEVICE and (ti, "y", ki) in col_of:
                devices[col_of[(ti, "y", ki)]] = g // DEVICE
        rows.append((devices, dev * n))
        for s in share_sizes:
            r = {col_of[(ti, "y", ki)]: 1 for ki, ((g, _, _), _) in enumerate(kinds) if g == s and (ti, "y", ki) in col_of}
            for pi, p in enumerate(patterns):
                if s in p:
                    r[col_of[(ti, "x", pi)]] = -p[s]
            rows.append((r, 0))
        if with_cpu:
            rows.append(({col_of[(ti, "y", ki)]: c for ki, ((_, c, _), _) in enumerate(kinds) if (ti, "y", ki) in col_of}, cpu * n))
            rows.append(({col_of[(ti, "y", ki)]: m for ki, ((_, _, m), _) in enumerate(kinds) if (ti, "y", ki) in col_of}, mem * n))
    a = lil_matrix((len(rows), len(cols)))
    b = np.zeros(len(rows))
    for i, (r, ub) in enumerate(rows):
        for j, v in r.items():
            a[i, j] = v
        b[i] = ub
    alloc = np.array([-(kinds[k][0][0] if kind == "y" else 0) for (_, kind, k) in cols], dtype=float)
    if share is None:
        res = linprog(alloc, A_ub=a.tocsr(), b_ub=b, bounds=(0, None), method="highs")
    else:
        # Allocated >= at_least: -alloc·x <= -at_least.
        a = a.tocsr()
        from scipy.sparse import vstack

        a = vstack([a, alloc.reshape(1, -1)]).tocsr()
        b = np.append(b, -at_least)
        count = np.array([-(1 if kind == "y" and kinds[k][0][0] == share else 0) for (_, kind, k) in cols], dtype=float)
        res = linprog(count, A_ub=a, b_ub=b, bounds=(0, None), method="highs")
        if res.status == 2:
            return None
    if res.status != 0:
        sys.exit(f"LP failed: {res.message}")
    return -res.fun


def device_loads(tasks):
    """The GPU pods as loads of whole devices: (devices, milli, cpu, memory).
    Multi-GPU and whole-GPU pods are loads as they are; shares are packed
    into devices first, largest first, each into the device it leaves
    least room on (best-fit decreasing), a device's CPU and memory the sum
    of its shares'."""
    loads = []
    shares = []
    for g, c, m, _ in tasks:
        if g >= DEVICE:
            loads.append((g // DEVICE, g, c, m))
        elif g > 0:
            shares.append((g, c, m))
    shares.sort(key=lambda t: (-t[0], -t[1]))
    # Open devices by room left: room -> list of device indices.
    devices = []  # [used milli, cpu, memory]
    by_room = collections.defaultdict(list)
    for g, c, m in shares:
        room = next((r for r in range(g, DEVICE + 1, 10) if by_room.get(r)), None)
        if room is None:
            devices.append([0, 0, 0])
            i = len(devices) - 1
        else:
            i = by_room[room].pop()
        devices[i][0] += g
        devices[i][1] += c
        devices[i][2] += m
        by_room[DEVICE - devices[i][0]].append(i)
    loads.extend((1, u, c, m) for u, c, m in devices)
    return loads


def offline(hosts, tasks, order):
    """Milli-GPU one offline placement allocates: the loads of
    [`device_loads`] in `order`, each on the host whose spare CPU beyond
    what its free devices will need (at the loads' mean CPU per device)
    it leaves least, not below zero where a host allows."""
    loads = device_loads(tasks)
    total_cpu = sum(ld[2] for ld in loads)
    total_dev = sum(ld[0] for ld in loads)
    per_dev = total_cpu / max(1, total_dev)
    if order == "gpu":
        loads.sort(key=lambda ld: (-ld[0], -ld[1], -ld[2]))
    else:  # "cpu": the most CPU per device first
        loads.sort(key=lambda ld: (-ld[0], -ld[2] / ld[0], -ld[1]))
    cpu = np.array([h[0] for h in hosts], dtype=float)
    mem = np.array([h[1] for h in hosts], dtype=float)
    dev = np.array([h[2] for h in hosts], dtype=float)
    placed = 0
    for k, g, c, m in loads:
        ok = (dev >= k) & (cpu >= c) & (mem >= m)
        if not ok.any():
            continue
        surplus = (cpu - c) - (dev - k) * per_dev
        # Non-negative surplus: the least (best fit); else the largest.
        score = np.where(surplus >= 0, surplus, 1e12 - surplus)
        score = np.where(ok, score, np.inf)
        i = int(np.argmin(score))
        cpu[i] -= c
        mem[i] -= m
        dev[i] -= k
        placed += g
    return placed


def main(argv):
    args = argv[1:]
    share, at = 810, 96.0
    while args and args[0].startswith("--"):
        flag, value, args = args[0], args[1], args[2:]
        if flag == "--share":
            share = int(value)
        elif flag == "--at":
            at = float(value)
        else:
            sys.exit(f"unknown option {flag}")
    if len(args) < 2:
        sys.exit(__doc__ + "\nusage: gpu_bound.py [--share MILLI] [--at PCT] TRACE.jsonl REPORT.json [REPORT.json ...]")
    hosts = hosts_of(args[0])
    capacity = sum(h[2] for h in hosts) * DEVICE
    print(
        f"{'report':<26} {'asked':>8} {'policy':>8} {'offline':>8} {'bound: devices':>15} {'bound: node types':>18}"
        f" {f'{share}s arrived':>13} {'placed':>7} {f'most at {at:g}%':>12}"
    )
    for report in args[1:]:
        tasks = tasks_of(report)
        asked = sum(t[0] for t in tasks)
        got = sum(t[0] for t in tasks if t[3])
        dev = bound(hosts, tasks, with_cpu=False)
        typ = bound(hosts, tasks, with_cpu=True)
        off = max(offline(hosts, tasks, o) for o in ("gpu", "cpu"))
        most = bound(hosts, tasks, with_cpu=True, share=share, at_least=capacity * at / 100)
        arrived_s = sum(1 for t in tasks if t[0] == share)
        placed_s = sum(1 for t in tasks if t[0] == share and t[3])
        pct = lambda x: f"{100 * x / capacity:.2f}%"
        name = report.rsplit("/", 1)[-1]
        most = "none" if most is None else f"{most:.1f}"
        print(
            f"{name:<26} {pct(asked):>8} {pct(got):>8} {pct(off):>8} {pct(dev):>15} {pct(typ):>18}"
            f" {arrived_s:>13} {placed_s:>7} {most:>12}",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv)
