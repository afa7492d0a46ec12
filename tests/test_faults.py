"""Fault injection through the real CLI in subprocesses (issue 41 items 2, 3 and 4).

Interrupts: SIGINT and SIGTERM at several points of `lock` (the py-rattler solve), `verify` (its real
ladder child, on CPU), `build` and `test` (rattler-build running a script that sleeps), `channel index`
and `arch check --package` on a large file. Every one ends with exit 130 / 143, its one line last on
stderr, no traceback and no Rust panic, no process it started left running, no temporary file left.
Special files: a FIFO among a channel's packages, a package that unpacks to far more than it stores.
Output places: read-only directories, a file where a directory belongs, an unindexed channel; each is
refused (exit 2, one line naming the option, the path and the fix) before any work.

Read-only places: the tests run as root in CI, where chmod denies nothing, so a read-only directory is
a read-only bind mount made in a user and mount namespace (`unshare -rm`, the CLI run inside it); where
`unshare` cannot do that and we are not root, chmod 0555; otherwise the test is skipped, saying why.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from pathlib import Path

import pytest
from support.cli import ROOT
from support.probe_package import build_probe

from mmstack_lab.standin import fake_channel

pytest.importorskip("rattler", reason="py-rattler (the [build] extra) is not installed")
pytest.importorskip("rattler_build", reason="py-rattler-build (the [build] extra) is not installed")

SIGNALS = [signal.SIGINT, signal.SIGTERM]
BAD_WORDS = ("Traceback", "panicked", "RUST_BACKTRACE")


class Cli:
    """`mmstack ...` running in a subprocess, its stderr read line by line as it comes."""

    def __init__(self, *args: str, env: dict | None = None, prefix: tuple[str, ...] = ()):
        self.proc = subprocess.Popen([*prefix, sys.executable, "-m", "mmstack.cli", *args], cwd=ROOT, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env={**os.environ, "COLUMNS": "200", **(env or {})})
        self.err: list[str] = []
        self.out: list[str] = []
        self._readers = [threading.Thread(target=self._read, args=(s, buf), daemon=True)
                         for s, buf in ((self.proc.stderr, self.err), (self.proc.stdout, self.out))]
        for t in self._readers:
            t.start()

    @staticmethod
    def _read(stream, buf: list[str]) -> None:
        for line in stream:
            buf.append(line)

    def wait_for(self, ready, timeout: float = 120) -> None:
        """Until `ready()`; fails if the command ends first."""
        deadline = time.monotonic() + timeout
        while not ready():
            assert self.proc.poll() is None, f"ended (exit {self.proc.returncode}) before the point: {''.join(self.err)}"
            assert time.monotonic() < deadline, f"never reached the point: {''.join(self.err)}"
            time.sleep(0.01)

    def saw(self, text: str) -> bool:
        return any(text in line for line in self.err)

    def finish(self, timeout: float = 120) -> tuple[int, str]:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"still running {timeout} s after the signal: {''.join(self.err)}")
        for t in self._readers:
            t.join(10)
        return self.proc.returncode, "".join(self.err)


def interrupt(cli: Cli, signum: int) -> str:
    """Send `signum`, then check the ending every interrupt must have; returns stderr."""
    cli.proc.send_signal(signum)
    code, err = cli.finish()
    name = signal.Signals(signum).name
    assert not any(w in err for w in BAD_WORDS), err
    assert code == 128 + signum, f"exit {code} after {name}: {err}"
    last = [ln for ln in err.splitlines() if ln.strip()][-1]
    assert last.startswith(f"mmstack: interrupted by {name}") and last.endswith(f"exit {128 + signum}"), err
    return err


def processes_with(token: str) -> list[str]:
    """Live processes whose command line holds `token` (orphans of an interrupted command)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if token in cmdline and state != "Z":
            found.append(f"{entry}: {cmdline}")
    return found


def no_orphans(token: str, settle: float = 2.0) -> None:
    deadline = time.monotonic() + settle
    while processes_with(token) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not processes_with(token), processes_with(token)


def kill_orphans(token: str) -> None:
    """Kill (by pid) what a failed test left: the orphan, and the build script running it."""
    for entry in processes_with(token):
        pid = int(entry.split(":", 1)[0])
        try:
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            script = b"conda_build.sh" in Path(f"/proc/{parent}/cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            script = False
        for victim in (pid, parent) if script else (pid,):
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)


