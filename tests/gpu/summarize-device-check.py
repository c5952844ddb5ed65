#!/usr/bin/env python3
"""Summarises a tests/gpu/device-check.sh run: reads the work directory (steps.jsonl, gtest_*.json,
bench_gpu_kernels.json, perf_*.json, notes.txt, facts.txt, the step logs) and writes device-check.json and
summary.txt there. Standard library only (the device machine has python3 and nothing we install).

    summarize-device-check.py WORK_DIR ELAPSED_S FAILED_STEPS

Every section runs on its own: an exception in one is reported in its place and the others still appear.

Targets of issue #7, each a ratio of two measurements of this run:
  - reduce kernel (sum, f32 and bf16) >= 80% of the device-to-device copy, compared as memory traffic per second
    (copy moves 2 bytes per buffer byte, the reduce 3), at the largest size both were measured at (256 MiB);
  - native path overhead <= 2%: the nccl backend's native all-reduce against a bare ncclAllReduce loop, same
    count and iterations, alternated (bench nccl_overhead_1gpu): the median over back-to-back pairs of their
    per-call times, at every size measured;
  - with two or more GPUs: our ring schedule's busbw >= 90% of NCCL's ring (NCCL_ALGO=Ring) at >= 64 MiB.
"""
import glob
import json
import os
import re
import sys
import traceback

REDUCE_VS_COPY_MIN = 0.80
NATIVE_OVERHEAD_MAX_PCT = 2.0
RING_VS_NCCL_MIN = 0.90
LARGE_BYTES = 64 << 20


def load_json(path):
    with open(path) as f:
        return json.load(f)


def read_lines(path):
    try:
        with open(path, errors="replace") as f:
            return [line.rstrip("\n") for line in f]
    except OSError:
        return []


def verdict(ok):
    return "PASS" if ok else "FAIL"


def human_bytes(n):
    n = int(n)
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


