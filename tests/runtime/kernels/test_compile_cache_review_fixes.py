"""The compile cache's review fixes (kernels/compile_cache.py, kernels/aot.py, cli/compile_cache.py).

A shipped cache that was moved or copied is read from its own files (Triton's group index holds the
build's absolute paths); a damaged entry is a miss, compiled anew; a read-only folder is read while its
misses compile elsewhere; the folder key ignores torch's local build tag; relative roots are made
absolute; a user's TRITON_HOME / TRITON_CACHE_DIR wins and a folder we set follows a later engine's
device; --arch names a capability Triton compiles for, and a failed build leaves no folder it made.

The end-to-end builds compile for sm_90 through Triton's own JIT without a GPU (as tests/runtime/runner/
test_aot_build.py does), in subprocesses without TRITON_INTERPRET; "no compile" is seen as no file of the
cache rewritten (Triton writes every file of an entry it compiles anew, by os.replace: a new inode)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from model_optimizer.runtime.kernels import compile_cache
from model_optimizer.runtime.kernels.compile_cache import MANAGER, cache_key, cache_root, configure_compile
from tests.cli_errors import error_line

REPO = Path(__file__).resolve().parents[3]
FLAGS = ["--max-num-seqs", "1", "--max-model-len", "256", "--max-num-batched-tokens", "64", "--dtype", "bfloat16"]


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in (*compile_cache.CACHE_VARIABLES, "TRITON_HOME", "XDG_CACHE_HOME", compile_cache.CACHE_DIR_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(compile_cache.CACHE_DIR_ENV, str(tmp_path / "root"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "root"


# --- the manager: entries found where they lie (bugs 1 and 3) -----------------------------------------


def _put_entry(folder: Path, key: str = "K" * 52, name: str = "kern") -> dict[str, str]:
    """One entry as Triton's compile writes it (its FileCacheManager: the files, then the group index)."""
    from triton.runtime.cache import FileCacheManager

    os.environ["TRITON_CACHE_DIR"] = str(folder)
    try:
        manager = FileCacheManager(key)
        group = {
            f"{name}.json": manager.put(json.dumps({"name": name}), f"{name}.json", binary=False),
            f"{name}.cubin": manager.put(b"\x7fELF", f"{name}.cubin"),
        }
        manager.put_group(f"{name}.json", group)
    finally:
        del os.environ["TRITON_CACHE_DIR"]
    return group


def _group(folder: Path, key: str = "K" * 52, manager: str | None = MANAGER):
    """The entry's manager as Triton's compile makes it: the class TRITON_CACHE_MANAGER names (else Triton's
    FileCacheManager), for TRITON_CACHE_DIR `folder`."""
    saved = {k: os.environ.get(k) for k in ("TRITON_CACHE_DIR", "TRITON_CACHE_MANAGER")}
    os.environ["TRITON_CACHE_DIR"] = str(folder)
    os.environ.pop("TRITON_CACHE_MANAGER", None)
    if manager:
        os.environ["TRITON_CACHE_MANAGER"] = manager
    try:
        return _by_key(key)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _by_key(key: str):
    """What triton.runtime.cache.get_cache_manager makes, for an entry folder named `key` (it names the
    folder by a base32 hash of its key: tests name the folder directly)."""
    from triton import knobs
    from triton.runtime.cache import FileCacheManager

    return (knobs.cache.manager_class or FileCacheManager)(key)


def test_a_moved_cache_is_read_from_its_new_place(tmp_path, monkeypatch):
    pytest.importorskip("triton.runtime.cache")
    monkeypatch.delenv(compile_cache.READ_DIRS_ENV, raising=False)
    _put_entry(tmp_path / "A")
    shutil.move(tmp_path / "A", tmp_path / "B")
    stock = _group(tmp_path / "B", manager=None).get_group("kern.json")
    assert not (stock or {}).get("kern.json")  # Triton's own: the index names A's files, gone: a miss
    ours = _group(tmp_path / "B").get_group("kern.json")
    entry = tmp_path / "B" / ("K" * 52)
    assert ours == {"kern.json": str(entry / "kern.json"), "kern.cubin": str(entry / "kern.cubin")}