@pytest.fixture
def token(request, tmp_path):
    """A name the test's processes carry in their command line; whatever still carries it is killed
    when the test ends, passed or not."""
    name = f"mmstack-fault-{os.getpid()}-{abs(hash(request.node.nodeid)) % 10**8}"
    yield name
    kill_orphans(name)
    kill_orphans(str(tmp_path))


def temp_leftovers(*dirs: Path) -> list[Path]:
    """What an interrupted write may leave: the channel's `.index-<pid>/`, `.<pkg>.partial-<pid>`, a lock's
    `.<file>.<hex>.tmp`, the write checks' `.mmstack-write-check-*`."""
    out = []
    for d in dirs:
        if d.is_dir():
            out += [p for p in d.rglob(".*") if p.name != ".mmstack.lock"]
    return out


@pytest.fixture(scope="module")
def empty_channel(tmp_path_factory) -> Path:
    empty = tmp_path_factory.mktemp("empty") / "channel"
    (empty / "noarch").mkdir(parents=True)
    code = subprocess.run([sys.executable, "-m", "mmstack.cli", "channel", "index", str(empty), "--quiet"],
                          cwd=ROOT, capture_output=True, text=True).returncode
    assert code == 0
    return empty


def sleeping_recipe(dest: Path, token: str, *, in_test: bool) -> Path:
    """A generic recipe whose build script (or test script) touches `dest/started` and then sleeps as a
    process named `token` (bash's exec -a), so the test knows when to signal and what must be gone."""
    dest.mkdir(parents=True, exist_ok=True)
    sleeper = [f"touch {dest / 'started'}", f"exec -a {token} sleep 3600"]
    build = ["mkdir -p $PREFIX/share/probe", "echo probe > $PREFIX/share/probe/file.txt"]
    text = {"package": {"name": "mmstack-fault-probe", "version": "1.0"},
            "build": {"noarch": "generic", "script": build if in_test else sleeper + build}}
    if in_test:
        text["tests"] = [{"script": sleeper}]
    (dest / "recipe.yaml").write_text(json.dumps(text))  # JSON is YAML
    return dest


# -- item 2: interrupts ------------------------------------------------------------------------------


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_build_interrupted_ends_its_script_and_lands_nothing(tmp_path, empty_channel, signum, token):
    recipe = sleeping_recipe(tmp_path / "recipe", token, in_test=False)
    channel, work = tmp_path / "channel", tmp_path / "work"
    cli = Cli("build", "--root", str(ROOT), "--recipe", str(recipe), "--channel", str(channel), "--no-test",
              "--source-channel", str(empty_channel), "--work-dir", str(work))
    cli.wait_for(lambda: (recipe / "started").exists() and processes_with(token))
    interrupt(cli, signum)
    no_orphans(token)
    assert not list(channel.glob("*/*.conda")), "nothing landed"
    assert not temp_leftovers(channel)
    assert not list(work.glob("mmstack-build-*/")), "the build tree was removed"  # the failure log may stay


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_test_interrupted_ends_its_test_script(tmp_path, empty_channel, signum, token):
    recipe = sleeping_recipe(tmp_path / "recipe", token, in_test=True)
    channel = tmp_path / "channel"
    code = subprocess.run([sys.executable, "-m", "mmstack.cli", "build", "--root", str(ROOT), "--recipe", str(recipe),
                           "--channel", str(channel), "--no-test", "--source-channel", str(empty_channel), "--quiet"],
                          cwd=ROOT, capture_output=True, text=True)
    assert code.returncode == 0, code.stderr
    (pkg,) = channel.glob("noarch/*.conda")
    log = tmp_path / "test.log"
    cli = Cli("test", str(pkg), "--channel", str(channel), "--source-channel", str(empty_channel), "--log", str(log))
    cli.wait_for(lambda: (recipe / "started").exists() and processes_with(token))
    interrupt(cli, signum)
    no_orphans(token)
    assert not list(channel.glob("noarch/*.receipt.json")), "no receipt for an interrupted test"


