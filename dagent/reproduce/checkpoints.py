"""The checkpoint checks of `dagent reproduce`'s training stages: the checkpoint at the run's last step,
its optimizer, scheduler and trainer state present, its weights changed against the starting model
(tensor by tensor), and its optimizer state restoring onto its own weights."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dagent.reproduce.stages import StageError


def checkpoint_receipt(run_dir: Path, start: Path, step: int) -> dict[str, Any]:
    """The run's checkpoint at its last `step` (not the newest name: a stale checkpoint of an earlier,
    longer run must not stand in for it): optimizer/scheduler/trainer state present, weights changed
    against `start` (tensor by tensor), and its optimizer state restoring onto its own weights
    (`restores_identically`)."""
    ckpt = Path(run_dir) / f"checkpoint-{step}"
    if not ckpt.is_dir():
        found = sorted(p.name for p in Path(run_dir).glob("checkpoint-*"))
        raise StageError(f"no {ckpt.name} in {run_dir} (found {found or 'none'}): the run stopped before step {step}")
    present = {name: (ckpt / name).is_file() for name in ("optimizer.pt", "scheduler.pt", "trainer_state.json")}
    if not all(present.values()):
        raise StageError(
            f"{ckpt} lacks {[n for n, ok in present.items() if not ok]}: no optimizer state to resume from"
        )
    changed, total = weights_changed(start, ckpt)
    restored = restores_identically(ckpt)
    if not restored["identical"]:
        raise StageError(f"{ckpt} does not restore onto its own weights: {restored}")
    return {
        "checkpoint": str(ckpt),
        "state_present": present,
        "tensors_changed": changed,
        "tensors": total,
        "restore": restored,
    }


def _tensors(model_dir: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise StageError(f"no safetensors weights in {model_dir}")
    out: dict[str, Any] = {}
    for f in files:
        out.update(load_file(str(f)))
    return out


def weights_changed(a: Path, b: Path) -> tuple[int, int]:
    """(tensors that differ, tensors compared) between two saved models (float32 comparison)."""
    import torch

    ta, tb = _tensors(a), _tensors(b)
    keys = sorted(set(ta) & set(tb))
    changed = sum(1 for k in keys if not torch.equal(ta[k].float(), tb[k].float()))
    return changed, len(keys)


def restores_identically(ckpt: Path) -> dict[str, Any]:
    """Whether the checkpoint's optimizer state restores onto its own weights as the Trainer rebuilds
    them: the Trainer's decay / no-decay groups over the model loaded from the checkpoint, every
    moment (exp_avg, exp_avg_sq) the shape of the parameter it lands on, the optimizer's step count
    the checkpoint's own global step (a stale optimizer.pt from another step or run fails here), and
    the learning rate the one its scheduler last set."""

    import torch
    from transformers import AutoModelForCausalLM, Trainer

    saved_weights = _tensors(ckpt)
    model = AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=torch.float32)
    live = dict(model.state_dict())
    weights_equal = all(torch.equal(live[k].float(), v.float()) for k, v in saved_weights.items() if k in live)
    saved = torch.load(ckpt / "optimizer.pt", map_location="cpu", weights_only=False)
    scheduler = torch.load(ckpt / "scheduler.pt", map_location="cpu", weights_only=False)
    global_step = json.loads((ckpt / "trainer_state.json").read_text())["global_step"]
    decay = set(Trainer.get_decay_parameter_names(None, model))  # the Trainer's own grouping, as it restores
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [[p for n, p in named if n in decay], [p for n, p in named if n not in decay]]
    optimizer = torch.optim.AdamW([{"params": groups[0]}, {"params": groups[1], "weight_decay": 0.0}])
    optimizer.load_state_dict(saved)  # refuses groups of other sizes
    misplaced, steps, moments = [], set(), 0
    for group in optimizer.param_groups:
        for param in group["params"]:
            state = optimizer.state.get(param, {})
            for key in ("exp_avg", "exp_avg_sq"):
                if key in state:
                    moments += 1
                    if state[key].shape != param.shape:
                        misplaced.append(f"{key} {tuple(state[key].shape)} on {tuple(param.shape)}")
            if "step" in state:
                steps.add(int(state["step"]))
    lr_saved = [g["lr"] for g in optimizer.param_groups]
    lr_scheduled = list(scheduler.get("_last_lr", lr_saved))
    return {
        "identical": bool(weights_equal and not misplaced and steps == {global_step} and lr_saved == lr_scheduled),
        "weights_equal": bool(weights_equal),
        "optimizer_tensors": moments,
        "misplaced": misplaced[:5],
        "optimizer_steps": sorted(steps),
        "global_step": global_step,
        "param_groups": len(saved["param_groups"]),
    }
