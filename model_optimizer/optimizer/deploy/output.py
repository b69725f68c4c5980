"""The output folder of `mopt deploy`: which folders the files may go to, and writing a render there without
touching a file that deploy did not write.

A render lists the files it writes in MANIFEST. It goes into a folder that is new or empty, or that holds a
manifest: then the previous render's files are replaced (those this render no longer writes are removed)
and every other file, the user's own (a Compose .env, extra k8s/*.yaml), stays. A folder that holds files
but no manifest, or a path this render writes that the previous one did not (the user's own Dockerfile),
is refused before anything is written.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

MANIFEST = ".mopt-deploy-files.json"
"""The files of the folder's last render (relative paths): the files deploy may replace or remove there."""
SOURCE = "src"
"""The copy of our package source the image installs (a folder, replaced whole)."""
SOURCE_PARTS = ("pyproject.toml", "README.md", "model_optimizer")
"""What of the source checkout goes into SOURCE."""
SOURCE_SKIP = ("__pycache__", "*.pyc", "*.safetensors", "*.egg-info")
"""Left out of the source copied into the image: caches and weights (models are mounted, never baked in)."""


def project_root() -> Path:
    """The source checkout the image installs our package from."""
    root = Path(__file__).resolve().parents[3]
    if not (root / "pyproject.toml").is_file():
        raise ValueError(
            f"mopt deploy builds the image from the project source, and {root} has no pyproject.toml; "
            "run it from a source checkout of model-optimizer"
        )
    return root


def check_output(output: str, model_dir: Path, with_source: bool) -> None:
    """ValueError for an output folder the files must not go to: empty (the current folder), a file, under
    a file, the model folder or inside it (README.md would replace the model card), or, when the package
    source is copied, inside the source it copies (the copy would copy itself)."""
    from model_optimizer.common.fileio import check_writable_folder_path

    check_writable_folder_path(output, "--output")
    out, model = Path(output).expanduser().resolve(), model_dir.resolve()
    if out == model or model in out.parents:
        where = "is the model folder" if out == model else f"is inside the model folder {model}"
        raise ValueError(f"--output {output} {where}; give a folder of its own (README.md would replace the model's)")
    if not with_source:
        return
    root = project_root()
    for part in (root / name for name in SOURCE_PARTS):
        if out == part or part in out.parents:
            raise ValueError(
                f"--output {output} is inside {part}, which the image's copy of the source ({SOURCE}/) is made "
                "from; give a folder outside it"
            )


def write(files: dict[str, str], output: str | Path, with_source: bool) -> list[Path]:
    """Write each file atomically, plus the package source under SOURCE when the image installs our
    server, and list them in MANIFEST. Returns the paths written. ValueError, before anything is written,
    for a folder or path that holds what deploy did not write (see the module docstring)."""
    out = Path(output).expanduser()
    rendered = sorted(files) + ([SOURCE] if with_source else [])
    previous = _previous_render(out)
    _check_conflicts(out, rendered, previous)
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        # listed before they are written: a render that fails part way leaves only files the next replaces
        _write_manifest(out, sorted(previous | set(rendered)))
        _remove_stale(out, previous - set(rendered))
        for rel in files:
            _make_folders(out, rel)
        written = [_write_file(out / rel, text) for rel, text in files.items()]
        if with_source:
            written.append(_copy_source(out))
        _write_manifest(out, rendered)
    except BaseException:
        if created:  # a folder this call made holds nothing of the user's
            shutil.rmtree(out, ignore_errors=True)
        raise
    return written


def _previous_render(out: Path) -> set[str]:
    """The files the folder's last render wrote, from its MANIFEST; none for a new or empty folder.
    ValueError for a folder that holds files but no manifest: they are not deploy's to replace."""
    manifest = out / MANIFEST
    if manifest.is_file():
        try:
            listed = json.loads(manifest.read_text())
        except ValueError:
            listed = None
        if not isinstance(listed, list) or not all(isinstance(rel, str) for rel in listed):
            raise ValueError(
                f"{manifest} is not the list of files mopt deploy writes; remove it or give another folder"
            )
        return set(listed)
    held = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if held:
        shown = ", ".join(held[:4]) + (f" and {len(held) - 4} more" if len(held) > 4 else "")
        raise ValueError(
            f"--output {out} holds files mopt deploy did not write ({shown}); give a new or empty folder "
            f"(a folder deploy wrote lists its files in {MANIFEST}, and only those are replaced)"
        )
    return set()


