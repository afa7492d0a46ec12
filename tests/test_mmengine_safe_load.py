"""recipes/mmengine's patch 0001 and the ladder's L6 (issue 37): on the stack mmstack ships (torch
2.13, mmengine 0.10.7) conda-forge's unpatched mmengine cannot load the checkpoints it writes, ours
can, and the ladder says which one a user has.

The unpatched side is upstream's own sdist (the recipe's source, sha256-checked) unpacked ahead of
the installed package on PYTHONPATH, in the prefix tests/test_build_e2e.py installed from the
recipe-built channel (torch, mmcv's CPU ops, our mmengine and mmdet).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mmstack.verify import checkpoint_cycle, ladder

ROOT = Path(__file__).resolve().parents[1]
CYCLE = Path(checkpoint_cycle.__file__)


@pytest.fixture(scope="module")
def unpatched(tmp_path_factory) -> Path:
    """mmengine 0.10.7 as released: the recipe's sdist unpacked, no patch applied."""
    from mmstack_lab.standin import offline

    return offline.unpacked_sdist("mmengine", tmp_path_factory.mktemp("mmengine-released"))


def _env(overlay: Path | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "CONDA"))}
    env.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
    if overlay is not None:
        env["PYTHONPATH"] = str(overlay)
    return env


def _cycle(python: str, overlay: Path | None, model: str = "plain") -> dict:
    proc = subprocess.run([python, str(CYCLE), "--model", model, "--device", "cpu", "--json"],
                          capture_output=True, text=True, env=_env(overlay), timeout=900, check=False)
    doc = json.loads(proc.stdout)
    assert proc.returncode == (0 if doc["passed"] else 1), proc.stderr[-2000:]
    (result,) = doc["results"]
    return result


def _which_mmengine(python: str, overlay: Path | None) -> str:
    code = "import mmengine, importlib.util as u; print(mmengine.__file__, bool(u.find_spec('mmengine.utils.dl_utils.safe_load')))"
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, env=_env(overlay), timeout=300, check=True)
    return proc.stdout.strip()


@pytest.mark.slow  # 12 fresh processes, each importing torch and mmengine (~1 min on 2 cores)
def test_released_mmengine_cannot_load_its_own_checkpoints_and_ours_can(real_mmcv_python, unpatched):
    released = _which_mmengine(real_mmcv_python, unpatched)
    assert released.startswith(str(unpatched)) and released.endswith("False"), released
    assert _which_mmengine(real_mmcv_python, None).endswith("True"), "the e2e prefix lacks recipes/mmengine's build"

    before = _cycle(real_mmcv_python, unpatched)
    phases = before["phases"]
    assert not before["passed"]
    assert phases["train"]["passed"], phases["train"]  # it writes checkpoints ...
    for name in ("load", "resume", "test", "old-format"):  # ... and loads none, the zoo's old format neither
        assert not phases[name]["passed"], (name, phases[name])
        assert "Weights only load failed" in phases[name]["error"], (name, phases[name]["error"][:300])
    assert "HistoryBuffer" in phases["load"]["error"]
    # no HistoryBuffer there: the numpy float64 in hook_msgs.best_score
    assert "numpy._core.multiarray.scalar" in phases["old-format"]["error"], phases["old-format"]["error"][-400:]

    after = _cycle(real_mmcv_python, None)
    assert after["passed"], {k: v["reason"] for k, v in after["phases"].items()}
    ph = after["phases"]
    assert ph["resume"]["start_iter"] == checkpoint_cycle.CKPT_INTERVAL
    assert ph["resume"]["losses"] == ph["resume"]["first_run_losses"]  # the CPU: exact
    assert all(ph["resume"]["checks"].values()), ph["resume"]["checks"]
    assert ph["test"]["test"] == ph["test"]["first_run"] and ph["test"]["val"] == ph["test"]["first_run"]
    assert ph["old-format"]["weights_loaded"]
    message = ph["foreign"]["message"]
    assert "fractions.Fraction" in message and "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1" in message