@pytest.fixture(scope="module")
def lock_inputs(tmp_path_factory):
    """The repository's pixi.toml and matrix, and the fake conda-forge + ./channel they solve against."""
    from mmstack.facts.gpus import load as load_facts
    from mmstack.variants import matrix as variants

    matrix = variants.load_matrix(load_facts(), ROOT / variants.CONFIG_FILE)
    fc = fake_channel
    url = fc.url(fc.build_channel(tmp_path_factory.mktemp("fake-channel"), fc.standard_packages(matrix)))
    return url, [ROOT / "pixi.toml", ROOT / variants.CONFIG_FILE]


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.2])
@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_lock_interrupted_in_the_solve(tmp_path, lock_inputs, signum, delay):
    """The signal lands in py-rattler's solve (delay 0: as it starts). Whatever it cut, no panic and
    either no lock at all (interrupted) or a whole one (it finished first, for the later points)."""
    url, files = lock_inputs
    for f in files:
        shutil.copy(f, tmp_path / f.name)
    cli = Cli("lock", "--root", str(tmp_path), "--channel", url)
    cli.wait_for(lambda: cli.saw("solving"))
    time.sleep(delay)
    cli.proc.send_signal(signum)
    code, err = cli.finish()
    assert not any(w in err for w in BAD_WORDS), err
    locked = (tmp_path / "pixi.lock").exists()
    assert locked == bool(list(tmp_path.glob("envs/*.conda-lock.yml"))), "all of the files or none"
    if code in (0, -signum) and delay:  # the command won the race (-signum: the signal came in the interpreter's
        assert locked  # shutdown, after main() returned and put the default handlers back)
    else:
        assert code == 128 + signum, err
        assert err.rstrip().splitlines()[-1].startswith(f"mmstack: interrupted by {signal.Signals(signum).name}")
        assert not locked or delay, "interrupted as the solve began: nothing written"
    assert not temp_leftovers(tmp_path)


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_verify_interrupted_ends_its_ladder_child(tmp_path, real_mmcv_python, signum, token):
    """The ladder child runs in its own session (a Ctrl-C at the terminal never reaches it): verify
    must end it. Its journal lives under TMPDIR, so its command line names tmp_path."""
    cli = Cli("verify", "--python", real_mmcv_python, "--levels", "L1,L2,L3,L4", "--quiet",
              env={"TMPDIR": str(tmp_path)})
    cli.wait_for(lambda: processes_with(str(tmp_path)))
    time.sleep(0.3)
    interrupt(cli, signum)
    no_orphans(str(tmp_path), settle=1.0)
    assert not list(tmp_path.glob("mmstack-ladder-*")), "the journal's directory was removed"


@pytest.fixture(scope="module")
def probe_conda(tmp_path_factory) -> Path:
    pkg, _, _ = build_probe(tmp_path_factory.mktemp("probe"), json.dumps(
        {"package": {"name": "mmstack-fault-index", "version": "1.0"},
         "build": {"noarch": "generic", "script": ["mkdir -p $PREFIX/share", "echo x > $PREFIX/share/x.txt"]}}),
        test=False)
    return pkg


def _channel_of_links(dest: Path, pkg: Path, n: int) -> Path:
    (dest / "noarch").mkdir(parents=True)
    stem = pkg.name.removesuffix(".conda").rsplit("_", 1)[0]
    for i in range(n):
        os.link(pkg, dest / "noarch" / f"{stem}_{i}.conda")
    return dest


@pytest.mark.parametrize("delay", [0.0, 0.3, 0.8])
@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_channel_index_interrupted_leaves_no_shadow(tmp_path, probe_conda, signum, delay):
    """3,000 packages (hard links of one): reading them and rattler's index take a couple of seconds,
    so the signal lands in the reading (0) or in rattler's index_fs (later)."""
    channel = _channel_of_links(tmp_path / "channel", probe_conda, 3000)
    cli = Cli("channel", "index", str(channel), "--json")
    cli.wait_for(lambda: cli.saw("reading"))
    time.sleep(delay)
    cli.proc.send_signal(signum)
    code, err = cli.finish()
    assert not any(w in err for w in BAD_WORDS), err
    assert code in (0, -signum, 128 + signum), err  # 0, -signum: it finished first (see the lock's test)
    assert code == 128 + signum or delay, "interrupted when the reading had just begun"
    if code == 128 + signum:
        assert err.rstrip().splitlines()[-1].startswith(f"mmstack: interrupted by {signal.Signals(signum).name}")
        doc = json.loads("".join(cli.out))  # --json: stdout says so too
        assert doc["ok"] is False and doc["error"]["kind"] == "Interrupted" and doc["error"]["exit_code"] == code
    assert not list(channel.glob(".index-*")), "the shadow copy was removed"
    assert not temp_leftovers(channel)
    for repodata in channel.glob("*/repodata.json"):
        json.loads(repodata.read_text())  # whole, never half written