def _check_conflicts(out: Path, rendered: list[str], previous: set[str]) -> None:
    """ValueError naming the first path this render would have to replace that the last render did not
    write (a file or folder of the user's where a file, or a folder of ours, goes), or that is a symlink:
    a file is written through a link (fileio.atomic_write), so a link in the folder would have a render
    overwrite whatever file it points to, the user's own."""
    for rel in [*rendered, MANIFEST]:
        path = out / rel
        if path.is_symlink():
            raise ValueError(
                f"--output {out}: {path} is a symlink (to {os.readlink(path)}), and mopt deploy would write "
                f"{rel} through it into the file it points to; remove the link or give another folder"
            )
    for rel in rendered:
        path = out / rel
        for parent in reversed(Path(rel).parents[:-1]):  # the folders `rel` goes into, outermost first
            folder = out / parent
            if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
                raise ValueError(
                    f"--output {out}: {folder} is not a folder, and mopt deploy writes {rel} into it; "
                    "move it away or give another folder"
                )
        if not (path.exists() or path.is_symlink()):
            continue
        if rel not in previous:
            raise ValueError(
                f"--output {out}: {path} was not written by mopt deploy, which would replace it; "
                "move it away or give another folder"
            )
        if path.is_dir() != (rel == SOURCE):
            found, wanted = ("a folder", "a file") if path.is_dir() else ("a file", "a folder")
            raise ValueError(
                f"--output {out}: {path} is {found} where mopt deploy writes {wanted}; move it away or give "
                "another folder"
            )


def _make_folders(out: Path, rel: str) -> None:
    """Create the folders `rel` goes into under `out`, each mode 0755 whatever the umask: the non-root
    Prometheus and Grafana containers read prometheus/ and grafana/ through their bind mounts (under umask
    027 they were drwxr-x---, unreadable to them), as the image's user reads what COPY brings in."""
    for parent in reversed(Path(rel).parents[:-1]):  # outermost first
        folder = out / parent
        if not folder.is_dir():
            folder.mkdir()
            os.chmod(folder, 0o755)


def _write_file(path: Path, text: str) -> Path:
    """`text` into `path` in one step (fileio.atomic_write), mode 0644 so the image's non-root user can read
    what COPY brings in."""
    from model_optimizer.common.fileio import atomic_write

    try:
        atomic_write(path, text, mode=0o644)
    except OSError as exc:  # a write error names no file (a full disk): say which
        raise OSError(exc.errno, f"writing {path}: {exc.strerror}") from None
    return path


def _remove_stale(out: Path, stale: set[str]) -> None:
    """Remove the previous render's files that this one does not write, then the folders that left empty."""
    for rel in sorted(stale):
        path = out / rel
        if out.resolve() not in path.resolve().parents:  # never outside the folder (a hand-edited manifest)
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        for parent in path.parents:
            if parent == out or not parent.is_dir() or any(parent.iterdir()):
                break
            parent.rmdir()


def _write_manifest(out: Path, rel_paths: list[str]) -> None:
    from model_optimizer.common.fileio import atomic_write

    atomic_write(out / MANIFEST, json.dumps(rel_paths, indent=1))


def _copy_source(out: Path) -> Path:
    """SOURCE: pyproject.toml, README.md and the package, swapped in whole for any older copy."""
    root = project_root()
    staging = Path(tempfile.mkdtemp(dir=out, prefix=f".{SOURCE}."))
    try:
        for name in SOURCE_PARTS:
            if (root / name).is_dir():
                shutil.copytree(root / name, staging / name, ignore=shutil.ignore_patterns(*SOURCE_SKIP))
            else:
                shutil.copy2(root / name, staging / name)
        os.chmod(staging, 0o755)
        target = out / SOURCE
        if target.exists():
            old = out / f".{SOURCE}.old.{os.getpid()}"
            os.replace(target, old)
            os.replace(staging, target)
            shutil.rmtree(old)
        else:
            os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target
