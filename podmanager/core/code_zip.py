"""A run's code: the working dir packed once, where the user runs podmanager, into one zip
named by its content's SHA-256. The controller keeps that zip (`package.py`) and the hosts get
its bytes: nothing else in podmanager zips user code, and nothing here imports Ray (the
laptop's client packs with it).

What is shipped, the one rule:
- every file of the folder, but what a `.gitignore` or `.rayignore` in it or below leaves out;
- never version control, caches (`EXCLUDED_NAMES`) or a Python environment, whatever its
  folder is called (it holds `pyvenv.cfg` or `conda-meta/`);
- never podmanager's home or the simulated cloud's folder (the state store, the Ray token,
  the runs' secrets), nor any file or folder inside them;
- a link is shipped as what it points to (a file's content, a folder's files, under the
  link's own name) when that is inside the folder; a link leading outside the folder, one
  that points to nothing, and a folder link back into a folder it sits in (`self -> .`) are
  skipped, with a warning naming them. So packing never leaves the folder and never loops.
Files that look like credentials (`CREDENTIAL_NAMES`) are shipped all the same (a program
may need its `.env`), with a warning naming them: .gitignore them to keep them here.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import logging
import os
import shutil
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pathspec

from podmanager.core import paths
from podmanager.core.errors import SpecError

log = logging.getLogger(__name__)

IGNORE_FILES = (".gitignore", ".rayignore")
# Never shipped, by name: version control and caches (environments are found by what they hold).
EXCLUDED_NAMES = (".git", ".hg", ".svn", ".venv", "venv", "__pycache__", "node_modules", ".pytest_cache",
                  ".mypy_cache", ".ruff_cache", "*.egg-info", ".ipynb_checkpoints")
# Shipped, but named in a warning: the usual homes of keys, tokens and passwords.
CREDENTIAL_NAMES = (".env", ".env.*", "*.env", ".netrc", "_netrc", ".pgpass", ".pypirc", ".npmrc",
                    ".git-credentials", "credentials", "credentials*", "secrets.json", "secrets.y*ml",
                    "*key*.json", "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore", "id_rsa*",
                    "id_dsa*", "id_ecdsa*", "id_ed25519*", "kubeconfig")
MAX_ZIP_BYTES = 64 << 20  # what is sent to every host with each run
# Every host unpacks the whole folder: a folder that compresses well (zeros, logs) is held to
# its size on disk too, four times the zip's limit, as source code compresses.
MAX_UNPACKED_BYTES = 256 << 20
LARGE_FILE_BYTES = 10 << 20  # a file this big shipped with every run is worth a word
_BIGGEST_NAMED = 5
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # every entry's: the zip's bytes depend on the files alone
_FIX = ("Point --working-dir at the folder with your code only, or list data and checkpoints in "
        ".gitignore (or .rayignore); keep them in a bucket.")


@dataclass(frozen=True)
class PackedCode:
    """A working dir as one zip, as the controller keeps it and the hosts unpack it."""

    data: bytes = field(repr=False)
    digest: str  # SHA-256 of `data`, hex: its name wherever it is kept
    files: frozenset[str]  # the shipped files' names, relative, with /

    @classmethod
    def of(cls, data: bytes, files: frozenset[str]) -> "PackedCode":
        return cls(data, hashlib.sha256(data).hexdigest(), files)


@dataclass(frozen=True)
class Shipped:
    """What packing a folder takes and leaves: each shipped file (its name in the zip and the
    file it is read from) and each skipped link (its name, and why)."""

    files: list[tuple[str, Path]]
    skipped_links: list[tuple[str, str]]


def pack(folder: str | Path) -> PackedCode:
    """The working dir's shipped files as one zip. SpecError (exit 2) naming `--working-dir`
    for a missing folder, one inside podmanager's home, or one larger than the hosts are sent
    (unpacked or zipped), before anything is read into the zip."""
    root = Path(folder).resolve()
    if not root.is_dir():
        raise SpecError(f"--working-dir: {root} is not a directory")
    for private in _private_folders():
        if root == private or private in root.parents:
            raise SpecError(f"--working-dir: {root} is inside podmanager's folder {private} (its state, tokens and "
                            "the runs' secrets), which is never shipped",
                            hint="Run podmanager from your project's folder, or pass --working-dir to it.")
    shipped = shipped_files(root)
    sizes = {name: path.stat().st_size for name, path in shipped.files}
    _check_unpacked_size(root, sizes)
    _warn(root, shipped, sizes)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, path in shipped.files:
            entry = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
            entry.compress_type = zipfile.ZIP_DEFLATED
            executable = path.stat().st_mode & stat.S_IXUSR
            entry.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
            with path.open("rb") as source, archive.open(entry, "w") as target:
                shutil.copyfileobj(source, target)
            if buffer.tell() > MAX_ZIP_BYTES:
                raise SpecError(f"--working-dir: {root} packs to more than the {MAX_ZIP_BYTES >> 20} MiB zipped "
                                f"that is sent to every host{_biggest(sizes)}", hint=_FIX)
    return PackedCode.of(buffer.getvalue(), frozenset(sizes))


def received(data: bytes) -> PackedCode:
    """A zip packed elsewhere (sent over the channel), checked before it is kept: readable,
    every name inside its folder, within the sizes `pack` allows. SpecError (exit 2) if not."""
    if len(data) > MAX_ZIP_BYTES:
        raise SpecError(f"--working-dir: the code's zip is {len(data) >> 20} MiB, more than the "
                        f"{MAX_ZIP_BYTES >> 20} MiB sent to every host", hint=_FIX)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            entries = [entry for entry in archive.infolist() if not entry.is_dir()]
    except zipfile.BadZipFile:
        raise SpecError("--working-dir: the controller received no readable zip of the working dir") from None
    for entry in entries:  # nothing may land outside the folder it is unpacked into
        name = PurePosixPath(entry.filename)
        if name.is_absolute() or ".." in name.parts or "\\" in entry.filename:
            raise SpecError(f"--working-dir: the code's zip holds {entry.filename!r}, outside its folder")
    unpacked = sum(entry.file_size for entry in entries)
    if unpacked > MAX_UNPACKED_BYTES:
        raise SpecError(f"--working-dir: the code's zip unpacks to {unpacked >> 20} MiB, more than the "
                        f"{MAX_UNPACKED_BYTES >> 20} MiB unpacked on every host", hint=_FIX)
    return PackedCode.of(data, frozenset(entry.filename for entry in entries))


def shipped_files(root: Path) -> Shipped:
    """Every file of `root` (resolved) that is shipped, by the rule above, in a stable order."""
    files: list[tuple[str, Path]] = []
    skipped: list[tuple[str, str]] = []
    private = _private_folders()

    def walk(folder: Path, prefix: str, rules: list[tuple[str, pathspec.GitIgnoreSpec]],
             walking: frozenset[Path]) -> None:
        lines = [line for name in IGNORE_FILES if (folder / name).is_file()
                 for line in (folder / name).read_text(errors="replace").splitlines()]
        if lines:
            rules = [*rules, (prefix, pathspec.GitIgnoreSpec.from_lines(lines))]
        with os.scandir(folder) as listing:
            entries = sorted(listing, key=lambda e: e.name)
        for entry in entries:
            name = prefix + entry.name
            if _excluded_name(entry.name):
                continue
            real = Path(os.path.realpath(entry.path))
            if entry.is_symlink():
                if real != root and root not in real.parents:
                    skipped.append((name, f"leads outside the folder, to {real}"))
                    continue
                if not real.exists():
                    skipped.append((name, "points to nothing"))
                    continue
            if real in private or any(p in real.parents for p in private):
                continue
            if real.is_dir():
                if _is_environment(real) or _ignored(name, rules, is_dir=True):
                    continue
                if real in walking:
                    skipped.append((name, f"leads back into {real}, a folder it is in"))
                    continue
                walk(real, name + "/", rules, walking | {real})
            elif real.is_file() and not _ignored(name, rules, is_dir=False):
                files.append((name, real))

    walk(root, "", [], frozenset({root}))
    return Shipped(files, skipped)


def looks_like_credentials(name: str) -> bool:
    """True for a file name that usually holds a key, a token or a password."""
    base = PurePosixPath(name).name
    return any(fnmatch.fnmatch(base.lower(), pattern) for pattern in CREDENTIAL_NAMES)


def _private_folders() -> set[Path]:
    """podmanager's own folders: never shipped, whatever links lead there."""
    return {paths.home().resolve(), paths.sim_home().resolve()}