def test_a_copy_reads_its_own_files_not_the_originals(tmp_path, monkeypatch):
    pytest.importorskip("triton.runtime.cache")
    monkeypatch.delenv(compile_cache.READ_DIRS_ENV, raising=False)
    _put_entry(tmp_path / "A")
    shutil.copytree(tmp_path / "A", tmp_path / "copy")
    stock = _group(tmp_path / "copy", manager=None).get_group("kern.json")
    assert stock["kern.json"].startswith(str(tmp_path / "A"))  # the bug: the original's files, silently
    ours = _group(tmp_path / "copy").get_group("kern.json")
    assert all(p.startswith(str(tmp_path / "copy")) for p in ours.values())


@pytest.mark.parametrize("damaged", ["__grp__kern.json", "kern.json"])
def test_a_truncated_index_or_metadata_is_a_miss(tmp_path, monkeypatch, damaged):
    pytest.importorskip("triton.runtime.cache")
    monkeypatch.delenv(compile_cache.READ_DIRS_ENV, raising=False)
    _put_entry(tmp_path / "A")
    path = tmp_path / "A" / ("K" * 52) / damaged
    path.write_text(path.read_text()[:7])
    assert _group(tmp_path / "A").get_group("kern.json") is None


def test_a_missing_file_of_an_entry_is_a_miss(tmp_path, monkeypatch):
    pytest.importorskip("triton.runtime.cache")
    monkeypatch.delenv(compile_cache.READ_DIRS_ENV, raising=False)
    _put_entry(tmp_path / "A")
    (tmp_path / "A" / ("K" * 52) / "kern.cubin").unlink()
    assert _group(tmp_path / "A").get_group("kern.json") is None


def test_the_manager_module_loads_without_triton_until_triton_asks():
    """Importing compile_cache (before torch, at every engine start) imports no Triton; the class is made
    when Triton resolves TRITON_CACHE_MANAGER."""
    probe = (
        "import sys\nimport model_optimizer.runtime.kernels.compile_cache as c\n"
        "assert 'triton' not in sys.modules, 'triton imported'\n"
        "from triton.runtime.cache import FileCacheManager\n"
        "assert issubclass(c.RelocatableCacheManager, FileCacheManager)\n"
        "module, name = c.MANAGER.split(':')\n"
        "assert getattr(__import__(module, fromlist=[name]), name) is c.RelocatableCacheManager\n"
    )
    subprocess.run([sys.executable, "-c", probe], cwd=REPO, check=True, env={**os.environ, "PYTHONPATH": str(REPO)})


# --- a read-only folder (bug 2) ------------------------------------------------------------------------


def test_a_read_only_folder_is_read_and_its_misses_compile_into_a_writable_one(
    clean_env, tmp_path, monkeypatch, caplog
):
    """Tests run as root here (chmod changes nothing for root): the check goes through os.access, so the
    shipped folder is made unwritable to it."""
    pytest.importorskip("triton.runtime.cache")
    shipped = compile_cache.cache_folder(None)
    key = "K" * 52
    _put_entry(shipped, key)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: not str(p).startswith(str(clean_env)) and real_access(p, mode))
    with caplog.at_level(logging.WARNING, logger=compile_cache.__name__):
        chosen = configure_compile(SimpleNamespace(device="cpu"))
        configure_compile(SimpleNamespace(device="cpu"))
    fallback = tmp_path / "xdg" / "model-optimizer" / "compile" / cache_key(None) / "triton"
    assert chosen[compile_cache.TRITON_CACHE_ENV] == str(fallback) == os.environ["TRITON_CACHE_DIR"]
    assert os.environ[compile_cache.READ_DIRS_ENV] == str(shipped)
    assert len([r for r in caplog.records if "not writable" in r.getMessage()]) == 1  # one warning
    manager = _by_key(key)
    assert manager.get_group("kern.json")["kern.json"] == str(shipped / key / "kern.json")  # read from shipped
    assert manager.put(b"x", "new.bin").startswith(str(fallback))  # a miss compiles into the fallback
    assert manager.get_file("kern.cubin") == str(shipped / key / "kern.cubin")
    monkeypatch.setattr(os, "access", real_access)
    chosen = configure_compile(SimpleNamespace(device="cpu"))  # writable again: no read layer
    assert chosen[compile_cache.TRITON_CACHE_ENV] == str(shipped) and compile_cache.READ_DIRS_ENV not in os.environ


