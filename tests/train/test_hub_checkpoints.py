"""Checkpoints to a Hub model repo and back, against a real local HTTP endpoint (tests/fake_hub.py):
every `checkpoint-N/` pushed whole with a model card, `--resume-from OWNER/NAME@checkpoint-N`
downloading it, and the restored trainer holding identical weights and optimizer state, then
continuing. Not covered: the real Hub's auth, Xet storage (the fake takes regular uploads only)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import AutoModelForCausalLM  # noqa: E402

from dagent.train.assembly import resolve_resume  # noqa: E402
from dagent.train.hub_checkpoints import CheckpointPusher, model_card  # noqa: E402
from tests.fake_hub import FakeHub  # noqa: E402


def tiny_trainer(out, steps: int, callbacks=()):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

    from dagent.engine.models import tiny_qwen3

    model = AutoModelForCausalLM.from_pretrained(str(tiny_qwen3()), dtype=torch.float32)
    rows = [{"input_ids": list(range(10 + i, 26 + i)), "labels": list(range(10 + i, 26 + i))} for i in range(12)]
    args = TrainingArguments(
        output_dir=str(out),
        max_steps=steps,
        per_device_train_batch_size=2,
        learning_rate=1e-3,
        save_strategy="steps",
        save_steps=2,
        use_cpu=True,
        report_to="none",
        logging_steps=1,
        weight_decay=0.01,
        seed=0,
    )
    return Trainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        callbacks=list(callbacks),
        processing_class=AutoTokenizer.from_pretrained(str(tiny_qwen3())),
    )


@pytest.mark.slow
@pytest.mark.failure_mode("F22")
def test_a_pushed_checkpoint_resumes_with_identical_weights_and_optimizer_state(tmp_path):
    from huggingface_hub import HfApi

    with FakeHub() as hub:
        api = HfApi(endpoint=hub.url, token=hub.token)
        pusher = CheckpointPusher(
            "fake-user/run",
            "tiny-qwen3",
            {"split": "train:easy", "learning_rate": 1e-3},
            {"suite": {"source": "bundled", "digest": "abc", "tasks": {"train": 4}}},
            api=api,
        )
        trained = tiny_trainer(tmp_path / "run", 2, [pusher])
        trained.train()
        files = hub.files("fake-user/run")
        assert pusher.pushed == ["checkpoint-2", "final"]
        assert {
            "checkpoint-2/optimizer.pt",
            "checkpoint-2/scheduler.pt",
            "checkpoint-2/trainer_state.json",
            "checkpoint-2/model.safetensors",
            "checkpoint-2/tokenizer.json",
            "README.md",
        } <= set(files)
        card = files["README.md"].decode()
        assert "checkpoint-2" in card and "train:easy" in card and hub.token not in card
        assert not any(hub.token.encode() in data for data in files.values())  # no secret in any file (F22)

        local = resolve_resume("fake-user/run@checkpoint-2", tmp_path / "cache", api=api)
        ckpt = tmp_path / "run" / "checkpoint-2"
        for name in ("optimizer.pt", "scheduler.pt", "model.safetensors", "trainer_state.json"):
            assert (ckpt / name).read_bytes() == (
                tmp_path / "cache" / "fake-user--run" / "checkpoint-2" / name
            ).read_bytes()
        # restore into a fresh trainer, as Trainer.train(resume_from_checkpoint=...) does, and compare
        fresh = tiny_trainer(tmp_path / "resumed", 3)
        fresh._load_from_checkpoint(local)
        fresh.create_optimizer_and_scheduler(num_training_steps=3)
        fresh._load_optimizer_and_scheduler(local)
        for (name, a), (_, b) in zip(trained.model.named_parameters(), fresh.model.named_parameters(), strict=True):
            assert torch.equal(a, b), name
        saved = torch.load(ckpt / "optimizer.pt", weights_only=False)
        restored = fresh.optimizer.state_dict()
        assert saved["param_groups"] == restored["param_groups"] and saved["state"].keys() == restored["state"].keys()
        for pid, state in saved["state"].items():
            for key, value in state.items():
                assert torch.equal(value, restored["state"][pid][key]), (pid, key)
        # and it continues from step 2
        again = tiny_trainer(tmp_path / "resumed", 3)
        again.train(resume_from_checkpoint=local)
        assert again.state.global_step == 3

        with pytest.raises(Exception, match="checkpoint-9"):
            resolve_resume("fake-user/run@checkpoint-9", tmp_path / "cache2", api=api)

        # the run's repo itself loads as a model: the trained weights at its root, checkpoints beside
        import huggingface_hub.constants

        from dagent.engine.models import model_dir
        from tests.engine.test_hub_models import hub_env

        with hub_env(hub, tmp_path / "hf"):
            root = model_dir("fake-user/run")
        assert not (root / "checkpoint-2").exists() and (root / "config.json").is_file()
        loaded = AutoModelForCausalLM.from_pretrained(str(root), dtype=torch.float32)
        for (name, a), (_, b) in zip(trained.model.named_parameters(), loaded.named_parameters(), strict=True):
            assert torch.equal(a, b), name
        assert huggingface_hub.constants.HF_HUB_CACHE != str(tmp_path / "hf")  # restored after the block


def test_the_card_names_recipe_data_scores_and_provenance():
    card = model_card(
        "me/run",
        base_model="HuggingFaceTB/SmolLM2-135M-Instruct",
        recipe={"split": "train:easy", "num_generations": 8, "token": "never"},
        provenance={
            "project": {"revision": "abc123", "dirty": False},
            "grader": "g1",
            "libraries": {"trl": "1.16.0"},
            "suite": {"source": "s", "digest": "d"},
        },
        step=40,
        scores={"base": {"pass@1": 0.25, "ci": [0.2, 0.3], "split": "test:easy", "tasks": 64}},
    )
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in card and "checkpoint-40" in card
    assert "| base | test:easy | 25.0% | [20.0%, 30.0%] | 64 |" in card and "`abc123`" in card and "trl 1.16.0" in card
    assert "never" not in card  # only the recipe's allow-listed fields reach a card (F22)


def test_the_card_links_the_projects_own_repository_at_its_commit_never_a_placeholder(monkeypatch):
    from dagent import provenance

    prov = {"project": {"url": "https://github.com/me/dagent", "revision": "abc123"}}
    card = model_card("me/run", base_model="b", recipe={}, provenance=prov)
    assert "[dagent](https://github.com/me/dagent/tree/abc123)" in card
    card = model_card("me/run", base_model="b", recipe={}, provenance={"project": {"revision": "abc123"}})
    assert "https://github.com/)" not in card and "with dagent GRPO" in card  # unknown: no link, no placeholder
    monkeypatch.setenv("DAGENT_PROJECT_URL", "git@github.com:me/dagent.git")
    assert provenance.project_url() == "https://github.com/me/dagent"
    assert provenance.project_url("git+https://github.com/o/dagent") == "https://github.com/o/dagent"
    monkeypatch.setenv("DAGENT_PROJECT_URL", "not a url")
    assert provenance.project_url() is None
