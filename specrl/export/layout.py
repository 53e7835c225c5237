"""What a policy folder holds and the checks its writer and reader share: file names, the format
version, checksums, and :class:`PolicyError` (the action's layout: :mod:`specrl.action_layout`)."""

from __future__ import annotations

from pathlib import Path

from specrl.home import user_policies_dir

FORMAT_NAME = "specrl-policy"
#: Version of the folder layout and metadata schema; the loader refuses others. Version 1 held a
#: TorchScript ``policy.pt``; version 2 holds a ``torch.export`` program ``policy.pt2``.
FORMAT_VERSION = 2
POLICY_FILE = "policy.pt2"
ONNX_FILE = "policy.onnx"
METADATA_FILE = "metadata.json"
SB3_MODEL_FILE = "sb3_model.zip"
VECNORMALIZE_FILE = "vecnormalize.pkl"


#: The policies shipped as package data (``specrl/policies/<name>/``): ``LearnedController.load("default")``
#: reads ``default`` here unless the user exported a policy of that name (:func:`policy_folder`).
SHIPPED_POLICY_DIR = Path(__file__).resolve().parents[1] / "policies"
#: Where they lived before they became package data: ``policies/default`` still names the shipped one.
LEGACY_POLICY_FOLDER = "policies"


def policies_in(folder: Path) -> list[str]:
    """Names of the policy folders in ``folder`` (none when it does not exist)."""
    return (
        sorted(p.name for p in folder.iterdir() if (p / METADATA_FILE).is_file()) if folder.is_dir() else []
    )


def shipped_policies() -> list[str]:
    """Names of the policy folders shipped in the package."""
    return policies_in(SHIPPED_POLICY_DIR)


def user_policies() -> list[str]:
    """Names of the policies the user exported (``specrl train --export-as NAME``)."""
    return policies_in(user_policies_dir())


def policy_folder(name: str | Path) -> Path:
    """The folder a policy name stands for: an existing folder as given; else a bare name such as
    "default" is the user's exported policy of that name (``$SPECRL_HOME/policies/<name>``), then
    the shipped one (from any working directory); "policies/<name>", the path the shipped ones had
    in the repository, names the shipped one. Anything else comes back as given, for the reader's
    "does not exist" error (which lists the known names)."""
    path = Path(name).expanduser()
    if path.is_dir() or path.is_absolute():
        return path
    candidates = []
    if len(path.parts) == 1:
        candidates.append(user_policies_dir() / path.name)
    if len(path.parts) == 1 or (len(path.parts) == 2 and path.parts[0] == LEGACY_POLICY_FOLDER):
        candidates.append(SHIPPED_POLICY_DIR / path.name)
    for folder in candidates:
        if (folder / METADATA_FILE).is_file():
            return folder
    return path


class PolicyError(ValueError):
    """A policy folder cannot be written, read or trusted; the message names the file and the fix."""