# --- the key, the roots and who owns the variable (bugs 4, 6, 7) ---------------------------------------


def test_the_key_ignores_torchs_local_build_tag(monkeypatch):
    versions = {"torch": "2.13.0+cpu", "triton": "3.6.0"}
    monkeypatch.setattr(compile_cache, "_version", lambda package: versions[package])
    cpu = cache_key("sm90")
    versions["torch"] = "2.13.0+cu128"
    assert cache_key("sm90") == cpu and "torch-2.13.0_" in cpu
    versions["torch"] = "2.14.0+cu128"
    assert cache_key("sm90") != cpu


def test_relative_roots_are_made_absolute(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(compile_cache.CACHE_DIR_ENV, "rel/root")
    assert cache_root() == tmp_path / "rel" / "root"
    monkeypatch.delenv(compile_cache.CACHE_DIR_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", "xdg")
    assert cache_root() == tmp_path / "xdg" / "model-optimizer" / "compile"


def test_a_relative_output_is_printed_absolute(monkeypatch, tmp_path, capsys):
    from model_optimizer.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["compile-cache", "path", "--output", "out/triton"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "out" / "triton")


def test_a_later_engine_repoints_a_folder_we_set(clean_env, monkeypatch):
    monkeypatch.setattr(compile_cache, "_gpu_arch", lambda device: {"cuda:0": "sm90", "cuda:1": "sm89"}.get(device))
    first = configure_compile(SimpleNamespace(device="cuda:0"))
    assert "_sm90-" in first["TRITON_CACHE_DIR"] and first["TRITON_CACHE_MANAGER"] == MANAGER
    second = configure_compile(SimpleNamespace(device="cuda:1"))
    assert "_sm89-" in second["TRITON_CACHE_DIR"] == os.environ["TRITON_CACHE_DIR"]
    assert os.environ[compile_cache.OWNED_ENV] == second["TRITON_CACHE_DIR"]  # a child process knows it too


def test_the_users_triton_cache_dir_home_and_manager_win(clean_env, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", "/users/own/triton")
    assert configure_compile(SimpleNamespace(device="cpu")) == {}
    assert os.environ["TRITON_CACHE_DIR"] == "/users/own/triton" and "TRITON_CACHE_MANAGER" not in os.environ
    monkeypatch.delenv("TRITON_CACHE_DIR")
    monkeypatch.setenv("TRITON_HOME", "/users/home")
    assert configure_compile(SimpleNamespace(device="cpu")) == {}
    assert "TRITON_CACHE_DIR" not in os.environ  # Triton uses $TRITON_HOME/.triton/cache
    monkeypatch.delenv("TRITON_HOME")
    configure_compile(SimpleNamespace(device="cpu"))
    monkeypatch.setenv("TRITON_HOME", "/users/home")  # set after an engine set ours: the user's wins now
    assert configure_compile(SimpleNamespace(device="cpu")) == {}
    assert not {*compile_cache.CACHE_VARIABLES} & set(os.environ)
    monkeypatch.delenv("TRITON_HOME")
    monkeypatch.setenv("TRITON_CACHE_MANAGER", "users.own:Manager")
    chosen = configure_compile(SimpleNamespace(device="cpu"))
    assert "TRITON_CACHE_MANAGER" not in chosen and os.environ["TRITON_CACHE_MANAGER"] == "users.own:Manager"


# --- --arch and a failed build (bug 5) -----------------------------------------------------------------


@pytest.mark.parametrize("arch", ["9.9", "1.0", "5.0", "7.0", "11.5"])
@pytest.mark.parametrize("action", ["build", "path"])
def test_an_arch_triton_cannot_compile_for_is_one_error(tmp_path, capsys, arch, action):
    from model_optimizer.assets import reference_model_path

    out = tmp_path / "c"
    argv = ["compile-cache", action, "--arch", arch, "--model", str(reference_model_path()), "--output", str(out)]
    line = error_line(argv, capsys)
    assert "--arch must be a compute capability such as 9.0 that Triton compiles for (8.0, " in line
    assert repr(arch) in line and not out.exists()


@pytest.mark.parametrize("exists", [False, True])
def test_a_failed_build_removes_the_new_folder_it_filled(tmp_path, capsys, monkeypatch, exists):
    from model_optimizer.assets import reference_model_path
    from model_optimizer.cli import compile_cache as cli

    def failing(config, target, folder, jobs):
        (folder / "ENTRY").mkdir()
        (folder / "ENTRY" / "kern.cubin").write_bytes(b"x")
        raise ValueError("ptxas failed")

    monkeypatch.setattr(cli, "_build", failing)
    out = tmp_path / "new" / "c"
    if exists:
        out.mkdir(parents=True)
    argv = ["compile-cache", "build", "--model", str(reference_model_path()), "--output", str(out), "--jobs", "1"]
    assert "ptxas failed" in error_line(argv, capsys)
    if exists:  # the user's folder is kept, with what was added
        assert (out / "ENTRY" / "kern.cubin").exists()
    else:
        assert not (tmp_path / "new").exists()


# --- end to end: a real build for sm_90 ------------------------------------------------------------------


def _mopt(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET" and k not in compile_cache.CACHE_VARIABLES}
    base["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "model_optimizer.cli.main", "compile-cache", *args],
        env=base | (env or {}),
        capture_output=True,
        text=True,
        timeout=900,
    )


def _files(folder: Path) -> dict[str, int]:
    """Each file of the cache (relative path) -> its inode: a file Triton writes anew gets a new one."""
    return {str(p.relative_to(folder)): p.stat().st_ino for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def moved(tmp_path_factory):
    """A build into A, moved to B (A gone): what an image build does with a cache it copies in."""
    pytest.importorskip("triton.backends.compiler")
    from tests.runtime.runner.test_aot_build import _config

    root = tmp_path_factory.mktemp("moved")
    model = _config(root / "model")
    first = _mopt("build", "--model", str(model), *FLAGS, "--output", str(root / "A"), "--jobs", "1")
    assert first.returncode == 0, first.stderr[-3000:]
    shutil.move(root / "A", root / "B")
    return model, root / "B"


def test_a_moved_build_is_all_hits(moved):
    model, folder = moved
    before = _files(folder)
    again = _mopt("build", "--model", str(model), *FLAGS, "--output", str(folder), "--jobs", "1")
    assert again.returncode == 0, again.stderr[-3000:]
    after = _files(folder)
    rewritten = [p for p, ino in before.items() if after.get(p) != ino and not p.endswith("aot_manifest.json")]
    assert not rewritten, rewritten[:5]  # nothing compiled again
    assert set(after) == set(before)


def test_a_read_only_shipped_folder_compiles_nothing_into_the_fallback(moved, tmp_path):
    """The shipped folder read through MOPT_TRITON_READ_DIRS, the build's own folder empty: every kernel is a
    hit there, and the fallback gets no entry file."""
    model, folder = moved
    fallback = tmp_path / "fallback"
    env = {compile_cache.READ_DIRS_ENV: str(folder)}
    result = _mopt("build", "--model", str(model), *FLAGS, "--output", str(fallback), "--jobs", "1", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [p for p in _files(fallback) if p != "aot_manifest.json"] == []


def test_a_damaged_entry_is_rebuilt_not_an_error(moved):
    model, folder = moved
    entries = sorted(p for p in folder.iterdir() if p.is_dir())
    index = next(entries[0].glob("__grp__*.json"))
    metadata = next(p for p in entries[1].glob("*.json") if not p.name.startswith("__grp__"))
    for path in (index, metadata):
        path.write_text(path.read_text()[:20])
    result = _mopt("build", "--model", str(model), *FLAGS, "--output", str(folder), "--jobs", "1")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    for path in (index, metadata):
        json.loads(path.read_text())  # compiled anew, whole


def test_a_truncated_cubin_is_compiled_anew_not_launched(moved):
    """An interrupted copy cut a binary short: the index the build wrote records its size, so the next
    build (as a start) takes the entry as a miss and writes the binary whole again."""
    model, folder = moved
    cubin = next(folder.glob("*/*.cubin"))
    whole = json.loads(next(cubin.parent.glob("__grp__*.json")).read_text())["sizes"][cubin.name]
    cubin.write_bytes(cubin.read_bytes()[: whole // 2])
    result = _mopt("build", "--model", str(model), *FLAGS, "--output", str(folder), "--jobs", "1")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert cubin.stat().st_size == whole