def test_channel_index_clears_what_a_killed_one_left(tmp_path, probe_conda):
    """SIGKILL cannot be caught: the next index removes the dead process's shadow and staged package."""
    channel = _channel_of_links(tmp_path / "channel", probe_conda, 2)
    dead = subprocess.Popen(["true"])
    dead.wait()
    shadow = channel / f".index-{dead.pid}" / "noarch"
    shadow.mkdir(parents=True)
    os.link(probe_conda, shadow / probe_conda.name)
    staged = channel / "noarch" / f".{probe_conda.name}.partial-{dead.pid}"
    os.link(probe_conda, staged)
    live = channel / f".index-{os.getpid()}"  # a live process's: not ours to remove
    live.mkdir()
    code = subprocess.run([sys.executable, "-m", "mmstack.cli", "channel", "index", str(channel), "--json"],
                          cwd=ROOT, capture_output=True, text=True)
    assert code.returncode == 0, code.stderr
    assert json.loads(code.stdout)["subdirs"]["noarch"] == 2
    assert not shadow.parent.exists() and not staged.exists()
    assert live.is_dir()


def _big_wheel(dest: Path, megabytes: int) -> Path:
    block = os.urandom(1 << 20)
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_STORED) as zf, zf.open("mmcv/_big.so", "w", force_zip64=True) as out:
        for _ in range(megabytes):
            out.write(block)
    return dest


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_arch_check_of_a_large_package_interrupted(tmp_path, signum):
    wheel = _big_wheel(tmp_path / "big-1.0-py3-none-any.whl", 600)
    cli = Cli("arch", "check", "--gpu", "RTX 4090", "--package", str(wheel), env={"TMPDIR": str(tmp_path)})
    cli.wait_for(lambda: cli.saw("MB"))
    interrupt(cli, signum)
    assert sorted(p.name for p in tmp_path.iterdir()) == [wheel.name], "no temporary copy left"


# -- item 3's leftovers: a FIFO in a channel, decompression bounded -----------------------------------


