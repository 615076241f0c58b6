"""A Hugging Face model id (`Qwen/Qwen2-7B`) that is not a catalog alias -> its `config.json`.

Looked up first in the local Hugging Face cache, read directly (no network, no `huggingface_hub`
needed), at the folder layout `huggingface_hub` writes: `<cache>/models--<org>--<name>/snapshots/<commit>/
config.json`, the commit that `refs/main` names when there is one, else the newest snapshot. The cache is
`HF_HUB_CACHE`, else `HF_HOME/hub`, else `XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`
(huggingface_hub's own order). When the cache has no copy and `huggingface_hub` is installed (extra `hf`),
`hf_hub_download` fetches the file, which honours `HF_HUB_OFFLINE` and its timeouts; any failure is one
sentence saying where madmax looked.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from madmax.errors import ConfigError

# A repository id: a namespace and a name of letters, digits, '-', '_', '.' (huggingface_hub's
# validate_repo_id allows 96 characters each). Bare names (legacy 'gpt2') are left to the catalog's
# "did you mean" error: a typo of a catalog name should not reach the network.
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}")


def is_repo_id(text: str) -> bool:
    """Whether `text` has the form of a Hugging Face repository id, 'org/name'."""
    return _REPO_ID.fullmatch(text) is not None and ".." not in text and not text.endswith((".", "-"))


def cache_dir() -> Path:
    """The Hugging Face hub cache folder, from the environment as huggingface_hub reads it."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg).expanduser() / "huggingface" / "hub"


def cached_config(repo_id: str) -> Path | None:
    """The cached `config.json` of `repo_id` (the snapshot refs/main names, else the newest), or None."""
    repo = cache_dir() / ("models--" + repo_id.replace("/", "--"))
    try:
        main = (repo / "refs" / "main").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        main = ""
    try:
        if main and (repo / "snapshots" / main / "config.json").is_file():
            return repo / "snapshots" / main / "config.json"
        found = [p for p in (repo / "snapshots").glob("*/config.json") if p.is_file()]
    except OSError:
        return None
    return max(found, key=lambda p: p.stat().st_mtime, default=None)


def _download(repo_id: str) -> tuple[Path | None, str]:
    """config.json fetched with huggingface_hub, or None and why not."""
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        return None, "huggingface_hub is not installed to download it (extra hf)"
    try:
        return Path(hf_hub_download(repo_id=repo_id, filename="config.json")), ""
    except Exception as exc:  # offline, gated, missing repository, network: all one sentence
        return None, f"downloading it failed ({exc.__class__.__name__})"


def config_path(repo_id: str) -> Path:
    """The `config.json` of Hugging Face model `repo_id`: from the local cache, else downloaded; a
    ConfigError saying where it looked otherwise."""
    cached = cached_config(repo_id)
    if cached is not None:
        return cached
    downloaded, why = _download(repo_id)
    if downloaded is not None:
        return downloaded
    where = cache_dir() / ("models--" + repo_id.replace("/", "--")) / "snapshots" / "*" / "config.json"
    raise ConfigError(
        f"model {repo_id!r} is not a catalog name and its Hugging Face config is not in the local cache "
        f"({where}) and {why}; allowed: a catalog name (`madmax catalog list models`), a config.json path, "
        f"or `huggingface-cli download {repo_id} config.json` first"
    )
