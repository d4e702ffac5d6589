"""scripts/learning_run.sh resumes where it stopped (DRY_RUN=1 prints each command instead of
running it): a finished piece is skipped, an arm that stopped short continues from its last
checkpoint with its optimizer, scheduler and RNG state, and an arm at its step count is marked
finished without training again. The trainer's own resume (weights, optimizer and scheduler state
restored) is tested in tests/train/test_hub_checkpoints.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def checkpoint(arm: Path, step: int) -> None:
    ckpt = arm / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": step}))


def learning_run(out: Path, stages: str, **env: str) -> list[str]:
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "learning_run.sh")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "OUT": str(out), "DRY_RUN": "1", "STAGES": stages, "SEEDS": "0 1", "GRPO_STEPS": "8", **env},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def parsed(line: str, loop: str):
    """A printed `+ train ARGS` line, parsed as learning_run.sh's train() runs it."""
    import shlex

    from dagent.jobargs import parse

    argv = shlex.split(line.removeprefix("+ train"))
    if loop == "whitebox":
        from dagent.train.whitebox.grpo import WhiteboxArgs

        return parse(WhiteboxArgs, ["--preset", "cpu", *argv])
    from dagent.train.blackbox.args import BlackboxArgs

    return parse(BlackboxArgs, ["--mode", "sync", "--preset", "cpu", "--harness", "pi", *argv])


def test_the_black_box_loops_commands_parse_with_its_groups_a_step(tmp_path):
    out = tmp_path / "lr"
    (out / ".done").mkdir(parents=True)
    (out / ".done" / "sft").touch()
    lines = learning_run(out, "grpo control", LOOP="blackbox", GROUPS_PER_STEP="2")
    trains = [line for line in lines if line.startswith("+ train")]
    assert len(trains) == 4  # GRPO and control, seeds 0 and 1
    assert all(parsed(line, "blackbox").recipe().groups_per_step == 2 for line in trains)


def test_a_second_sitting_skips_what_finished_and_resumes_what_stopped(tmp_path):
    out = tmp_path / "lr"
    (out / ".done").mkdir(parents=True)
    (out / ".done" / "sft").touch()  # the warm start finished in an earlier sitting
    checkpoint(out / "grpo-0", 4)  # seed 0 stopped at step 4 of 8 (killed, or its sitting's budget)
    checkpoint(out / "grpo-0", 2)
    checkpoint(out / "grpo-0", 32)  # the highest by number, not by name: 4 sorts after 32 as text
    (out / "grpo-0" / "checkpoint-32" / "trainer_state.json").write_text(json.dumps({"global_step": 4}))
    checkpoint(out / "grpo-1", 8)  # seed 1 reached its 8 steps but was not marked (killed while saving final/)
    lines = learning_run(out, "sft base grpo control", MIXED_ONLY="1", GROUPS_PER_STEP="2")
    text = "\n".join(lines)
    assert "sft: finished in an earlier sitting, skipped" in text and "sft_warmstart.py" not in text
    assert sum("eval --agent tools" in line and "--split train:easy" in line for line in lines) == 1  # base: once
    grpo = [line for line in lines if line.startswith("+ train") and "--run-name grpo-" in line]
    assert len(grpo) == 1  # seed 1 is not trained again
    assert f"--resume-from {out}/grpo-0/checkpoint-32" in grpo[0] and "--max-steps 8" in grpo[0]
    assert "--base-eval" in grpo[0] and "--mixed-only" in grpo[0] and "--groups-per-step 2" in grpo[0]
    # what the script prints, the trainer's own parser takes: 2 groups of G=4 are a batch of 8 rollouts
    # (a flag only the dry run had seen once reached a real sitting: "unrecognized arguments")
    for line in grpo + [c for c in lines if c.startswith("+ train") and "--control permuted" in c]:
        recipe = parsed(line, "whitebox").recipe()
        assert recipe.per_device_train_batch_size == 8 and recipe.num_generations == 4
    assert "grpo-1: at step 8 already" in text  # (a real sitting marks it finished; a dry run writes nothing)
    controls = [line for line in lines if line.startswith("+ train") and "--control permuted" in line]
    assert len(controls) == 2 and not any("--resume-from" in c for c in controls)  # fresh, to the GRPO run's 8 steps
    assert all("--max-steps 8" in c for c in controls)
    # the next sitting: every piece marked finished is skipped, nothing else runs
    for piece in ("base-train", "grpo-0", "grpo-1", "control-0", "control-1"):
        (out / ".done" / piece).touch()
    again = "\n".join(learning_run(out, "sft base grpo control"))
    assert "+ " not in again and again.count("skipped") == 6


