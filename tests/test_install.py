"""The install the docs show works as written.

The fast tests read the pages: every guide and recipe names its install in its first line,
every extra a page names exists, no page installs detsamplers from a registry (it is not on
one), and the Makefile installs the package alone for ``make demo``.

The slow test (marker ``install``) runs the commands themselves, taken from the pages so
that they cannot drift: docs/getting-started.md's blocks marked ``<!-- install-test: NAME
-->`` in a copy of the clone each (fresh venvs, from the package registry with the user's pip
cache, as a user's pip would), then each page's install line in the clone's venv and the page's
first runnable example in that venv, from a folder outside the clone. The two blocks' halves
are independent and wait mostly on pip, so they run at once, in two threads.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from setuptools.config.pyprojecttoml import load_file

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
GETTING_STARTED = DOCS / "getting-started.md"
# The pages a user follows on their own, each opening with an install line.
GUIDES = [
    "webdataset.md",
    "testing.md",
    "cli.md",
    "mixing.md",
    "growth.md",
    "preemption.md",
    "porting.md",
]
# The recipes' frameworks are installed (the `integrations` extra) and trained under by
# tests/frameworks/; the slow test here leaves them out (transformers alone takes minutes).
RECIPES = [
    "recipes/torchrun.md",
    "recipes/dcp.md",
    "recipes/lightning.md",
    "recipes/accelerate.md",
    "recipes/hf-trainer.md",
    "recipes/determined.md",
]
INSTALL_LINE = re.compile(r"\A# [^\n]+\n\n\*\*Install:\*\* (.*?)\n\n", re.DOTALL)
CODE_SPAN = re.compile(r"`([^`]+)`")
INSTALL_BLOCK = re.compile(r"<!-- install-test: (\w+) -->\n```sh\n(.*?)```", re.DOTALL)
RUNNABLE = re.compile(r"(<!-- skip-test[^>]*-->\s*\n)?```python\n(.*?)```", re.DOTALL)
# `.[a,b]` in an editable install, `...whl)[a]` after a wheel's path.
EXTRAS_IN_COMMAND = re.compile(r"(?:\.|\.whl\))\[([\w,-]+)\]")
# "the `webdataset` extra", "`remote`, `s3` or `gcs` for", "`s3` extra"
EXTRA_IN_PROSE = re.compile(r"`([\w-]+)` extra\b")


def extras_of_pyproject() -> dict[str, list[str]]:
    extras: dict[str, list[str]] = load_file(ROOT / "pyproject.toml")["project"][
        "optional-dependencies"
    ]
    return extras


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def install_command(page: Path) -> str:
    """The command of ``page``'s install line (its first paragraph), spaces normalised."""
    match = INSTALL_LINE.match(page.read_text())
    assert match, f"{page.relative_to(ROOT)} does not open with an **Install:** line"
    commands = [c for c in CODE_SPAN.findall(match.group(1)) if c.startswith("pip install ")]
    assert commands, f"{page.relative_to(ROOT)}'s install line shows no pip install command"
    return " ".join(commands[0].split())


def test_each_guide_and_recipe_names_its_install_in_its_first_line() -> None:
    for name in GUIDES + RECIPES:
        command = install_command(DOCS / name)
        assert command.startswith("pip install -c constraints.txt -e "), (name, command)


def test_no_page_installs_detsamplers_from_a_package_registry() -> None:
    for page in pages():
        # An argument naming the package, as `pip install 'detsamplers[s3]'` (not a comment).
        found = re.findall(
            r"pip install [^`#\n]*?(?<![/\w-])detsamplers\b[^`#\n]*", page.read_text()
        )
        assert not found, f"{page.relative_to(ROOT)}: {found} (detsamplers is not on PyPI)"


def test_every_extra_a_page_names_exists_and_getting_started_lists_each() -> None:
    extras = extras_of_pyproject()
    named: dict[str, set[str]] = {}
    for page in pages():
        text = page.read_text()
        for group in EXTRAS_IN_COMMAND.findall(text):
            for extra in group.split(","):
                named.setdefault(extra, set()).add(page.name)
        for extra in EXTRA_IN_PROSE.findall(text):
            named.setdefault(extra, set()).add(page.name)
    assert {"webdataset", "testing", "lightning", "accelerate", "hf"} <= set(named)
    unknown = {extra: sorted(where) for extra, where in named.items() if extra not in extras}
    assert not unknown, f"extras named in the docs but not in pyproject.toml: {unknown}"
    table = GETTING_STARTED.read_text().split("| Extra |", 1)[1].split("\n\n", 1)[0]
    cells = [row.split("|")[1] for row in table.splitlines()[2:]]  # the first column
    listed = {name for cell in cells for name in re.findall(r"`([\w-]+)`", cell)}
    assert listed == set(extras), f"getting-started's table of extras: {listed ^ set(extras)}"


