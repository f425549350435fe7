"""benchmarks/: the attention benchmark runs end to end (a smoke test; no timing assertions)."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest


def test_bench_attention_quick(repo_root, child_env):
    proc = subprocess.run([sys.executable, "benchmarks/bench_attention.py", "--quick"], cwd=repo_root,
                          env=child_env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "ours/torch" in out and "torch peak MiB" in out
    assert_names_the_machine(out)
    for mode in ("forward", "fwd+bwd"):
        for length in (32, 128):
            row = re.search(rf"^{re.escape(mode)}\s+{length}\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+<=[\d.]+\s+(PASS|MISS)",
                            out, flags=re.M)
            assert row, f"no {mode} L={length} row in:\n{out}"
            ours, theirs, ratio = (float(v) for v in row.groups()[:3])
            assert abs(ratio - ours / theirs) < 0.011  # the ratio column is ours / torch
    assert re.search(r"^\d+ of 4 rows miss the goal", out, flags=re.M)


def test_bench_train_step_quick_times_ours_fused_paper_loss_and_nn_transformer(repo_root, child_env):
    """Each model trains as its users would (ours: the fused loss of tmin train; nn.Transformer: torch's
    cross_entropy); --paper-loss adds ours through the paper's loss path; the ratio is of the times shown."""
    proc = subprocess.run([sys.executable, "benchmarks/bench_train_step.py", "--quick", "--paper-loss"],
                          cwd=repo_root, env=child_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert_names_the_machine(out)
    secs = {name: float(v) for name, v in re.findall(r"^\s+32 (ours, paper loss|ours|nn.Transformer)\s+([\d.]+)",
                                                     out, flags=re.M)}
    assert set(secs) == {"ours", "ours, paper loss", "nn.Transformer"}, out
    ratio = re.search(r"ours/nn.Transformer tokens/s ratio ([\d.]+)\s+\(goal: ratio >= 1.3: (PASS|MISS)\)", out)
    assert ratio, out
    # the times are printed to 4 decimals (a quick step takes a few thousandths of a second), the ratio to 2
    assert float(ratio.group(1)) == pytest.approx(secs["nn.Transformer"] / secs["ours"], rel=0.03, abs=0.01)


def assert_names_the_machine(out: str) -> None:
    """A benchmark's output starts with tmin doctor's CPU and capability lines (issue 37 item 5)."""
    from transformer_min.cli.doctor import cpu_section

    c = cpu_section()
    assert re.search(rf"^CPU\s+{re.escape(c['model'])}$", out, flags=re.M), out[:500]
    line = re.search(r"^capability\s+(\S+): AVX2 (yes|no), AVX512 (yes|no), AVX512_BF16 (yes|no), AMX (yes|no)$", out,
                     flags=re.M)
    assert line and line.group(1) == c["capability"], out[:500]
    assert (line.group(4) == "yes") == c["avx512_bf16"] and (line.group(5) == "yes") == c["amx"]


def test_bench_attention_bf16_times_our_matmul_path_against_the_fused_kernel(repo_root, child_env):
    proc = subprocess.run([sys.executable, "benchmarks/bench_attention.py", "--precision", "bf16", "--lengths", "16",
                           "--modes", "fwd+bwd", "--batch", "4", "--d-model", "64", "--heads", "4", "--reps", "1",
                           "--warmup", "0"], cwd=repo_root, env=child_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "bf16 autocast" in proc.stdout
    row = re.search(r"^fwd\+bwd\s+16\s+.*\s(\S+) \| (\S+)$", proc.stdout, flags=re.M)
    assert row, proc.stdout
    assert row.groups() == ("matmul", "sdpa-flash")  # which kernels ran, from torch.profiler


def test_bench_attention_rejects_unknown_mode(repo_root, child_env):
    proc = subprocess.run([sys.executable, "benchmarks/bench_attention.py", "--modes", "sideways"], cwd=repo_root,
                          env=child_env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown mode 'sideways'" in proc.stderr


def test_bench_decode_quick(repo_root, child_env):
    proc = subprocess.run([sys.executable, "benchmarks/bench_decode.py", "--quick"], cwd=repo_root,
                          env=child_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "identical outputs: True" in proc.stdout
    assert_names_the_machine(proc.stdout)
    cached = re.search(r"^KV cache \(incremental\)\s+([\d.]+)\s+([\d.]+)", proc.stdout, flags=re.M)
    full = re.search(r"^full prefix every step\s+([\d.]+)\s+([\d.]+)", proc.stdout, flags=re.M)
    speed = re.search(r"speedup \(uncached / cached\): ([\d.]+)x", proc.stdout)
    assert cached and full and speed
    assert abs(float(speed.group(1)) - float(full.group(1)) / float(cached.group(1))) < 0.5


def test_gpu_benchmark_dry_run_on_cpu(repo_root, child_env, tmp_path):
    """benchmarks/gpu.sh --dry-run: the GPU script's own code path on the CPU at tiny sizes, with
    small data built here (tests never read the real data)."""

    from tests.data.conftest import make_pairs, write_split
    from transformer_min.core.config import Config, DataConfig, ModelConfig, TrainConfig, VocabConfig, config_to_dict
    from transformer_min.training.run_dir import to_toml

    root = tmp_path / "m30k"
    for split, n, seed in (("train", 120, 1), ("val", 10, 2), ("test_2016_flickr", 10, 3)):
        write_split(root, split, make_pairs(n, seed))
    cfg = Config(model=ModelConfig(d_model=32, num_heads=4, d_ff=64, num_layers=1, max_len=64),
                 vocab=VocabConfig(src_size=60, tgt_size=60), data=DataConfig(data_dir=str(root), vocab_size=60),
                 train=TrainConfig(task="translation", batch_tokens=300, out_dir=str(tmp_path / "runs")))
    (tmp_path / "tiny.toml").write_text(to_toml(config_to_dict(cfg)))
    out = tmp_path / "gpu"
    proc = subprocess.run(["bash", "benchmarks/gpu.sh", "--dry-run", "--out", str(out), "--config",
                           str(tmp_path / "tiny.toml")], cwd=repo_root, env=child_env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    res = json.loads((out / "results.json").read_text())
    assert res["checks"]["bf16_steps"]["ok"] and res["checks"]["cached_decoding"]["ok"]
    assert res["base"]["ratio_tokens_per_s"] > 0 and res["multi30k"]["sentences"] == 10
    assert "ours/nn.Transformer tokens/s" in (out / "log").read_text()


def test_multi30k_benchmark_scores_each_update_budget(repo_root, child_env, tmp_path):
    """benchmarks/multi30k.py --steps end to end on small data built here: prepare, train to the first
    budget, score a copy of it, resume to the next, score again, pick alpha on val, and record per
    run the updates, tokens per update, precision, threads and CPU."""

    from tests.data.conftest import make_pairs, write_split
    from transformer_min.core.config import Config, DataConfig, ModelConfig, TrainConfig, VocabConfig, config_to_dict
    from transformer_min.training.run_dir import to_toml

    root = tmp_path / "m30k"
    for split, n, seed in (("train", 300, 1), ("val", 10, 2), ("test_2016_flickr", 10, 3)):
        write_split(root, split, make_pairs(n, seed))
    cfg = Config(model=ModelConfig(d_model=32, num_heads=4, d_ff=64, num_layers=1, max_len=64),
                 vocab=VocabConfig(src_size=60, tgt_size=60), data=DataConfig(data_dir=str(root), vocab_size=60),
                 train=TrainConfig(task="translation", batch_tokens=300, warmup_steps=20, checkpoint_interval=2,
                                   keep_last=5, eval_interval=100000, out_dir=str(tmp_path / "runs"),
                                   precision="fp32"))
    (tmp_path / "tiny_de_en.toml").write_text(to_toml(config_to_dict(cfg)))
    proc = subprocess.run([sys.executable, "benchmarks/multi30k.py", "--directions", "de_en", "--config",
                           str(tmp_path / "tiny_{direction}.toml"), "--steps", "12,6",
                           "--alphas", "0.6,1.0", "--alpha-step", "0"], cwd=repo_root, env=child_env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "de_en 6steps test_2016_flickr: last BLEU" in proc.stdout
    assert "de_en 12steps test_2016_flickr: last BLEU" in proc.stdout
    assert re.search(r": 6 updates, \d+ target tokens per update", proc.stdout)
    res = json.loads(next((tmp_path / "runs").glob("multi30k_results_*.json")).read_text())["de_en"]
    snap, full = res["6steps"], res["12steps"]
    assert (snap["summary"]["steps"], full["summary"]["steps"]) == (6, 12)  # exactly the budgets
    from transformer_min.core.hardware import cpu_info

    for r in (snap, full):
        m = r["summary"]["machine"]
        assert m["precision"] == ["fp32"] and m["cpu_capability"] == [cpu_info().flags]
        assert m["threads"] == ["1"]  # OMP_NUM_THREADS=1 in the child: torch's own default, kept
        assert 0 < r["summary"]["tokens_per_update"] <= 300
        assert set(r["val_alpha"]["val_bleu"]) == {"0.6", "1.0"}  # JSON keys
        chosen = r["val_alpha"]["chosen"]
        assert r["val_alpha"]["val_bleu"][str(chosen)] == max(r["val_alpha"]["val_bleu"].values())
        assert 0.0 <= r["averaged"]["bleu"] <= 100.0 and "tok:none" in r["averaged"]["bleu_signature"]
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir() if p.is_dir() and p.name.startswith("multi30k"))
    assert len(runs) == 2 and runs[1] == runs[0] + "_6steps"


def test_multi30k_benchmark_budget_list():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from multi30k import budget_list

    assert budget_list("2676,1456", 45, 25) == ["1456steps", "2676steps"]
    assert budget_list(None, 45, 25) == ["25min", "45min"]
    assert budget_list(None, 45, 0) == ["45min"]
    with pytest.raises(SystemExit, match="positive update counts"):
        budget_list("0,10", 45, 25)


def _benchmark(name: str):
    """benchmarks/<name>.py imported as a module (registered, as its dataclasses look their module up)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).parents[1] / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _row_e():
    return _benchmark("table3_row_e")


def test_row_e_configs_differ_from_their_base_in_the_variant_seed_and_budget_only(tmp_path):
    """Table 3 row (E): each derived config, read back by the real loader, equals the base config except for
    model.positional, train.seed, train.steps (and the run name, the batch and eval interval where asked)."""
    import dataclasses

    from transformer_min.core.project import load_project

    row_e = _row_e()
    base = load_project(Path(__file__).parents[1] / "configs" / "reverse.toml", quiet=True).config
    for variant in row_e.VARIANTS:
        path = row_e.derive_config("reverse", variant, 5, 123, None, tmp_path / f"{variant}.toml")
        got = load_project(path, quiet=True).config
        assert got.model == dataclasses.replace(base.model, positional=variant)
        assert got.train == dataclasses.replace(base.train, seed=5, steps=123, name=f"row_e_reverse_{variant}_s5")
        assert got.vocab == base.vocab
    base = load_project(Path(__file__).parents[1] / "configs" / "multi30k_de_en.toml", quiet=True).config
    derived = row_e.derive_config("multi30k", "relative", 2, 1456, 1200, tmp_path / "m.toml")
    got = load_project(derived, quiet=True).config
    assert got.model == dataclasses.replace(base.model, positional="relative")
    assert (got.train.batch_tokens, got.train.eval_interval, got.train.steps) == (1200, 364, 1456)
    assert got.data == base.data


def test_row_e_table_calls_a_gap_noise_only_within_the_seed_spread():
    rows = [{"task": "reverse", "variant": v, "seed": s, "updates": 200, "accuracy": a, "nll": n}
            for v, s, a, n in [("sinusoidal", 1, 0.90, 0.2), ("sinusoidal", 2, 0.94, 0.1), ("rope", 1, 0.95, 0.1),
                               ("rope", 2, 0.97, 0.1), ("relative", 1, 0.50, 0.5), ("relative", 2, 0.52, 0.5),
                               ("learned", 1, 0.2, 0.9)]]
    text = _row_e().table(rows)
    assert re.search(r"rope - sinusoidal: \+0\.040 accuracy \(seed spread 0\.040\): within run-to-run noise", text)
    assert re.search(r"sinusoidal - relative: \+0\.410 accuracy \(seed spread 0\.040\): beyond run-to-run noise", text)
    assert "relative - learned: +0.310 accuracy (seed spread 0.020): one seed: noise unknown" in text


def test_bench_translate_quick_times_each_engine_in_its_own_process(repo_root, child_env, tmp_path):
    """benchmarks/bench_translate.py on a tiny model trained here: a row per engine and batch size, ours equal to
    itself, the ratio column ours / CTranslate2 fp32 (or ours alone without ctranslate2); --precision adds rows
    of ours in int8 and bf16 and their ratios (issue 37)."""
    from tests.translation.test_eval_src import tiny_run

    run_dir, test, _ = tiny_run(tmp_path)
    proc = subprocess.run([sys.executable, "benchmarks/bench_translate.py", "--checkpoint", str(run_dir), "--quick",
                           "--batches", "1,4", "--threads", "1", "--src", str(test / "t.de"), "--ref", str(test / "t.en"),
                           "--precision", "int8,bf16"],
                          cwd=repo_root, env=child_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert_names_the_machine(out)
    rows = re.findall(r"^(ours|ours int8|ours bf16|ct2 fp32|ct2 int8)\s+(\d+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)%\s+([\d.]+)$",
                      out, flags=re.M)
    for b in ("1", "4"):
        for p in ("int8", "bf16"):
            assert re.search(rf"^batch {b}: ours {p} / ours fp32 time = [\d.]+$", out, flags=re.M), out
    ours = {("ours", "1"), ("ours", "4"), ("ours int8", "1"), ("ours int8", "4"), ("ours bf16", "1"), ("ours bf16", "4")}
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        assert "ctranslate2 is not installed" in out and {(r[0], r[1]) for r in rows} == ours
        return
    assert {(r[0], r[1]) for r in rows} == ours | {(e, b) for e in ("ct2 fp32", "ct2 int8") for b in ("1", "4")}
    assert re.search(r"^batch 4: ours int8 / CTranslate2 int8 time = [\d.]+\s+\((PASS|MISS), goal <= 1.3\)$", out,
                     flags=re.M), out
    assert all(float(r[4]) == 100.0 for r in rows if r[0] == "ours")
    ratios = re.findall(r"^batch (\d+): ours / CTranslate2 fp32 time = ([\d.]+)\s+\((PASS|MISS), goal <= 1.3\)$", out,
                        flags=re.M)
    assert [r[0] for r in ratios] == ["1", "4"], out
    assert all((float(r) <= 1.3) == (verdict == "PASS") for _, r, verdict in ratios)


# ----------------------------------------------------------------------------- benchmarks/table3.py (issue 26)
def test_table3_dry_run_lists_every_row_with_its_fields_and_seeds(repo_root, child_env):
    proc = subprocess.run([sys.executable, "benchmarks/table3.py", "--dry-run"], cwd=repo_root, env=child_env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    from transformer_min.verify.checks import table3 as t3

    for r in t3.ROWS:  # every row of the paper's Table 3
        assert re.search(rf"^{re.escape(r.name)}\s+\S+\s+(\d+,)+\d+\s", out, flags=re.M), r.name
    assert re.search(r"^base\s+base\s+1,2,3\s+\(none: the base\)$", out, flags=re.M)
    assert re.search(r"^A h=1\s+A_h1\s+1,2\s+model\.num_heads 4 -> 1$", out, flags=re.M)
    assert re.search(r"^C N=2\s+C_N2\s+1,2\s+model\.num_layers 3 -> 1$", out, flags=re.M)
    assert "20 rows (19 variants and the base), 41 runs" in out
    assert "1,456 updates of batch_tokens 1,200" in out and "train.time_budget_minutes 45.0 -> 0.0" in out


def test_table3_rows_run_in_the_order_they_are_named():
    """--rows puts the named rows first, in that order (a group in the table's order), each run once."""
    t3 = _benchmark("table3")
    ids = [s.id for s in t3.specs("D_ls0,C_N2,A,A_h1", [1, 2], [1, 2, 3])]
    assert ids == ["D_ls0_s1", "D_ls0_s2", "C_N2_s1", "C_N2_s2", "A_h1_s1", "A_h1_s2", "A_h4_s1", "A_h4_s2",
                   "A_h16_s1", "A_h16_s2", "A_h32_s1", "A_h32_s2"]
    every = [s.id for s in t3.specs("", [1, 2], [1, 2, 3])]
    assert len(every) == 41 and every[:4] == ["base_s1", "base_s2", "base_s3", "A_h1_s1"]


def test_table3_manifest_from_before_a_new_config_key_is_the_same_base_at_its_default():
    """A sweep recorded before decode.precision existed resumes under a version that has it at its default;
    the key set away from its default, a changed value, or a key this version lacks are another base."""
    from transformer_min.core.config import Config, config_to_dict

    t3 = _benchmark("table3")
    now = config_to_dict(Config())
    old = json.loads(json.dumps(now))
    del old["decode"]["precision"]
    assert t3.same("base", old, now) and t3.same("steps", 4, 4) and not t3.same("steps", 4, 8)
    changed = json.loads(json.dumps(now))
    changed["decode"]["precision"] = "int8"
    assert not t3.same("base", old, changed)
    other = json.loads(json.dumps(old))
    other["model"]["d_model"] += 8
    assert not t3.same("base", other, now)
    gone = json.loads(json.dumps(now))
    gone["model"]["retired_key"] = 1
    assert not t3.same("base", gone, now)
    assert not t3.same("base", {**now, "retired_section": {}}, now)


def test_table3_record_counts_updates_by_step_when_a_kill_lost_log_records(tmp_path):
    """A log that lost the records of steps 6-7 to a kill (the checkpoint at 7 survived, the resume went on
    from it) still trained 10 updates: the budget is the last step's number, the seconds the running total."""
    t3 = _benchmark("table3")
    steps = [s for s in range(1, 11) if s not in (6, 7)]
    recs = [{"step": 0, "event": "start", "device": "cpu", "threads": 1}]
    recs += [{"step": s, "loss": 1.0, "tokens": 100 + s, "train_seconds": 2.0 * s} for s in steps]
    recs.insert(6, {"step": 7, "event": "start", "device": "cpu", "threads": 1})
    recs.append({"step": 10, "final_val_nll": 0.5})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    rec = t3.training_record(tmp_path, 10)
    assert rec["updates"] == 10 and rec["train_seconds"] == 20.0 and rec["seconds_per_update"] == 2.0
    assert rec["tokens_per_update"] == sum(100 + s for s in steps) / len(steps) and rec["val_nll"] == 0.5
    assert rec["machine"]["device"] == ["cpu"]


def tiny_sweep_base(tmp: Path, num_layers: int) -> Path:
    """Tiny Multi30k-shaped data in TMP/m30k and a tiny base config TMP/tiny.toml for the sweep's tests."""
    from tests.data.conftest import make_pairs, write_split
    from transformer_min.core.config import Config, DataConfig, ModelConfig, TrainConfig, VocabConfig, config_to_dict
    from transformer_min.training.run_dir import to_toml

    for split, n, seed in (("train", 120, 1), ("val", 8, 2), ("test_2016_flickr", 8, 3)):
        write_split(tmp / "m30k", split, make_pairs(n, seed))
    cfg = Config(model=ModelConfig(d_model=32, num_heads=4, d_ff=64, num_layers=num_layers, max_len=64),
                 vocab=VocabConfig(src_size=60, tgt_size=60), data=DataConfig(data_dir=str(tmp / "m30k"), vocab_size=60),
                 train=TrainConfig(task="translation", batch_tokens=300, warmup_steps=20, checkpoint_interval=2,
                                   eval_interval=100000, precision="fp32"))
    (tmp / "tiny.toml").write_text(to_toml(config_to_dict(cfg)))
    return tmp


@pytest.fixture(scope="module")
def tiny_table3(tmp_path_factory):
    """Three rows (base, A h=1, D eps_ls=0.0), one seed each, 4 updates on tiny data built here."""
    from tests.conftest import REPO_ROOT, subprocess_env

    tmp = tiny_sweep_base(tmp_path_factory.mktemp("table3"), num_layers=3)
    args = [sys.executable, "benchmarks/table3.py", "--config", str(tmp / "tiny.toml"), "--rows", "base,A_h1,D_ls0",
            "--seeds", "1", "--base-seeds", "1", "--steps", "4", "--batch-tokens", "300", "--jobs", "3"]

    def sweep(results: str, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(args + ["--results", str(tmp / results), *extra], cwd=REPO_ROOT, env=subprocess_env(),
                              capture_output=True, text=True, timeout=600)

    first = sweep("res")
    return tmp, sweep, first


def test_table3_sweep_runs_three_rows_end_to_end(tiny_table3):
    import dataclasses

    from tests.conftest import REPO_ROOT, subprocess_env
    from transformer_min.core.project import load_project
    from transformer_min.verify.checks import table3 as t3

    tmp, _, proc = tiny_table3
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    recs = {p.stem: json.loads(p.read_text()) for p in (tmp / "res" / "results").glob("*.json")}
    assert set(recs) == {"base_s1", "A_h1_s1", "D_ls0_s1"}
    for rec in recs.values():
        assert rec["updates"] == 4 and 0 < rec["tokens_per_update"] <= 300 and rec["machine"]["threads"] == ["1"]
        assert rec["val_ppl"] == pytest.approx(math.exp(rec["val_nll"])) and rec["val_ppl"] > 1
        assert 0 <= rec["val_bleu"] <= 100 and 0 <= rec["test_bleu"] <= 100
        m = load_project(tmp / "res" / "configs" / f"{rec['id']}.toml", env={}, quiet=True).config.model
        assert rec["params"] == t3.formula(m, 60)  # the closed form of PAPER.md at V = 60
        hyp = json.loads((tmp / "res" / "runs" / rec["id"] / "hyp.val.step_0000004.txt.json").read_text())
        assert (hyp["beam"], hyp["alpha"], hyp["split"]) == (4, 0.6, "val") and hyp["bleu"] == rec["val_bleu"]
    assert recs["A_h1_s1"]["changes"] == {"model.num_heads": [4, 1]}
    assert recs["D_ls0_s1"]["changes"] == {"train.label_smoothing": [0.1, 0.0]}
    assert re.search(r"\[sweep\] 3/3 runs finished \(0 read from earlier\)", proc.stdout)
    assert re.search(r"^  \[run\] A_h1_s1: done in [\d.]+ min: val PPL", proc.stdout, flags=re.M)
    for row in ("base", "A h=1", "D eps_ls=0.0"):  # the table at the end, one seed: noise unknown
        assert re.search(rf"^{re.escape(row)}\s", proc.stdout, flags=re.M)
    assert "noise unknown" in proc.stdout
    assert (tmp / "res" / "table3_delta_bleu.png").read_bytes()[:4] == b"\x89PNG"  # the figure of the table
    every = subprocess.run([sys.executable, "benchmarks/table3.py", "table", str(tmp / "res"), "--markdown", "--all"],
                           cwd=REPO_ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert every.returncode == 0, every.stderr
    lines = [x for x in every.stdout.splitlines() if x.startswith("| ") and not x.startswith("| row ")]
    assert [x.split(" | ")[0][2:] for x in lines] == [r.name for r in t3.ROWS]  # every row, measured or not
    c_n2 = next(x for x in lines if x.startswith("| C N=2 |"))  # not run here; its parameters from the tiny base
    base = load_project(tmp / "res" / "configs" / "base_s1.toml", env={}, quiet=True).config.model
    n2 = dataclasses.replace(base, num_layers=max(1, round(base.num_layers / 3)))  # N x1/3, written out
    assert "| 0 |" in c_n2 and "not yet run" in c_n2 and f"| {t3.formula(n2, 60) / 1e6:.2f} |" in c_n2


@pytest.mark.parametrize("manifest", [None, "{", '{"steps": 1}', '{"base": {"model": {"d_model": -1}}}'])
def test_table3_table_all_names_a_missing_or_broken_manifest(repo_root, child_env, tmp_path, manifest):
    """`table DIR --all` reads DIR/sweep.json: missing or broken, one line naming it and the fix, no traceback."""

    res = tmp_path / "res"
    (res / "results").mkdir(parents=True)
    (res / "results" / "base_s1.json").write_text(json.dumps(
        {"row": "base", "seed": 1, "updates": 4, "tokens_per_update": 100.0, "batch_tokens": 300, "device": "cpu",
         "val_ppl": 9.0, "val_bleu": 20.0, "test_bleu": 21.0, "params": 1000}))
    if manifest is not None:
        (res / "sweep.json").write_text(manifest)
    before = {p: p.read_bytes() for p in res.rglob("*") if p.is_file()}
    proc = subprocess.run([sys.executable, "benchmarks/table3.py", "table", str(res), "--all"], cwd=repo_root,
                          env=child_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "sweep.json" in proc.stderr and "fix:" in proc.stderr and "drop --all" in proc.stderr
    assert {p: p.read_bytes() for p in res.rglob("*") if p.is_file()} == before  # nothing written or lost


@pytest.mark.parametrize("manifest", ["{", "[1]"])
def test_table3_sweep_names_a_broken_manifest_and_keeps_it(repo_root, child_env, tmp_path, manifest):
    """A sweep into a folder whose sweep.json is broken stops before any run, naming the file and the fix;
    the file and the finished records stay as they were."""
    res = tmp_path / "res"
    (res / "results").mkdir(parents=True)
    (res / "results" / "base_s1.json").write_text('{"row": "base"}')
    (res / "sweep.json").write_text(manifest)
    before = {p: p.read_bytes() for p in res.rglob("*") if p.is_file()}
    proc = subprocess.run([sys.executable, "benchmarks/table3.py", "--results", str(res), "--rows", "base",
                           "--steps", "2"], cwd=repo_root, env=child_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "sweep.json: not a sweep's manifest" in proc.stderr and "fix: delete it" in proc.stderr
    assert {p: p.read_bytes() for p in res.rglob("*") if p.is_file()} == before
    assert not (res / "runs").exists()


def test_table3_finished_runs_are_read_not_redone(tiny_table3):
    tmp, sweep, first = tiny_table3
    assert first.returncode == 0
    results = sorted((tmp / "res" / "results").glob("*.json"))
    before = {p: p.read_bytes() for p in results}
    logs = {p: p.read_text() for p in (tmp / "res" / "logs").glob("*.log")}
    again = sweep("res")
    assert again.returncode == 0, again.stdout[-2000:]
    assert "3/3 runs finished (3 read from earlier)" in again.stdout
    assert {p: p.read_bytes() for p in results} == before
    assert {p: p.read_text() for p in (tmp / "res" / "logs").glob("*.log")} == logs  # no tmin command ran
    other = sweep("res", "--steps", "5")  # another budget into the same folder is refused
    assert other.returncode != 0 and "another steps" in other.stdout + other.stderr


def test_table3_cut_off_run_resumes_to_the_same_model(tiny_table3):
    """A run cut off at update 2 (its checkpoint and metrics, as Ctrl-C leaves them) continues with
    `tmin train --resume` and ends with the weights of the run that was never cut off."""
    import torch

    from tests.conftest import REPO_ROOT, subprocess_env

    tmp, sweep, first = tiny_table3
    assert first.returncode == 0
    cfg = tmp / "res" / "configs" / "base_s1.toml"
    text = cfg.read_text().replace(str(tmp / "res" / "runs"), str(tmp / "cut" / "runs"))
    (tmp / "cut" / "configs").mkdir(parents=True)
    (tmp / "cut" / "configs" / "base_s1.toml").write_text(text)
    proc = subprocess.run([sys.executable, "-m", "transformer_min", "train", "--config",
                           str(tmp / "cut" / "configs" / "base_s1.toml"), "--steps", "2"], cwd=REPO_ROOT,
                          env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    resumed = sweep("cut", "--rows", "base")
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert "$ tmin train --resume" in (tmp / "cut" / "logs" / "base_s1.log").read_text()
    a = torch.load(tmp / "res" / "runs" / "base_s1" / "checkpoints" / "step_0000004.pt", weights_only=False)
    b = torch.load(tmp / "cut" / "runs" / "base_s1" / "checkpoints" / "step_0000004.pt", weights_only=False)
    assert a["model"].keys() == b["model"].keys()
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_gpu_sh_table3_is_the_cuda_sweep_with_a_time_limit(repo_root, child_env, tmp_path):
    """bash benchmarks/gpu.sh --table3: the prepared GPU command (its dry run here; no GPU in CI)."""
    proc = subprocess.run(["bash", "benchmarks/gpu.sh", "--table3", "--out", str(tmp_path), "--dry-run"],
                          cwd=repo_root, env={**child_env, "PYTHON": sys.executable}, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "1,456 updates of batch_tokens 3,600" in proc.stdout and "device cuda" in proc.stdout
    assert "12 runs at once" in proc.stdout and "41 runs" in proc.stdout
    assert f"results {tmp_path}/table3" in proc.stdout and "train.device auto -> cuda" in proc.stdout


# ----------------------------------------------------------------------------- --long (issue 35)
@pytest.fixture(scope="module")
def tiny_long(tmp_path_factory):
    """A 2-row, 2-budget sweep on tiny data: base and D P_drop=0.0, seeds 1 and 2, measured at updates 4 and 8,
    beside a 1x sweep of the base at 4 updates in the same results folder."""
    from tests.conftest import REPO_ROOT, subprocess_env

    tmp = tiny_sweep_base(tmp_path_factory.mktemp("table3_long"), num_layers=2)
    args = [sys.executable, "benchmarks/table3.py", "--config", str(tmp / "tiny.toml"), "--steps", "4",
            "--batch-tokens", "300", "--results", str(tmp / "res"), "--jobs", "2"]

    def sweep(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(args + list(extra), cwd=REPO_ROOT, env=subprocess_env(), capture_output=True,
                              text=True, timeout=900)

    one_x = sweep("--rows", "base", "--base-seeds", "1")
    assert one_x.returncode == 0, one_x.stdout[-3000:] + one_x.stderr[-2000:]
    long = ["--long", "--budgets", "4,8", "--rows", "base,D_drop0", "--seeds", "1,2"]
    return tmp, sweep, long, sweep(*long)


def test_table3_long_sweep_measures_every_budget_of_one_run(tiny_long):
    """Each run is measured at 4 and at 8 updates; its point at 4 is the 1x run's model (eq. (3) does not
    depend on the total), equal in every score; the base is averaged at its last budget."""
    tmp, _, _, proc = tiny_long
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    long = tmp / "res" / "budgets"
    got = {p.stem: json.loads(p.read_text()) for p in long.glob("*_u*.json")}
    assert set(got) == {f"{r}_s{s}_u{b}" for r in ("base", "D_drop0") for s in (1, 2) for b in (4, 8)}
    for rec in got.values():
        assert rec["updates"] == rec["budget"] and rec["checkpoint"].endswith(f"step_{rec['budget']:07d}.pt")
        assert rec["val_ppl"] == pytest.approx(math.exp(rec["val_nll"])) and rec["train_nll"] > 0
        assert rec["machine"]["threads"] == ["1"] and rec["seconds_per_update"] > 0
    one = json.loads((tmp / "res" / "results" / "base_s1.json").read_text())
    point = got["base_s1_u4"]
    assert point["one_x"]["equal"] and point["one_x"]["same_cpu_capability"]
    assert (point["val_nll"], point["val_bleu"], point["test_bleu"]) == (one["val_nll"], one["val_bleu"], one["test_bleu"])
    assert got["base_s2_u4"]["one_x"] is None  # no 1x record of seed 2 here
    assert "segment_seconds_per_update" in got["base_s1_u8"]
    assert "test_bleu_avg" in got["base_s1_u8"] and len(got["base_s1_u8"]["averaged"]) >= 2
    assert "test_bleu_avg" not in got["D_drop0_s1_u8"] and "test_bleu_avg" not in got["base_s1_u4"]
    # the run went on in one folder: the 8-update checkpoint resumed from the 4-update one
    log = (long / "logs" / "base_s1.log").read_text()
    assert "--steps 4" in log and "train --resume" in log and "--steps 8" in log
    assert "Table 3 at longer budgets" in proc.stdout and "D P_drop=0.0" in proc.stdout
    assert (tmp / "res" / "table3_budgets_delta_bleu.png").read_bytes()[:4] == b"\x89PNG"


def test_table3_long_points_are_read_and_a_missing_one_is_measured_from_its_checkpoint(tiny_long):
    tmp, sweep, long, first = tiny_long
    assert first.returncode == 0
    res = tmp / "res" / "budgets"
    gone = res / "D_drop0_s2_u4.json"
    before = json.loads(gone.read_text())
    gone.unlink()
    log = res / "logs" / "D_drop0_s2.log"
    trained = log.read_text().count("$ tmin train")
    again = sweep(*long)
    assert again.returncode == 0, again.stdout[-3000:]
    after = json.loads(gone.read_text())
    assert {k: after[k] for k in ("val_nll", "val_bleu", "test_bleu", "updates")} == \
        {k: before[k] for k in ("val_nll", "val_bleu", "test_bleu", "updates")}
    assert log.read_text().count("$ tmin train") == trained  # measured from the kept checkpoint, nothing trained
    dry = sweep(*long, "--dry-run")
    assert dry.returncode == 0 and "D_drop0_s2     points measured: 4, 8; to measure: none" in dry.stdout
    assert "longer budgets: one run per row and seed, measured at updates 4, 8" in dry.stdout


def test_table3_long_point_whose_checkpoint_was_pruned_is_named(tiny_long):
    tmp, sweep, long, first = tiny_long
    assert first.returncode == 0
    res = tmp / "res" / "budgets"
    (res / "base_s2_u4.json").unlink()
    (res / "runs" / "base_s2" / "checkpoints" / "step_0000004.pt").unlink()
    again = sweep(*long)
    assert again.returncode == 1
    assert "base_s2: FAILED" in again.stdout and "no checkpoint of update 4" in again.stdout
    assert "drop 4 from --budgets" in again.stdout


def test_table3_long_table_and_report_show_the_budgets(tiny_long, repo_root, child_env):
    tmp, _, _, first = tiny_long
    assert first.returncode == 0
    table = subprocess.run([sys.executable, "benchmarks/table3.py", "table", str(tmp / "res")], cwd=repo_root,
                           env=child_env, capture_output=True, text=True, timeout=300)
    assert table.returncode == 0, table.stdout[-2000:] + table.stderr[-2000:]
    assert "Table 3 at small scale: 4 updates" in table.stdout  # the 1x table of the folder
    lines = [x for x in table.stdout.splitlines() if x.startswith("D P_drop=0.0")]
    assert [x.split()[5] for x in lines] == ["4", "8"]  # one line per budget (after "D P_drop=0.0 P_drop = 0.0")


def test_gpu_sh_cpu_class_runs_every_cpu_benchmark(repo_root, child_env, tmp_path):
    """bash benchmarks/gpu.sh --cpu-class: issue 37's CPU benchmarks on a GPU machine's CPU, as one prepared command
    (its dry run here, on small data built here): a model trained and averaged, then the training-step benchmark
    (fp32 and auto) and the decoding benchmark, each part's log in --out with the CPU's capability line, the model's
    checkpoints under --runs-dir, not in --out (whose files a device run brings back: 8 at most)."""
    from tests.data.conftest import make_pairs, write_split
    from transformer_min.core.config import Config, DataConfig, ModelConfig, TrainConfig, VocabConfig, config_to_dict
    from transformer_min.training.run_dir import to_toml

    root = tmp_path / "m30k"
    for split, n, seed in (("train", 120, 1), ("val", 10, 2), ("test_2016_flickr", 10, 3)):
        write_split(root, split, make_pairs(n, seed))
    cfg = Config(model=ModelConfig(d_model=32, num_heads=4, d_ff=64, num_layers=1, max_len=64),
                 vocab=VocabConfig(src_size=60, tgt_size=60), data=DataConfig(data_dir="not/here", vocab_size=60),
                 train=TrainConfig(task="translation", batch_tokens=300, out_dir="not/here/either"))
    (tmp_path / "tiny.toml").write_text(to_toml(config_to_dict(cfg)))
    out, runs = tmp_path / "out", tmp_path / "runs"
    args = ["--dry-run", "--config", str(tmp_path / "tiny.toml"), "--data-dir", str(root), "--runs-dir", str(runs),
            "--out", str(out)]
    proc = subprocess.run(["bash", "benchmarks/gpu.sh", "--cpu-class", *args],
                          cwd=repo_root, env=child_env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    from transformer_min.core.hardware import cpu_info

    files = sorted(p.name for p in out.iterdir())
    bf16 = cpu_info().native_bf16  # precision auto is timed only where it is not fp32
    assert files == ["config.toml", "doctor.log", "log", "model.log", "train_step.log"] + (
        ["train_step_auto.log"] if bf16 else []) + ["translate.log"]
    assert bf16 or "train_step_auto: SKIP" in (out / "log").read_text(encoding="utf-8")
    assert (runs / "cpu_class" / "checkpoints" / "averaged.safetensors").is_file()
    logs = {name: (out / name).read_text(encoding="utf-8") for name in files}
    for name in ("doctor.log", "translate.log", *(n for n in files if n.startswith("train_step"))):
        assert re.search(r"(?m)^capability\s+\S", logs[name]), name
    for name in (n for n in files if n.startswith("train_step")):
        assert "ours/nn.Transformer tokens/s ratio" in logs[name]
    assert re.search(r"(?m)^ours int8\s+1\s+[\d.]+", logs["translate.log"])
    assert re.search(r"(?m)^ours\s+4\s+[\d.]+", logs["translate.log"])  # the dry run's second batch size
    assert str(root) in logs["config.toml"] and str(runs) in logs["config.toml"]
    assert all(logs[n] in logs["log"] for n in ("train_step.log", "translate.log"))  # the screen has every part