class Summary:
    def __init__(self, work, elapsed, failures):
        self.work = work
        self.elapsed = elapsed
        self.failures = failures
        self.lines = []
        self.doc = {"format": "collbench-device-check", "version": 2, "elapsed_s": elapsed,
                    "failed_steps": failures}
        self.steps = []
        self.bench = {}

    def path(self, name):
        return os.path.join(self.work, name)

    # ---- sections ----

    def header(self):
        self.steps = [json.loads(line) for line in read_lines(self.path("steps.jsonl")) if line.strip()]
        self.doc["steps"] = self.steps
        state = "every step ok" if self.failures == 0 else f"{self.failures} step(s) not ok"
        self.lines.append(f"collbench device check: {len(self.steps)} steps, {state}, {self.elapsed} s")
        facts = dict(line.split(" ", 1) for line in read_lines(self.path("facts.txt")) if " " in line)
        self.doc["facts"] = facts
        for key in ("nccl_lib_dir", "binaries"):
            if key in facts:
                self.lines.append(f"  {key}: {facts[key]}")
        notes = [n for n in read_lines(self.path("notes.txt")) if n.strip()]
        self.doc["notes"] = notes
        for n in notes:
            self.lines.append(f"  NOTE: {n}")

    def machine(self):
        try:
            b = load_json(self.path("bench_gpu_kernels.json"))
        except (OSError, ValueError):
            b = None
        if b is not None:
            self.bench = b
            ctx = b.get("context", {})
            keys = [k for k in ctx if k.startswith("gpu") or k in ("nccl_version", "cuda_runtime", "cuda_driver",
                                                                    "NCCL_ALGO", "NCCL_PROTO")]
            self.doc["machine"] = {k: ctx[k] for k in keys}
            self.doc["machine"]["host"] = ctx.get("host_name")
            self.doc["machine"]["cpus"] = ctx.get("num_cpus")
            parts = [f"{k} {ctx[k]}" for k in keys]
            self.lines.append("  machine: " + "; ".join(parts) if parts else "  machine: (bench context empty)")
        smi = read_lines(self.path("environment.log"))
        for i, line in enumerate(smi):
            if line.startswith("name, compute_cap"):
                # One row per GPU, up to the next "## " section of environment.log.
                for row in smi[i + 1:i + 9]:
                    if row.startswith("#"):
                        break
                    if row:
                        self.lines.append(f"  nvidia-smi: {row}")
                break

    def bench_rows(self):
        rows = {}
        for r in self.bench.get("benchmarks", []):
            parts = [p for p in r.get("name", "").split("/") if not p.startswith("iterations:") and p != "manual_time"]
            rows["/".join(parts)] = r
        return rows

    def targets(self):
        self.lines.append("targets (ratios of two measurements in this run):")
        self.doc["targets"] = []
        for part in (self.target_reduce, self.target_overhead, self.target_ring):
            try:
                part(self.doc["targets"])
            except Exception as e:  # a broken input costs its own target only
                self.lines.append(f"  [{part.__name__} failed: {type(e).__name__}: {e}]")
        counts = {}
        for t in self.doc["targets"]:
            counts[t["status"]] = counts.get(t["status"], 0) + 1
        self.lines.append("  verdicts: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()) if k != "info"))

    def target_reduce(self, results):
        rows = self.bench_rows()
        if not rows:
            self.lines.append("  no bench results (see step bench_kernels)")
        copies = {int(k.split("/")[-1]): r for k, r in rows.items() if k.startswith("device_copy/")}
        for dtype in ("float", "bfloat16"):
            sizes = sorted(s for s in copies
                           if f"reduce_kernel/{dtype}/sum/{s}" in rows and not rows[f"reduce_kernel/{dtype}/sum/{s}"]
                           .get("error_occurred") and not copies[s].get("error_occurred"))
            if not sizes:
                self.lines.append(f"  reduce kernel {dtype} sum vs copy: not measured")
                results.append({"target": f"reduce_vs_copy_{dtype}", "status": "not measured"})
                continue
            for s in sizes:
                red = rows[f"reduce_kernel/{dtype}/sum/{s}"].get("traffic_GBps", 0)
                cp = copies[s].get("traffic_GBps", 0)
                ratio = red / cp if cp else 0.0
                decisive = s == sizes[-1]
                status = verdict(ratio >= REDUCE_VS_COPY_MIN) if decisive else "info"
                results.append({"target": f"reduce_vs_copy_{dtype}", "bytes": s, "ratio": ratio,
                                "reduce_traffic_GBps": red, "copy_traffic_GBps": cp, "status": status})
                self.lines.append(f"  reduce kernel {dtype:<8} sum / D2D copy, {human_bytes(s):>7}: {ratio:5.2f} "
                                  f"(traffic {red:7.0f} vs {cp:7.0f} GB/s)  {status}"
                                  f"{f' (>= {REDUCE_VS_COPY_MIN:.2f})' if decisive else ''}")
    def target_overhead(self, results):
        rows = self.bench_rows()
        overhead = {int(k.split("/")[-1]): r for k, r in rows.items() if k.startswith("nccl_overhead_1gpu/all_reduce/")}
        if not overhead:
            self.lines.append("  native path vs bare ncclAllReduce: not measured")
            results.append({"target": "native_overhead", "status": "not measured"})
        for s in sorted(overhead):
            r = overhead[s]
            if r.get("error_occurred"):
                self.lines.append(f"  native path vs bare ncclAllReduce, {human_bytes(s)}: error "
                                  f"{r.get('error_message', '')[:120]}")
                results.append({"target": "native_overhead", "bytes": s, "status": "error"})
                continue
            pct = r.get("overhead_pct", 0.0)
            fastest = r.get("overhead_fastest_pct")
            status = verdict(pct <= NATIVE_OVERHEAD_MAX_PCT)
            results.append({"target": "native_overhead", "bytes": s, "overhead_pct": pct,
                            "overhead_fastest_pct": fastest, "native_us": r.get("native_us"),
                            "bare_us": r.get("bare_us"), "status": status})
            # Older bundles' overhead_pct is the fastest-time ratio and has no overhead_fastest_pct.
            how = (f"median of back-to-back pairs; fastest native {r.get('native_us', 0):.2f} us, bare "
                   f"{r.get('bare_us', 0):.2f} us per call: {fastest:+.2f}%" if fastest is not None else
                   f"native {r.get('native_us', 0):.2f} us, bare {r.get('bare_us', 0):.2f} us per call")
            self.lines.append(f"  native path vs bare ncclAllReduce, {human_bytes(s):>7}: {pct:+5.2f}% ({how})"
                              f"  {status} (<= {NATIVE_OVERHEAD_MAX_PCT:.0f}%)")
    def target_ring(self, results):
        # The one-GPU steps write perf_nccl_g1_ring_large.json too; the comparison is between GPUs only.
        ring = sorted(p for p in glob.glob(self.path("perf_nccl_g*_ring_large.json"))
                      if "_native_" not in p and int(re.search(r"_g(\d+)_", os.path.basename(p)).group(1)) >= 2)
        if not ring:
            self.lines.append("  ring schedule vs NCCL ring busbw at >= 64 MiB: needs 2+ GPUs, not measured")
            results.append({"target": "ring_vs_nccl_ring", "status": "not measured"})
        for path in ring:
            name = os.path.basename(path)[len("perf_"):-len("_ring_large.json")]
            ours = load_json(path)
            theirs = load_json(self.path(f"perf_{name}_native_ring_large.json"))
            by_size = {r["size"]: r for r in theirs.get("results", [])}
            for r in ours.get("results", []):
                if r["size"] < LARGE_BYTES or r["size"] not in by_size:
                    continue
                a = r["out_of_place"]["busbw_GBps"]
                b = by_size[r["size"]]["out_of_place"]["busbw_GBps"]
                ratio = a / b if b else 0.0
                status = verdict(ratio >= RING_VS_NCCL_MIN)
                results.append({"target": "ring_vs_nccl_ring", "ranks": name, "bytes": r["size"], "ratio": ratio,
                                "status": status})
                self.lines.append(f"  {name} ring schedule / NCCL ring busbw, {human_bytes(r['size']):>7}: {ratio:5.2f}"
                                  f" ({a:.1f} vs {b:.1f} GB/s)  {status} (>= {RING_VS_NCCL_MIN:.2f})")

    def step_table(self):
        self.lines.append("steps:")
        for s in self.steps:
            note = ""
            if s.get("status") != "ok":
                tail = [line.strip() for line in read_lines(self.path(s.get("log", ""))) if line.strip()]
                note = "  " + (tail[-1][:160] if tail else "(empty log)")
            self.lines.append(f"  {s.get('step', '?'):<44} {s.get('status', '?'):<8} {s.get('seconds', 0):>4} s"
                              f"{note}")

    def gtest(self):
        self.lines.append("gpu tests:")
        self.doc["gtest"] = {}
        for s in self.steps:
            name = s.get("step", "")
            if not name.startswith("gtest_"):
                continue
            try:
                g = load_json(self.path(name + ".json"))
            except (OSError, ValueError):
                # Killed before gtest wrote its JSON: the log says which test was running.
                log = read_lines(self.path(s.get("log", "")))
                started = [line for line in log if line.startswith("[ RUN      ]")]
                done = sum(1 for line in log if line.startswith(("[       OK ]", "[  FAILED  ]", "[  SKIPPED ]")))
                last = started[-1][13:] if started else "none"
                self.lines.append(f"  {name}: no JSON ({s.get('status')}); {len(started)} started, {done} finished, "
                                  f"last started: {last}")
                self.doc["gtest"][name] = {"status": s.get("status"), "started": len(started), "finished": done,
                                           "last_started": last}
                continue
            tests = skipped = failed = 0
            failures = []
            for suite in g.get("testsuites", []):
                for t in suite.get("testsuite", []):
                    tests += 1
                    if t.get("failures"):
                        failed += 1
                        failures.append(f"{suite.get('name')}.{t.get('name')}: "
                                        f"{t['failures'][0].get('failure', '').splitlines()[0][:200]}")
                    elif t.get("result") == "SKIPPED":
                        skipped += 1
            passed = tests - failed - skipped
            self.doc["gtest"][name] = {"tests": tests, "passed": passed, "failed": failed, "skipped": skipped,
                                       "time": g.get("time"), "failures": failures}
            self.lines.append(f"  {name}: {passed} passed, {failed} failed, {skipped} skipped ({g.get('time')})")
            for f in failures[:10]:
                self.lines.append(f"    FAILED {f}")
            if len(failures) > 10:
                self.lines.append(f"    ... {len(failures) - 10} more failures in {name}.json")
            if skipped:
                # gtest's JSON has no skip message; its log has it on the line after "...: Skipped".
                log = read_lines(self.path(s.get("log", "")))
                reasons = sorted({log[i + 1].strip() for i, line in enumerate(log[:-1]) if line.endswith(": Skipped")})
                self.doc["gtest"][name]["skip_reasons"] = reasons
                if reasons:
                    self.lines.append(f"    skipped because: {'; '.join(reasons[:2])[:200]}")

    def bandwidth(self):
        rows = self.bench_rows()
        if not rows:
            return
        self.lines.append("device benchmarks (GB/s of buffer; traffic counts every byte moved):")
        errors = {}
        entries = []
        for name, r in rows.items():
            entry = {k: r.get(k) for k in ("real_time", "time_unit", "GBps", "traffic_GBps", "label", "error_message",
                                           "native_us", "bare_us", "overhead_pct", "overhead_fastest_pct")}
            entry["name"] = name
            entries.append(entry)
            if r.get("error_occurred"):
                errors.setdefault(r.get("error_message", "?"), []).append(name)
            else:
                self.lines.append(f"  {name:<44} {r.get('GBps', 0):9.1f} GB/s  traffic {r.get('traffic_GBps', 0):9.1f}"
                                  f" GB/s{('  ' + r['label']) if r.get('label') else ''}")
        for msg, names in errors.items():
            self.lines.append(f"  {len(names)} benchmark(s) failed ({names[0]}, ...): {msg}")
        self.doc["bench"] = entries

    def perf(self):
        self.lines.append("collbench perf (avg busbw GB/s, #wrong, largest size: time us oop / ip):")
        self.doc["perf"] = {}
        for path in sorted(glob.glob(self.path("perf_*.json"))):
            name = os.path.basename(path)[len("perf_"):-len(".json")]
            try:
                self.perf_file(name, load_json(path))
            except Exception as e:  # one broken file costs its own line only
                self.lines.append(f"  {name}: unreadable ({type(e).__name__}: {e})")

    def perf_file(self, name, p):
        rows = [{"size": r["size"], "algorithm": r.get("algorithm"),
                 "oop_busbw": r["out_of_place"]["busbw_GBps"], "ip_busbw": r["in_place"]["busbw_GBps"],
                 "oop_us": r["out_of_place"]["time_us"], "ip_us": r["in_place"]["time_us"],
                 "oop_wrong": r["out_of_place"].get("wrong"), "ip_wrong": r["in_place"].get("wrong")}
                for r in p.get("results", [])]
        self.doc["perf"][name] = {"avg_busbw_GBps": p.get("avg_busbw_GBps"), "wrong_total": p.get("wrong_total"),
                                  "checked": p.get("config", {}).get("check"), "rows": rows}
        last = rows[-1] if rows else None
        tail = (f"  {human_bytes(last['size'])}: {last['oop_us']:.1f} / {last['ip_us']:.1f} us "
                f"[{last['algorithm']}]") if last else ""
        wrong = p.get("wrong_total") if p.get("config", {}).get("check") else "unchecked"
        self.lines.append(f"  {name:<40} {p.get('avg_busbw_GBps', 0):9.2f}  wrong {wrong}{tail}")

    def write(self):
        with open(self.path("device-check.json"), "w") as f:
            json.dump(self.doc, f, indent=2)
        with open(self.path("summary.txt"), "w") as f:
            f.write("\n".join(self.lines) + "\n")


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    s = Summary(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
    errors = []
    for section in (s.header, s.machine, s.targets, s.step_table, s.gtest, s.bandwidth, s.perf):
        try:
            section()
        except Exception as e:  # one broken input must not cost the other sections
            s.lines.append(f"[section {section.__name__} failed: {type(e).__name__}: {e}]")
            errors.append({"section": section.__name__, "error": traceback.format_exc(limit=3)})
    if errors:
        s.doc["summarizer_errors"] = errors
    s.write()
    print("\n".join(s.lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