def test_a_fifo_in_a_channel_is_refused_not_waited_on(tmp_path, probe_conda):
    channel = _channel_of_links(tmp_path / "channel", probe_conda, 1)
    os.mkfifo(channel / "noarch" / "stray-1.0-0.conda")
    proc = subprocess.run([sys.executable, "-m", "mmstack.cli", "channel", "index", str(channel)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "noarch/stray-1.0-0.conda (a FIFO, not a regular file)" in lines[0], proc.stderr
    assert not list(channel.glob(".index-*")) and not (channel / "noarch" / "repodata.json").exists()


def test_a_package_that_unpacks_to_far_more_than_it_stores_is_refused(tmp_path):
    """A .conda whose tar.zst holds a 100 MiB shared object of zeros (a few KB stored): refused from
    the tar header, before its bytes are unpacked."""
    size = 100 << 20
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("lib/python3.12/site-packages/mmcv/_ext.so")
        info.size = size
        tar.addfile(info, io.BytesIO(bytes(size)))
    packed = subprocess.run(["zstd", "-q", "-19", "-c"], input=raw.getvalue(), capture_output=True, check=True).stdout
    assert len(packed) * 100 < size
    conda = tmp_path / "mmcv-2.2.0-bomb_0.conda"
    with zipfile.ZipFile(conda, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("metadata.json", '{"conda_pkg_format_version": 2}')
        zf.writestr("pkg-mmcv-2.2.0-bomb_0.tar.zst", packed)
    for args in (("fatbin", str(conda)), ("arch", "check", "--gpu", "RTX 4090", "--package", str(conda))):
        proc = subprocess.run([sys.executable, "-m", "mmstack.cli", *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert "damaged or hostile package" in lines[0] and "fix:" in lines[0]


# -- item 4: output places checked before work starts --------------------------------------------------


@pytest.fixture
def read_only(tmp_path):
    """(directory, seal): fill the directory, then `seal()` makes it read-only for the command it
    returns the prefix of."""
    d = tmp_path / "ro"
    d.mkdir()
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True) if shutil.which("unshare") else None
    if probe is not None and probe.returncode == 0:
        q = shlex.quote(str(d))
        prefix = ("unshare", "-rm", "sh", "-c",
                  f"mount --bind {q} {q} && mount -o remount,bind,ro {q} && exec \"$@\"", "sh")
        yield d, lambda: prefix
        return
    if os.geteuid() != 0:
        def seal():
            d.chmod(0o555)
            return ()
        yield d, seal
        d.chmod(0o755)
        return
    pytest.skip("root without unshare: no way to make a read-only directory here")


def refused(cli: Cli, *words: str) -> str:
    code, err = cli.finish()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1, err
    assert not any(w in err for w in BAD_WORDS)
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def test_channel_index_of_a_read_only_channel(read_only, probe_conda):
    d, seal = read_only
    (d / "noarch").mkdir()
    os.link(probe_conda, d / "noarch" / probe_conda.name)
    line = refused(Cli("channel", "index", str(d), prefix=seal()), f"channel index {d}", "fix:")
    assert "Read-only file system" in line or "Permission denied" in line
    assert not (d / "noarch" / "repodata.json").exists()


def test_lock_yml_only_into_a_read_only_root(read_only):
    d, seal = read_only
    for name in ("pixi.toml", "conda_build_config.yaml"):
        shutil.copy(ROOT / name, d / name)
    line = refused(Cli("lock", "--yml-only", "--root", str(d), prefix=seal()), "--root", str(d), "fix:")
    assert not (d / "envs").exists(), line


def test_build_into_a_read_only_channel_is_refused_before_building(read_only, empty_channel):
    d, seal = read_only
    refused(Cli("build", "--root", str(ROOT), "--recipe", "mmstack", "--channel", str(d), "--source-channel",
                str(empty_channel), prefix=seal()), "--channel", str(d), "fix:")


def test_build_into_a_file_or_an_unindexed_channel_is_refused_before_building(tmp_path, empty_channel, probe_conda):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a channel\n")
    refused(Cli("build", "--root", str(ROOT), "--recipe", "mmstack", "--channel", str(notes),
                "--source-channel", str(empty_channel)), f"--channel {notes}", "not a directory", "fix:")
    unindexed = tmp_path / "my channel"
    (unindexed / "noarch").mkdir(parents=True)
    os.link(probe_conda, unindexed / "noarch" / probe_conda.name)
    line = refused(Cli("build", "--root", str(ROOT), "--recipe", "mmstack", "--channel", str(unindexed),
                       "--source-channel", str(empty_channel)), "not an indexed conda channel")
    assert f"mmstack channel index {shlex.quote(str(unindexed))}" in line  # quoted: the path has a space


def test_test_log_into_a_directory_or_a_read_only_place(tmp_path, read_only, probe_conda, empty_channel):
    refused(Cli("test", str(probe_conda), "--source-channel", str(empty_channel), "--log", str(tmp_path)),
            f"--log {tmp_path}", "a directory, not a file", "fix:")
    d, seal = read_only
    refused(Cli("test", str(probe_conda), "--source-channel", str(empty_channel), "--log", str(d / "test.log"),
                prefix=seal()), "--log", "fix:")


def test_install_hint_is_shell_quoted(tmp_path, empty_channel):
    """A channel path with a space: the printed command, split as a shell splits it, names the channel."""
    recipe = tmp_path / "recipe"
    recipe.mkdir()
    (recipe / "recipe.yaml").write_text(json.dumps(
        {"package": {"name": "mmstack-fault-hint", "version": "1.0"},
         "build": {"noarch": "generic", "script": ["mkdir -p $PREFIX/share", "echo x > $PREFIX/share/x.txt"]}}))
    channel = tmp_path / "my channel"
    proc = subprocess.run([sys.executable, "-m", "mmstack.cli", "build", "--root", str(ROOT), "--recipe", str(recipe),
                           "--channel", str(channel), "--source-channel", str(empty_channel), "--no-test", "--quiet"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    hint = next(ln for ln in proc.stderr.splitlines() if ln.startswith("install with: "))
    words = shlex.split(hint.removeprefix("install with: "))
    assert words[:3] == ["conda", "install", "-c"] and words[3] == str(channel.resolve())