def _excluded_name(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in EXCLUDED_NAMES)


def _is_environment(folder: Path) -> bool:
    """A Python environment, whatever its folder is called: a virtualenv or a conda one."""
    return (folder / "pyvenv.cfg").is_file() or (folder / "conda-meta").is_dir()


def _ignored(name: str, rules: list[tuple[str, pathspec.GitIgnoreSpec]], *, is_dir: bool) -> bool:
    """Whether an ignore file above `name` (a path relative to the root) leaves it out; each
    file's patterns are relative to its own folder, as git reads them."""
    for prefix, spec in rules:
        if name.startswith(prefix) and spec.match_file(name[len(prefix):] + ("/" if is_dir else "")):
            return True
    return False


def _check_unpacked_size(root: Path, sizes: dict[str, int]) -> None:
    total = sum(sizes.values())
    if total > MAX_UNPACKED_BYTES:
        raise SpecError(f"--working-dir: {root} holds {total >> 20} MiB to ship, more than the "
                        f"{MAX_UNPACKED_BYTES >> 20} MiB unpacked on every host{_biggest(sizes)}", hint=_FIX)


def _biggest(sizes: dict[str, int]) -> str:
    biggest = sorted(sizes.items(), key=lambda item: (-item[1], item[0]))[:_BIGGEST_NAMED]
    return "; the biggest: " + ", ".join(f"{name} ({_size(size)})" for name, size in biggest) if biggest else ""


def _size(size: int) -> str:
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB" if size >= 1 << 10 else f"{size} B"


def _warn(root: Path, shipped: Shipped, sizes: dict[str, int]) -> None:
    """What the user should know about what goes to every host, in podmanager's terms."""
    for name, why in shipped.skipped_links:
        log.warning("%s/%s is a link that is not shipped: it %s", root, name, why)
    secrets = [name for name in sizes if looks_like_credentials(name)]
    if secrets:
        log.warning("%s look(s) like credentials and go(es) to every host with each run: if the program does not "
                    "need them, list them in %s/.gitignore", ", ".join(secrets), root)
    for name, size in sizes.items():
        if size >= LARGE_FILE_BYTES:
            log.warning("%s is %d MiB and goes to every host with each run: if the program does not need it, "
                        "list it in %s/.gitignore (or .rayignore)", name, size >> 20, root)