def test_eval_stays_closed_until_every_arm_reached_its_steps(tmp_path):
    out = tmp_path / "lr"
    checkpoint(out / "grpo-0", 4)
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "learning_run.sh")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "OUT": str(out), "DRY_RUN": "1", "STAGES": "eval", "SEEDS": "0", "GRPO_STEPS": "8"},
        timeout=120,
    )
    assert done.returncode == 3 and "grpo-0 has not reached step 8" in done.stderr and "+ " not in done.stdout
    for piece in ("grpo-0", "control-0"):
        (out / ".done" / piece).touch()
    lines = learning_run(out, "eval", SEEDS="0")
    evals = [line for line in lines if line.startswith("+ ") and " eval " in line]
    assert [e.split("--out ")[1].split()[0] for e in evals] == [
        f"{out}/eval-{n}" for n in ("warm", "grpo-0", "control-0")
    ]


def test_publish_copies_each_evaluation_with_what_made_it(tmp_path):
    """Sittings on machines that do not outlive their session (docs/learning.md): the records of the
    sitting's evaluations go into the repository byte for byte, each with the warm start's digest, its
    arm's steps and the commit the evaluation itself ran at (a record published again by a later
    sitting keeps its own) beside it; an evaluation the sitting names but did not finish publishes nothing."""
    import hashlib

    out, dest = tmp_path / "lr", tmp_path / "published"
    (out / ".done").mkdir(parents=True)
    (out / "sft" / "final").mkdir(parents=True)
    (out / "sft" / "final" / "model.safetensors").write_bytes(b"weights")
    checkpoint(out / "grpo-0", 8)
    checkpoint(out / "control-0", 8)
    for run_ in ("grpo-0", "control-0"):  # each trained arm's own final weights
        (out / run_ / "final").mkdir(parents=True, exist_ok=True)
        (out / run_ / "final" / "model.safetensors").write_bytes(run_.encode())
    for name in ("base-train", "eval-warm", "eval-grpo-0", "eval-control-0"):
        arm = out / name / "tools-smollm2"
        arm.mkdir(parents=True)
        (arm / "records.jsonl").write_text(f'{{"from": "{name}"}}\n')
        (arm / "transcripts.jsonl.gz").write_bytes(name.encode())  # every episode's transcript, compressed
        made_at = hashlib.sha1(name.encode()).hexdigest()  # each evaluation's own commit, not the publishing one's
        (arm / "summary.json").write_text(
            json.dumps(
                {
                    "provenance": {"project": {"revision": made_at, "dirty": False}},
                    "conditions": {"loop": "white-box", "from": name},
                }
            )
        )
        (out / name / "trackio").mkdir()  # not an arm
    (out / "base-train" / "scores.json").write_text(json.dumps({"tools": {"pass_at": {"1": 0.375}}}))

    def run():
        return subprocess.run(
            ["bash", str(ROOT / "scripts" / "learning_run.sh")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env={
                **os.environ,
                "OUT": str(out),
                "STAGES": "publish",
                "SEEDS": "0",
                "GRPO_STEPS": "8",
                "PUBLISH": str(dest),
            },
        )

    for piece in ("base-train", "eval-warm", "eval-grpo-0"):
        (out / ".done" / piece).touch()
    refused = run()
    assert refused.returncode == 3 and "eval-control-0 is not finished" in refused.stderr
    assert not (dest / "seed-0" / "control.jsonl").exists()
    (out / ".done" / "eval-control-0").touch()
    done = run()
    assert done.returncode == 0, done.stderr
    published = {str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()}
    assert published == {
        f"{n}.{ext}"
        for n in ("base-train", "warm", "seed-0/grpo", "seed-0/control")
        for ext in ("jsonl", "json", "transcripts.jsonl.gz")
    } | {"seed-0/grpo.trainer_state.json", "seed-0/control.trainer_state.json"}
    assert (dest / "seed-0" / "grpo.transcripts.jsonl.gz").read_bytes() == b"eval-grpo-0"
    # each arm's own weights digest beside the warm start's
    assert (
        json.loads((dest / "seed-0" / "grpo.json").read_text())["weights_sha256"]
        == hashlib.sha256(b"grpo-0").hexdigest()
    )
    assert (
        json.loads((dest / "seed-0" / "control.json").read_text())["weights_sha256"]
        == hashlib.sha256(b"control-0").hexdigest()
    )
    assert json.loads((dest / "warm.json").read_text())["weights_sha256"] == hashlib.sha256(b"weights").hexdigest()
    # the arms' logged steps (their training curves' data), from their last checkpoints
    assert json.loads((dest / "seed-0" / "grpo.trainer_state.json").read_text()) == {"global_step": 8}
    for file, name in (
        ("base-train", "base-train"),
        ("warm", "eval-warm"),
        ("seed-0/grpo", "eval-grpo-0"),
        ("seed-0/control", "eval-control-0"),
    ):
        assert (dest / f"{file}.jsonl").read_text() == f'{{"from": "{name}"}}\n'
        made = json.loads((dest / f"{file}.json").read_text())
        assert made["warm_start_sha256"] == hashlib.sha256(b"weights").hexdigest()
        assert made["commit"] == hashlib.sha1(name.encode()).hexdigest()[:7]
        assert made["sizes"]["EVAL_SPLIT"] == "eval:easy" and made["base_evaluation"] == str(out / "base-train")
        assert made["conditions"] == {"loop": "white-box", "from": name}  # a pool of published arms checks them (F47)
    assert json.loads((dest / "seed-0" / "grpo.json").read_text())["steps"] == 8
    assert "steps" not in json.loads((dest / "warm.json").read_text())

    # a finished watch: each point's own records become seed-S/watch/POINT.jsonl (the held-out curve's data)
    for point in ("baseline", "checkpoint-8"):
        (out / "watch-0" / point / point).mkdir(parents=True)
        (out / "watch-0" / point / point / "records.jsonl").write_text(f'{{"point": "{point}"}}\n')
        (out / "watch-0" / point / "records.jsonl").write_text("{}\n")  # the side-by-side copy, not published
    (out / "watch-0" / ".checkpoints").mkdir()  # fetched weights: not a point
    assert run().returncode == 0 and not (dest / "seed-0" / "watch").exists()  # not finished: nothing
    (out / ".done" / "watch-0").touch()
    assert run().returncode == 0
    assert {p.name: p.read_text() for p in (dest / "seed-0" / "watch").iterdir()} == {
        f"{p}.jsonl": f'{{"point": "{p}"}}\n' for p in ("baseline", "checkpoint-8")
    }


def test_the_report_reads_the_published_records_and_draws_each_published_arms_curves(tmp_path):
    """The last sitting reports from the repository alone (REPORT_FROM): each seed's published
    trainer state drawn as its curves, then dagent.eval.learning_report over the published records."""
    pub = tmp_path / "published"
    for seed, run in ((0, "grpo"), (0, "control"), (2, "grpo")):
        (pub / f"seed-{seed}").mkdir(parents=True, exist_ok=True)
        (pub / f"seed-{seed}" / f"{run}.trainer_state.json").write_text("{}")
    (pub / "seed-2" / "watch").mkdir()  # seed 2's published watch records: its held-out curve
    out = tmp_path / "lr"
    lines = learning_run(out, "report", REPORT_FROM=str(pub))
    commands = [line for line in lines if line.startswith("+ ") and " -m dagent." in line]
    curves = sorted(c.split("--out ")[1] for c in commands if "dagent.train.curves" in c)
    assert curves == [f"{out}/report/{n}_curves.png" for n in ("control-0", "grpo-0", "grpo-2")]
    (watch,) = [c for c in commands if "dagent.eval.watch_curves" in c]
    assert f"watch_curves {pub}/seed-2/watch --label seed 2 --title" in watch
    assert watch.endswith(f"--out {out}/report/watch_curves.png")
    assert commands[-1].endswith(f"-m dagent.eval.learning_report {pub} --out {out}/report")


def test_a_sitting_of_one_arm_takes_the_published_base_and_opens_only_its_own_evaluation(tmp_path):
    out = tmp_path / "lr"
    (out / ".done").mkdir(parents=True)
    (out / ".done" / "sft").touch()
    base = tmp_path / "base-train.jsonl"
    base.write_text(
        json.dumps(
            {
                "task_id": "t1",
                "split": "train:easy",
                "index": 0,
                "difficulty_tier": "easy",
                "agent": "tools",
                "outcome": "correct",
                "reward": 1.0,
                "correct": True,
                "method": "exact",
            }
        )
        + "\n"
    )
    lines = learning_run(out, "sft base control", SEEDS="1", BASE_EVAL=str(base))
    text = "\n".join(lines)
    assert "base: taken from the published evaluation" in text and "--split train:easy --limit" not in text
    trains = [line for line in lines if line.startswith("+ train")]
    assert len(trains) == 1 and "--run-name control-1" in trains[0] and f"--base-eval {base}" in trains[0]
    assert "--base-pass1 1.0" in trains[0]  # the published records' own rate
    (out / ".done" / "control-1").touch()  # (a dry run marks nothing)
    evals = [
        line
        for line in learning_run(out, "eval", SEEDS="1", EVAL_ARMS="control")
        if line.startswith("+ ") and " eval " in line
    ]
    assert [e.split("--out ")[1].split()[0] for e in evals] == [f"{out}/eval-control-1"]  # no warm start, no GRPO


def test_the_published_records_are_not_ignored_by_git():
    """What `publish` writes under docs/runs/ is meant to be committed: no ignore rule may hide it
    (`runs/` ignores the training runs' output folders everywhere else)."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    paths = [
        f"docs/runs/lr-{loop}/{name}"
        for loop in ("whitebox", "blackbox")
        for name in ("base-train.jsonl", "warm.json", "seed-0/grpo.jsonl", "seed-0/control.json")
    ]
    r = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--no-index", *paths], capture_output=True, text=True)
    assert r.returncode == 1 and r.stdout == "", f"ignored by git: {r.stdout}"
    assert (
        subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", "--no-index", "runs/x/y.jsonl"]).returncode == 0
    )


def test_a_control_at_one_seed_opens_and_pools_only_that_seeds_control(tmp_path):
    """The powered black-box design: GRPO at three seeds, the permuted control at seed 0 only
    (CONTROL_SEEDS). The eval stage must not wait for controls that were never to run, nor open
    them; GRPO - control pairs only the seed that has both arms, GRPO - warm start all three."""
    out = tmp_path / "lr"
    (out / ".done").mkdir(parents=True)
    for piece in ("grpo-0", "grpo-1", "grpo-2", "control-0"):
        (out / ".done" / piece).touch()
    env = dict(LOOP="blackbox", SEEDS="0 1 2", CONTROL_SEEDS="0")
    trains = [line for line in learning_run(tmp_path / "fresh", "grpo control", **env) if line.startswith("+ train")]
    assert sum("--control permuted" in t for t in trains) == 1 and "--seed 0" in trains[-1]
    for name in ("warm", "grpo-0", "grpo-1", "grpo-2", "control-0"):  # what the pool stage reads: each arm's folder
        (out / f"eval-{name}" / "model").mkdir(parents=True)
    lines = learning_run(out, "eval pool", **env)
    evals = [line.split("--out ")[1].split()[0] for line in lines if line.startswith("+ ") and " eval --agent" in line]
    assert evals == [f"{out}/eval-{n}" for n in ("warm", "grpo-0", "control-0", "grpo-1", "grpo-2")]
    pools = {line.split("--out ")[1].split()[0].rsplit("/", 1)[1]: line for line in lines if " eval pool " in line}
    assert pools["pool-grpo-vs-warm"].count("eval-grpo-") == 3
    assert pools["pool-grpo-vs-control"].count("eval-grpo-") == 1 and "eval-control-0" in pools["pool-grpo-vs-control"]
    assert "eval-control-1" not in "\n".join(lines)