@pytest.mark.slow  # the ladder's L6 with mmcv's toy model, twice
def test_the_ladder_fails_L6_on_released_mmengine_with_the_fix_and_passes_on_ours(real_mmcv_python, unpatched):
    def l6(overlay):
        proc = subprocess.run([sys.executable, "-m", "mmstack", "verify", "--levels", "L6", "--json",
                               "--python", real_mmcv_python], capture_output=True, text=True,
                              env={**_env(overlay), "PATH": os.environ["PATH"]}, timeout=900, check=False)
        (level,) = json.loads(proc.stdout)["levels"]
        return proc.returncode, level

    rc, level = l6(unpatched)
    assert rc == 1 and level["status"] == "FAIL", level["reason"]
    assert level["diagnosis"]["rule"] == "mmengine-weights-only", level["diagnosis"]
    assert "safeload_" in level["diagnosis"]["fix"] and "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1" in level["diagnosis"]["fix"]
    (cycle,) = level["evidence"]["checkpoints"]
    assert cycle["model"] == "toy" and not cycle["phases"]["load"]["passed"]

    rc, level = l6(None)
    assert rc == 0 and level["status"] == "PASS", level["reason"]
    (cycle,) = level["evidence"]["checkpoints"]
    assert cycle["model"] == "toy" and cycle["passed"] and "resumed at iteration 2" in level["reason"]


# What the allow-list admits and refuses, in the prefix's python with our mmengine. Each case prints
# one JSON line; the script is run as a file so torch's unpickler sees real modules.
_LOADER_CASES = textwrap.dedent('''
    import io, json, pickle, sys, warnings
    import numpy as np, torch
    from mmengine.logging.history_buffer import HistoryBuffer
    from mmengine.utils.dl_utils.safe_load import safe_torch_load
    out = {}

    def refused(f):
        try:
            safe_torch_load(f, map_location="cpu", source="case.pth")
        except pickle.UnpicklingError as exc:
            return str(exc)
        return None

    # numpy 1.x wrote numpy.core.multiarray, numpy 2.x numpy._core.multiarray: both load. The legacy
    # (non-zip) format keeps the pickle's GLOBAL lines as plain bytes to rename.
    buf = io.BytesIO()
    torch.save({"a": np.arange(3.0), "s": np.float64(0.5)}, buf, _use_new_zipfile_serialization=False)
    raw = buf.getvalue()
    assert b"numpy._core.multiarray\\n" in raw
    old = raw.replace(b"numpy._core.multiarray\\n", b"numpy.core.multiarray\\n")
    got = safe_torch_load(io.BytesIO(old), map_location="cpu")
    out["numpy1_names"] = [got["a"].tolist(), float(got["s"])]

    # getattr is only HistoryBuffer's statistics: getattr(HistoryBuffer, "__init__") is refused
    class Reach:
        def __reduce__(self):
            return (getattr, (HistoryBuffer, "__init__"))
    buf = io.BytesIO(); torch.save({"x": Reach()}, buf); buf.seek(0)
    out["getattr_init"] = refused(buf)

    # a caller's own add_safe_globals of a type mmengine allows too outlives mmengine's loads (torch's
    # safe_globals context removes its whole list on exit: patch 0001 adds only what is missing)
    torch.serialization.add_safe_globals([HistoryBuffer])
    history = HistoryBuffer(); history.update(0.5)
    buf = io.BytesIO(); torch.save({"h": history}, buf)
    safe_torch_load(io.BytesIO(buf.getvalue()), map_location="cpu")
    out["caller_allow_kept"] = HistoryBuffer in torch.serialization.get_safe_globals()

    # a foreign global: refused with the opt-ins named; the opt-in loads it, with a warning
    import fractions
    buf = io.BytesIO(); torch.save({"x": fractions.Fraction(1, 3)}, buf)
    out["foreign"] = refused(io.BytesIO(buf.getvalue()))
    import os
    os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out["opt_in"] = str(safe_torch_load(io.BytesIO(buf.getvalue()), map_location="cpu")["x"])
    out["opt_in_warned"] = any("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" in str(w.message) for w in caught)
    print(json.dumps(out))
''')


