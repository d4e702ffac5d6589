"""The HF sandbox image: the E2B template's recipe, published as a Docker Space whose image HF sandboxes run.

`huggingface_hub.Sandbox.create(image=...)` takes any Docker image, `hf.co/spaces/OWNER/NAME`
included (the image Hugging Face builds for a Docker Space). Its default `python:3.12` has no
pandas, so every reference program fails at its first import and a run reads as a weak model
(F51). This image is built from the SAME recipe as the E2B template (`e2b_template.template_spec`
and `template_builder`: the golds' Python, the table packages at the versions that built the golds,
huggingface_hub for staging, Node and opencode, `/workdir/input`), with two differences HF
sandboxes need: commands run as root (F20), so the recipe's user is root; and a Space must answer
on its port, so the image's default command serves an empty page on 7860 (a sandbox job replaces
that command with the sbx-server). `curl` is in the recipe so the sandbox job fetches its server
quickly.

    dagent sandbox image hf OWNER/data-agent-sandbox --dry-run   # the Dockerfile, offline
    dagent sandbox image hf OWNER/data-agent-sandbox             # creates/updates the Space
    DAGENT_SANDBOX_IMAGE=hf.co/spaces/OWNER/data-agent-sandbox   # what servers and jobs then use

Servers still play one task's oracle through the backend before serving (F51,
`dagent.harness.readiness.check_image`); tests/sandbox/test_hf_image.py builds this Dockerfile
with Docker and passes that check through `HFBackend` against a container of it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dagent.errors import ConfigError
from dagent.sandbox.e2b_template import E2BTemplateSpec, e2b_sdk, template_builder

__all__ = ["SPACE_PORT", "image_name", "publish_image", "sandbox_dockerfile", "space_card"]

SPACE_PORT = 7860
SHIPPED = "spaces/sandbox/Dockerfile"
HEADER = (
    "# The HF sandbox image: the E2B template's recipe (dagent.sandbox.e2b_template) run as root, as HF\n"
    "# sandboxes run commands. Generated; regenerate with\n"
    f"#   dagent sandbox image hf OWNER/NAME --dry-run > {SHIPPED}\n"
)


def image_name(repo_id: str) -> str:
    """What `DAGENT_SANDBOX_IMAGE` (or `HFBackend(image=...)`) names for a published image Space."""
    if repo_id.count("/") != 1:
        raise ConfigError(f"{repo_id!r} is not a Space id: give OWNER/NAME")
    return f"hf.co/spaces/{repo_id}"


def sandbox_dockerfile(spec: E2BTemplateSpec) -> str:
    """The recipe as the HF sandbox's Dockerfile (module docstring). It does not depend on the suite
    (an HF sandbox is sized by its flavour, not its image), so the repository ships it as
    `spaces/sandbox/Dockerfile` and a test holds that file to this function."""
    e2b = e2b_sdk()
    recipe = e2b.Template.to_dockerfile(template_builder(replace(spec, user="root")))
    return (
        HEADER
        + recipe
        + f"EXPOSE {SPACE_PORT}\n"
        + f'CMD ["python", "-m", "http.server", "{SPACE_PORT}", "--directory", "/workdir/input"]\n'
    )


def space_card(repo_id: str, spec: E2BTemplateSpec) -> str:
    return (
        f"---\ntitle: {repo_id.split('/')[1]}\nsdk: docker\napp_port: {SPACE_PORT}\npinned: false\n"
        "tags:\n- dagent\n- sandbox\n---\n\n"
        "# dagent sandbox image\n\n"
        "The image Hugging Face sandboxes run dagent's data-agent tasks in: "
        f"Python {spec.python}, {', '.join(spec.packages)}, {', '.join(spec.npm)}, `/workdir/input`.\n\n"
        f"Use it with `DAGENT_SANDBOX_IMAGE={image_name(repo_id)}` (or `HFBackend(image=...)`). "
        "This Space serves an empty page; its image is what matters.\n"
    )


def publish_image(repo_id: str, spec: E2BTemplateSpec, *, api: Any = None, private: bool = False) -> str:
    """Create or update the Docker Space holding the image's Dockerfile and card (one commit);
    Hugging Face builds the image. Returns the image name to select it by."""
    image = image_name(repo_id)
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    from huggingface_hub import CommitOperationAdd

    api.create_repo(repo_id, repo_type="space", space_sdk="docker", exist_ok=True, private=private)
    api.create_commit(
        repo_id,
        repo_type="space",
        commit_message="dagent sandbox image",
        operations=[
            CommitOperationAdd("Dockerfile", sandbox_dockerfile(spec).encode()),
            CommitOperationAdd("README.md", space_card(repo_id, spec).encode()),
        ],
    )
    return image