def test_each_frameworks_extra_is_part_of_the_integrations_extra_the_tests_install() -> None:
    extras = extras_of_pyproject()
    integrations = set(extras["integrations"])
    for name in ("lightning", "accelerate", "hf"):
        assert set(extras[name]) <= integrations, name


def make_dry_run(target: str) -> str:
    """What ``make -n -B target`` would run here (nothing is run)."""
    result = subprocess.run(
        ["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return result.stdout


@pytest.mark.subprocess
def test_make_demo_installs_the_package_alone_and_make_test_installs_the_tests_extras() -> None:
    installs = [line for line in make_dry_run("demo").splitlines() if "pip install" in line]
    assert installs == [".venv/bin/python -m pip install --quiet -c constraints.txt -e ."]
    assert "-m detsamplers demo" in make_dry_run("demo")
    test = make_dry_run("test")
    assert "pip install --quiet -c constraints.txt -e '.[dev,compare,integrations]'" in test
    assert "-m pytest" in test


def copy_of_the_clone(target: Path) -> Path:
    """The files a clone has (tracked and new, not ignored), copied to ``target``."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def pip_cache() -> str:
    """The pip cache a user's pip would use here: ``PIP_CACHE_DIR``, else ``~/.cache/pip``.

    ``tests/conftest.py`` points ``XDG_CACHE_HOME`` at a fresh folder for the library's node
    cache; without this, every run's pip would download every package again.
    """
    return os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")


def user_environment() -> dict[str, str]:
    """This process's environment less what the test run adds (its venv, PYTHONPATH), with
    the user's pip cache (:func:`pip_cache`), one for both halves of the install test, and
    pip told not to byte-compile what it installs."""
    env = dict(os.environ)
    # PYTHONDONTWRITEBYTECODE too (set on the project's machines, not a user's default): with
    # pip not compiling, it would make every example's process compile torch from source again.
    for name in (
        "PYTHONPATH",
        "VIRTUAL_ENV",
        "PYTEST_CURRENT_TEST",
        "PYTHONHOME",
        "PYTHONDONTWRITEBYTECODE",
    ):
        env.pop(name, None)
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != venv_bin)
    env["PIP_CACHE_DIR"] = pip_cache()
    # The commands run exactly as the docs write them; only pip's own configuration (its
    # environment, as a user's pip.conf could set it) differs. PIP_COMPILE=0 skips pip's
    # byte-compiling of every installed file (torch alone has thousands, twice, once per venv,
    # and every build environment's setuptools): Python compiles a module when it is first
    # imported anyway, and pip does not fail an install whose files do not compile, so that
    # step proves nothing about our docs. Not PIP_NO_COMPILE=1: pip reads an option's variable
    # as the value of the option's destination, ``compile``, so that spelling turns it on.
    # PIP_DISABLE_PIP_VERSION_CHECK drops pip's look-up of its own newer release.
    env.pop("PIP_NO_COMPILE", None)
    env["PIP_COMPILE"] = "0"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def a_small_wheel(folder: Path) -> Path:
    """A wheel of one module, ``tiny_module``, written here (no registry needed)."""
    dist_info = "tiny_module-1.0.dist-info"
    files = {
        "tiny_module.py": "VALUE = 1\n",
        f"{dist_info}/METADATA": "Metadata-Version: 2.1\nName: tiny-module\nVersion: 1.0\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in [*files, f"{dist_info}/RECORD"])
    wheel = folder / "tiny_module-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in {**files, f"{dist_info}/RECORD": record}.items():
            archive.writestr(name, text)
    return wheel


def compiled_files_after_an_install(wheel: Path, target: Path, env: dict[str, str]) -> int:
    """How many ``.pyc`` files pip writes when it installs ``wheel`` into ``target``."""
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
         "--target", str(target), str(wheel)],
        env=env, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return len(list(target.rglob("*.pyc")))


@pytest.mark.subprocess
def test_the_install_tests_pip_does_not_byte_compile_what_it_installs(tmp_path: Path) -> None:
    wheel = a_small_wheel(tmp_path)
    env = user_environment()
    assert compiled_files_after_an_install(wheel, tmp_path / "quiet", env) == 0
    # PIP_NO_COMPILE=1, the spelling that reads as "off", compiles as pip's default does.
    env.pop("PIP_COMPILE")
    env["PIP_NO_COMPILE"] = "1"
    assert compiled_files_after_an_install(wheel, tmp_path / "inverted", env) == 1


def bash(script: str, cwd: Path, log: Path, timings: list[str], what: str) -> None:
    """Run ``script`` with bash -e in ``cwd``, appending its output to ``log``; time it.

    Safe in a thread (the install test runs its two halves at once): each half has a log of
    its own, and ``list.append`` is atomic. The timing is the step's wall time and the CPU
    time of its processes (bash and every process it waited for, ``os.wait4``: the other
    half's processes are not counted), so that the printed lines say where the CPU goes.
    """
    start = time.perf_counter()
    with log.open("a") as out:
        out.write(f"\n$ ({what}) in {cwd}\n{script}\n")
        out.flush()
        process = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=cwd,
            env=user_environment(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        # The test's own limit (1800 s) bounds a hang; a step's bound below it only fails
        # a slow machine: both halves' pips at once took over 900 s at a load of 15.
        timer = threading.Timer(1700, process.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(process.pid, 0)
        finally:
            timer.cancel()
        process.returncode = os.waitstatus_to_exitcode(status)  # waited for here, not by Popen
    cpu = usage.ru_utime + usage.ru_stime
    timings.append(f"{time.perf_counter() - start:7.1f} s {cpu:7.1f} s CPU  {what}")
    if process.returncode:
        tail = log.read_text()[-4000:]
        pytest.fail(f"{what} exited with {process.returncode} (log: {log}):\n{tail}")


def first_example(page: Path) -> str | None:
    for match in RUNNABLE.finditer(page.read_text()):
        if not match.group(1):
            return match.group(2)
    return None


def from_a_clone(clone: Path, outside: Path, log: Path, timings: list[str]) -> None:
    """getting-started's clone block in ``clone``, then each guide's install line that the
    block did not run, in the same venv, then each page's first example in a folder of its
    own under ``outside``, each in a process of its own."""
    block = dict(INSTALL_BLOCK.findall(GETTING_STARTED.read_text()))["clone"]
    bash(block, clone, log, timings, "getting-started: from a clone")
    ran = {" ".join(line.split("#")[0].split()) for line in block.splitlines()}
    for command in dict.fromkeys(install_command(DOCS / name) for name in GUIDES):
        if command not in ran:
            bash(". .venv/bin/activate\n" + command, clone, log, timings, command)
    python = clone / ".venv" / "bin" / "python"
    runs = []
    for name in ["getting-started.md", *GUIDES]:
        code = first_example(DOCS / name)
        if code is None:  # cli.md: commands and their output only
            continue
        stem = name.removesuffix(".md")  # the script's name: `webdataset.py` would shadow it
        (outside / f"example_{stem}.py").write_text(code)
        runs.append(f"mkdir {stem} && (cd {stem} && {python} ../example_{stem}.py)")
    # One example after the other, each in a process of its own, from outside the clone.
    bash("\n".join(runs), outside, log, timings, f"{len(runs)} first examples")
    where = subprocess.run(
        [python, "-c", "import detsamplers, sys; sys.stdout.write(detsamplers.__file__)"],
        cwd=outside,
        env=user_environment(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert Path(where).is_relative_to(clone), where  # the editable install of the clone


def from_a_wheel(source: Path, outside: Path, log: Path, timings: list[str]) -> None:
    """getting-started's wheel block in ``source`` (a venv of its own), then the package's
    checks and getting-started's example with that venv's python, from ``outside``."""
    block = dict(INSTALL_BLOCK.findall(GETTING_STARTED.read_text()))["wheel"]
    bash(block, source, log, timings, "getting-started: from a wheel")
    python = source / ".venv" / "bin" / "python"
    check = (
        "import detsamplers, hypothesis, pathlib, sys\n"
        "package = pathlib.Path(detsamplers.__file__).parent\n"
        "assert 'site-packages' in package.parts, package\n"
        "assert (package / '_examples' / 'demo_trial.py').is_file()\n"
        "assert detsamplers.kernel_status() == 'compiled', detsamplers.kernel_status()\n"
    )
    example = first_example(GETTING_STARTED)
    assert example is not None
    (outside / "wheel.py").write_text(check + example)
    bash(f"{python} wheel.py", outside, log, timings, "the wheel: getting-started's example")


@pytest.mark.install
@pytest.mark.timeout(1800)
def test_the_documented_installs_work_in_fresh_venvs_and_each_guide_runs_its_first_example(
    tmp_path: Path,
) -> None:
    blocks = dict(INSTALL_BLOCK.findall(GETTING_STARTED.read_text()))
    assert set(blocks) == {"clone", "wheel"}
    # The two halves share nothing but pip's cache: a copy of the clone each, a fresh venv
    # each, a folder of their own outside it. They wait mostly on pip and the registry, so
    # they run at once, each in a thread, each with a log of its own.
    halves = {
        "clone": (from_a_clone, copy_of_the_clone(tmp_path / "clone")),
        "wheel": (from_a_wheel, copy_of_the_clone(tmp_path / "wheel")),
    }
    timings: list[str] = []
    with ThreadPoolExecutor(max_workers=len(halves)) as pool:
        running = []
        for name, (half, copy) in halves.items():
            outside = tmp_path / f"outside-{name}"
            outside.mkdir()
            log = tmp_path / f"install-{name}.log"
            running.append(pool.submit(half, copy, outside, log, timings))
        for future in running:  # the first failure is raised, after both halves ended
            future.result()
    print("\n".join(["", *timings]))
