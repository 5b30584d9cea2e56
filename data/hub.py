"""A local directory or a Hugging Face Hub repo id: the one rule every loader follows (Qwen3 weights and the
released checkpoints in pretrained.py, the Qwen3 and BERT tokenizers in data/qwen.py and data/text.py).

An existing directory is used as it is. Otherwise a name of the form "org/name" (one slash, not starting with
/ . or ~) is a repo id, fetched with huggingface_hub (HF_TOKEN, HF_HOME and HF_HUB_OFFLINE apply; offline, the
cache answers); anything else is a missing local path. huggingface_hub is imported only for a download.
"""
import os


def is_hub_id(name: str) -> bool:
    """Whether name reads as a Hub repo id ("org/name") rather than a local path."""
    return not name.startswith(("/", ".", "~")) and name.count("/") == 1


def hub_dir(name_or_path: str, allow_patterns: list) -> str:
    """A local directory as it is, else the snapshot directory of a Hub repo id holding (at least) the files
    that match allow_patterns. Errors are one line (FileNotFoundError) naming the id."""
    path = os.path.expanduser(name_or_path)
    if os.path.isdir(path):
        return path
    if os.path.lexists(path):                    # a file, or a link that leads to no folder (a loop)
        what = "a link to none" if os.path.islink(path) else "a file"
        raise FileNotFoundError(f"{name_or_path}: not a directory ({what}): give a model's folder or a "
                                f"Hugging Face repo id (org/name)")
    if not is_hub_id(name_or_path):
        raise FileNotFoundError(f"{name_or_path}: no such directory, and not a Hugging Face "
                                f"repo id (org/name)")
    from huggingface_hub import snapshot_download
    try:
        return snapshot_download(repo_id=name_or_path, allow_patterns=allow_patterns)
    except Exception as e:   # offline and not cached, no network, unknown or gated repo, ...
        raise FileNotFoundError(f"{name_or_path}: no such local directory, and downloading it from the "
                                f"Hugging Face Hub failed ({type(e).__name__}): check the id, set "
                                f"HF_HUB_OFFLINE=0 and check the network (HF_TOKEN for a gated repo), or "
                                f"pass a local directory") from None
