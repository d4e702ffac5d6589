"""The arguments both training jobs share, each reaching what uses it: a trackio Space on the
trainer's config (so a job's curves outlive its container), the project URL for model cards."""

from __future__ import annotations

import os

import pytest

from dagent.jobargs import parse
from dagent.train.blackbox.args import BlackboxArgs
from dagent.train.whitebox.grpo import WhiteboxArgs, grpo_config


def test_a_trackio_space_reaches_the_trainers_config(tmp_path):
    pytest.importorskip("trl")
    args = parse(WhiteboxArgs, ["--trackio-space", "me/curves"])
    config = grpo_config(args.recipe(), tmp_path, report_to="trackio", use_cpu=True, bf16=False, **args.trackio())
    assert config.trackio_space_id == "me/curves"
    offline = parse(WhiteboxArgs, [])
    assert (
        grpo_config(
            offline.recipe(), tmp_path, report_to="trackio", use_cpu=True, bf16=False, **offline.trackio()
        ).trackio_space_id
        is None
    )  # the offline store unless a Space is named
    assert parse(BlackboxArgs, ["--trackio-space", "me/c", "--report-to", "none"]).trackio() == {}


def test_the_project_url_reaches_the_cards(monkeypatch):
    monkeypatch.delenv("DAGENT_PROJECT_URL", raising=False)
    parse(BlackboxArgs, ["--project-url", "https://github.com/me/dagent"]).apply_project_url()
    assert os.environ["DAGENT_PROJECT_URL"] == "https://github.com/me/dagent"
