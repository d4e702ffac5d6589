"""The E2B template as code (`dagent.sandbox.e2b_template`), rendered offline with the pinned e2b's
own builder (`e2b.Template.to_dockerfile`), and the E2B backend's template and egress policy.

NOT covered offline (needs E2B_API_KEY and network): `Template.build` on E2B's service (here it is
called with a stand-in that records its arguments), that Debian's nodejs runs the opencode
postinstall there, and that a sandbox made from the built template has a writable /workdir.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import re

import e2b
import pytest
from typer.testing import CliRunner

from dagent.cli.app import app
from dagent.core.suite import TaskSuite
from dagent.errors import ConfigError
from dagent.sandbox.base import Resources
from dagent.sandbox.e2b import E2BBackend
from dagent.sandbox.e2b_template import DEFAULT_TEMPLATE, build_template, render_template, template_spec
from dagent.sandbox.image import OPENCODE_VERSION, distributions_of, imported_modules, python_version
from tests.factories import make_task
from tests.sandbox.test_e2b import API_KEY, CREATE_SIG, e2b_api  # noqa: F401  (the fixture)


def version(name: str) -> str:
    return importlib.metadata.version(name)


def sized_suite(tables_root, *sizes):
    tasks = [make_task(i, cpus=c, memory_mb=m) for i, (c, m) in enumerate(sizes)]
    return TaskSuite(splits={"train": tasks}, tables_root=tables_root)


def test_the_rendered_template_holds_every_requirement(tmp_path):
    spec = template_spec(sized_suite(tmp_path, (1, 1024), (4, 8192)))
    text = render_template(spec)
    assert f"FROM python:{python_version()}\n" in text  # the interpreter the golds were measured with
    pip = re.search(r"^RUN pip install (.+)$", text, re.M).group(1).split()
    assert pip == [
        f"pandas=={version('pandas')}",
        f"numpy=={version('numpy')}",
        f"pyarrow=={version('pyarrow')}",
        f"huggingface_hub=={version('huggingface_hub')}",
    ]
    assert "apt-get install -y --no-install-recommends curl nodejs npm" in text
    assert f"RUN npm install -g opencode-ai@{OPENCODE_VERSION}\n" in text
    assert "RUN mkdir -p /workdir/input\n" in text and "RUN chown -R user:user /workdir\n" in text
    assert text.index("chown -R user:user /workdir") < text.index("USER user\n")  # as root, before
    assert text.rstrip().endswith("USER user\nWORKDIR /workdir")
    assert (spec.cpus, spec.memory_mb) == (4, 8192)  # the largest task's measured size
    assert "4 cpu / 8192 MB" in text.splitlines()[0]


def test_size_has_e2bs_floor_and_refuses_less_than_the_largest_task(tmp_path):
    small = template_spec(sized_suite(tmp_path, (1, 1024)))
    assert (small.cpus, small.memory_mb) == (2, 2048)
    assert template_spec(sized_suite(tmp_path, (1, 1024)), cpus=8, memory_mb=16384).cpus == 8
    with pytest.raises(ConfigError, match=r"largest task \(2 cpu / 4096 MB"):
        template_spec(sized_suite(tmp_path, (2, 4096)), memory_mb=2048)


@pytest.mark.slow
def test_every_module_the_reference_programs_import_is_in_the_template(built):
    from dagent.suites.sources import load_tasks

    suite = load_tasks(built[0])
    modules = imported_modules(t.solution for base in suite.bases for t in suite.tasks(base))
    assert {"pandas"} <= modules  # the programs were read
    packages = {p.split("==")[0].lower().replace("_", "-") for p in template_spec(suite).packages}
    provided = distributions_of(modules)
    missing = {m: d for m, d in provided.items() if not {x.replace("_", "-") for x in d} & packages}
    assert not missing, f"imported by reference programs but not in the template: {missing}"


def test_cli_dry_run_prints_the_template_offline(suite_dir, monkeypatch):
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    r = CliRunner().invoke(
        app, ["sandbox", "template", "e2b", "--alias", "my-tpl", "--dry-run", "--suite", str(suite_dir)]
    )
    assert r.exit_code == 0, r.output
    assert "E2B template 'my-tpl': 2 cpu / 2048 MB" in r.output and "FROM python:" in r.output


def test_build_calls_the_sdk_with_alias_size_and_key(monkeypatch, tmp_path):
    calls = []
    signature = inspect.signature(e2b.Template.build)
    monkeypatch.setattr(
        e2b.Template,
        "build",
        staticmethod(lambda *a, **kw: (signature.bind(*a, **kw), calls.append(kw), "tpl-123")[-1]),
    )
    spec = template_spec(sized_suite(tmp_path, (2, 4096)), alias="dagent-x")
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="E2B_API_KEY"):
        build_template(spec)
    assert build_template(spec, api_key=API_KEY) == "tpl-123"
    (kw,) = calls
    assert (kw["alias"], kw["cpu_count"], kw["memory_mb"], kw["api_key"]) == ("dagent-x", 2, 4096, API_KEY)


def test_backend_defaults_to_dagents_template_and_refuses_base(e2b_api):  # noqa: F811
    E2BBackend().create(Resources(timeout_s=30))
    assert e2b_api["creates"][-1]["template"] == DEFAULT_TEMPLATE
    with pytest.raises(ConfigError, match="dagent sandbox template e2b"):
        E2BBackend("base")
    E2BBackend("base", allow_base_template=True)  # an explicit choice still works


def test_sandboxes_start_without_internet_or_with_only_the_allowed_hosts(e2b_api):  # noqa: F811
    E2BBackend().create(Resources(timeout_s=30))
    closed = e2b_api["creates"][-1]
    assert closed["allow_internet_access"] is False and "network" not in closed
    E2BBackend(allow_out=["capture.example.org", "s3.example.org"]).create(Resources(timeout_s=30))
    allowed = e2b_api["creates"][-1]
    assert allowed["network"] == {"allow_out": ["capture.example.org", "s3.example.org"], "deny_out": ["0.0.0.0/0"]}
    assert "allow_internet_access" not in allowed
    CREATE_SIG.bind(**allowed)  # the SDK's own keywords
    assert "egress only to capture.example.org" in E2BBackend(allow_out=["capture.example.org"]).describe()


def test_the_black_box_environment_lets_e2b_sandboxes_reach_only_its_capture_url(e2b_api, suite):  # noqa: F811
    from dagent.capture.reach import allow_egress
    from dagent.runtime.blackbox import BlackBoxRuntime

    runtime = BlackBoxRuntime(
        suite, "http://127.0.0.1:1", backend="e2b", public_url="https://capture.example.org:8443/v1"
    )
    backend = runtime._make_backend("/unused")
    assert backend.template == DEFAULT_TEMPLATE and backend.allow_out == ()  # decided once the URL is resolved (F45)
    allow_egress(backend, "https://capture.example.org:8443/v1")  # what start() does after publishing
    assert backend.allow_out == ("capture.example.org",)