@pytest.mark.slow  # needs the e2e prefix (torch and our mmengine)
def test_the_allow_list_admits_what_mmengine_writes_and_nothing_more(real_mmcv_python, tmp_path):
    script = tmp_path / "cases.py"
    script.write_text(_LOADER_CASES)
    proc = subprocess.run([real_mmcv_python, str(script)], capture_output=True, text=True, env=_env(None),
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["numpy1_names"] == [[0.0, 1.0, 2.0], 0.5]
    assert out["getattr_init"] and "getattr only for HistoryBuffer statistics methods" in out["getattr_init"]
    assert out["foreign"].startswith("case.pth: mmengine loads checkpoints with weights_only=True")
    assert "fractions.Fraction" in out["foreign"] and "add_safe_globals" in out["foreign"]
    assert out["opt_in"] == "1/3" and out["opt_in_warned"]
    assert out["caller_allow_kept"]


def _unsafe_calls(tree: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and any(
        k.arg == "weights_only" and isinstance(k.value, ast.Constant) and k.value.value is False for k in n.keywords)]


def _added_files(patch: str) -> dict[str, str]:
    """The files a patch adds whole (`--- /dev/null`), as their text."""
    out, name = {}, None
    for line in patch.splitlines():
        if line.startswith("+++ b/"):
            name = line[6:]
        elif name and line.startswith("+") and not line.startswith("+++"):
            out.setdefault(name, []).append(line[1:])
    return {k: "\n".join(v) + "\n" for k, v in out.items()}


def test_no_weights_only_false_outside_the_explicit_opt_in():
    """No call passes weights_only=False in our code; in recipes/mmengine's patches only one, inside
    the branch of torch's own opt-in (TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1)."""
    for path in (ROOT / "src").rglob("*.py"):
        assert _unsafe_calls(ast.parse(path.read_text())) == [], path
    patches = sorted((ROOT / "recipes").rglob("*.patch"))
    calls = {}
    for patch in patches:
        for name, text in _added_files(patch.read_text()).items():
            if name.endswith(".py") and "weights_only" in text:
                try:
                    tree = ast.parse(text)
                except SyntaxError:  # a hunk of a file, not a whole one: no call may pass it
                    assert "weights_only=False" not in text.replace("``weights_only=False``", ""), (patch, name)
                    continue
                calls[name] = (tree, _unsafe_calls(tree))
    (tree, found), = [v for k, v in calls.items() if k == "mmengine/utils/dl_utils/safe_load.py"]
    assert len(found) == 1
    guard = next(n for n in ast.walk(tree) if isinstance(n, ast.If) and isinstance(n.test, ast.Call)
                 and getattr(n.test.func, "id", "") == "_unsafe_requested")
    assert found[0] in list(ast.walk(guard)), "the unrestricted load is outside the opt-in's branch"
    assert all(not f for k, (_, f) in calls.items() if k != "mmengine/utils/dl_utils/safe_load.py")


def test_L6_is_a_level_of_the_ladder_and_model_extends_it():
    assert ladder.LEVELS[-1] == "L6" and ladder.TITLES["L6"] == "checkpoints" and ladder.NEEDS["L6"] == "L4"
    assert ladder.parse_levels("L6") == ("L6",)
    with pytest.raises(Exception, match="--model extends L5 and L6"):
        ladder.run_ladder(levels=("L1",), models=("faster-rcnn",))


def test_a_cpu_cycle_hides_the_gpus_from_mmengines_runner_and_a_cuda_one_does_not():
    """mmengine's Runner moves the model to get_device(): on the H100 (recipe-run10) the CPU cycle's
    Runner phases ran on the GPU and its bare load on the CPU, so their predictions differed."""
    base = {"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "0"}
    assert checkpoint_cycle.phase_env("cpu", base) == {"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "-1"}
    assert checkpoint_cycle.phase_env("cuda", base) == base
    assert checkpoint_cycle.phase_env("cuda:0", {"PATH": "/usr/bin"}) == {"PATH": "/usr/bin"}


def test_a_model_the_runner_put_elsewhere_fails_the_phase_by_name():
    import torch

    net = torch.nn.Linear(2, 1)
    assert checkpoint_cycle._misplaced(net, "cpu") == ""
    assert checkpoint_cycle._misplaced(net, "cuda") == "mmengine's Runner put the model on cpu, not cuda"
