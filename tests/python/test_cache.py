"""The compilation cache: bounded in memory, persistent on disk, safe with
several processes writing at once, and tolerant of damaged entries."""

import os
import subprocess
import sys

import pytest
import torch

import torch_tpu
from conftest import run_python

# A small program with a few distinct compiled steps; prints its result and
# the cache statistics as one line of JSON.
PROGRAM = """
import json, torch, torch_tpu
x = torch.arange(12.0, device='tpu').reshape(3, 4)
y = ((x.t() @ x).sum(0) * 0.5 - 1).exp().log()
s = torch_tpu.cache_stats()
print(json.dumps({"y": y.cpu().tolist(), "misses": s["misses"], "disk_hits": s["disk_hits"],
                  "preloaded": s["preloaded"],
                  "entries": s["entries"], "evictions": s["evictions"], "dir": s["dir"]}))
"""
EXPECTED = (((torch.arange(12.0).reshape(3, 4).t() @ torch.arange(12.0).reshape(3, 4)).sum(0) * 0.5 - 1)
            .exp().log().tolist())


def _run(env, code=PROGRAM):
    import json

    # Strict eager whatever the suite runs in: the checks count its programs.
    env = dict(env, TORCH_TPU_DEFER_AND_FUSE=None, TORCH_TPU_LAUNCH_BLOCKING=None)
    r = run_python(code, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _check(out):
    torch.testing.assert_close(torch.tensor(out["y"]), torch.tensor(EXPECTED))


def test_default_directory_is_the_users_cache(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path), "TORCH_TPU_CACHE_DIR": None}
    out = _run(env)
    _check(out)
    assert out["dir"] == str(tmp_path / "torch_tpu" / "executables")
    assert any(p.suffix == ".xla" for p in (tmp_path / "torch_tpu" / "executables").iterdir())
    off = _run({"XDG_CACHE_HOME": str(tmp_path), "TORCH_TPU_CACHE_DIR": "0"})
    assert off["dir"] == "" and off["disk_hits"] == 0


def test_memory_cache_is_bounded_least_recently_used_out(tmp_path):
    out = _run({"TORCH_TPU_CACHE_DIR": "0", "TORCH_TPU_CACHE_MAX_ENTRIES": "2"})
    _check(out)
    assert out["entries"] == 2
    assert out["evictions"] == out["misses"] - 2 > 0


MAPS_PROGRAM = """
import json, os, torch, torch_tpu
def maps():
    return sum(1 for _ in open('/proc/self/maps'))
base = maps()
os.environ['TORCH_TPU_CACHE_MAX_MAPS'] = str(base + BUDGET)  # read when the device starts
peak, ok = 0, True
for n in range(1, 81):
    x = torch.arange(n, dtype=torch.float32, device='tpu')
    ok &= float((x * 2 + 1).sum().cpu()) == float(n * n)
    peak = max(peak, maps())
s = torch_tpu.cache_stats()
print(json.dumps({"base": base, "peak": peak, "ok": ok, "misses": s["misses"], "entries": s["entries"],
                  "evictions": s["evictions"]}))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux's /proc/self/maps")
@pytest.mark.parametrize("budget", [300, None], ids=["small budget", "default budget"])
def test_cached_executables_stay_within_the_process_memory_map_budget(budget):
    # Each loaded executable holds memory mappings of its own; a process at
    # the kernel's limit (vm.max_map_count) cannot load the next one and
    # crashes. The cache lets its oldest executables go to stay within a
    # budget (TORCH_TPU_CACHE_MAX_MAPS; by default half the limit).
    code = MAPS_PROGRAM.replace("BUDGET", str(budget or 10**9))
    out = _run({"TORCH_TPU_CACHE_DIR": "0"}, code)
    assert out["ok"] and out["misses"] >= 160  # distinct programs for each length
    if budget is None:  # nothing to trim: every program stays
        assert out["evictions"] == 0 and out["entries"] == out["misses"]
        assert out["peak"] - out["base"] > 2 * 300  # the small budget below binds
    else:
        assert out["evictions"] > 0 and out["entries"] < out["misses"]
        # Checked every 16 programs: a little over the budget at most.
        assert out["peak"] <= out["base"] + budget + 150, out


def test_corrupt_and_truncated_entries_are_recompiled(tmp_path):
    env = {"TORCH_TPU_CACHE_DIR": str(tmp_path)}
    first = _run(env)
    files = sorted(p for p in tmp_path.iterdir() if p.suffix == ".xla")
    assert len(files) == first["misses"] > 0
    # Damage every entry a different way.
    for i, p in enumerate(files):
        data = p.read_bytes()
        if i % 4 == 0:
            p.write_bytes(data[: len(data) // 2])  # truncated
        elif i % 4 == 1:
            p.write_bytes(data[:-100] + bytes(100))  # payload bytes changed
        elif i % 4 == 2:
            p.write_bytes(b"garbage" * 10)  # not ours
        else:
            p.write_bytes(b"")  # empty
    second = _run(env)
    _check(second)
    assert second["disk_hits"] == 0 and second["misses"] == first["misses"]
    # The recompiled entries replaced the damaged ones.
    third = _run(env)
    _check(third)
    assert third["misses"] == 0 and third["disk_hits"] + third["preloaded"] == first["misses"]


def test_entries_that_are_not_regular_files_are_misses_not_hangs(tmp_path):
    """A FIFO, a symlink to one or a directory in an entry's or the session list's place is a miss."""
    import json

    env = {"TORCH_TPU_CACHE_DIR": str(tmp_path), "TORCH_TPU_SESSION": "fifo-test"}
    first = _run(env)
    files = sorted(p for p in tmp_path.iterdir() if p.suffix == ".xla")
    lists = [p for p in tmp_path.iterdir() if p.name.startswith("session-")]
    assert len(files) == first["misses"] >= 4 and len(lists) == 1
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / "pipe")
    kept = tmp_path / "fifo" / "kept"
    os.rename(files[3], kept)
    for p in files[:3] + lists:
        p.unlink(missing_ok=True)
    os.mkfifo(files[0])  # read, a FIFO without a writer blocks
    os.symlink(tmp_path / "fifo" / "pipe", files[1])
    files[2].mkdir()
    os.symlink(kept, files[3])  # a symlink to a regular entry still reads
    os.mkfifo(lists[0])  # the preloader's list, read when the device starts
    env = dict(env, TORCH_TPU_DEFER_AND_FUSE=None, TORCH_TPU_LAUNCH_BLOCKING=None)
    r = run_python(PROGRAM, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    second = json.loads(r.stdout.strip().splitlines()[-1])
    _check(second)
    assert second["misses"] == 3 and second["disk_hits"] == first["misses"] - 3 and second["preloaded"] == 0
    # The recompiled entries replaced the FIFOs; a directory cannot be replaced.
    assert files[0].is_file() and files[1].is_file() and files[2].is_dir()
    third = _run(env)
    _check(third)
    assert third["misses"] == 1


def test_a_process_like_an_earlier_one_preloads_its_programs(tmp_path):
    env = {"TORCH_TPU_CACHE_DIR": str(tmp_path), "TORCH_TPU_SESSION": None}
    first = _run(env)
    lists = [p for p in tmp_path.iterdir() if p.name.startswith("session-")]
    assert len(lists) == 1 and len(lists[0].read_text().split()) == first["misses"]
    second = _run(env)
    _check(second)
    # The same command again: its programs were loaded ahead from the start
    # of the device (or when needed, had the preloader not reached them yet).
    assert second["misses"] == 0 and second["preloaded"] >= 1
    assert second["disk_hits"] + second["preloaded"] == first["misses"]
    # A damaged list or missing entries only mean fewer preloads.
    lists[0].write_text("garbage\n" + "0123456789abcdef\n" * 3 + lists[0].read_text()[:10])
    third = _run(env)
    _check(third)
    assert third["misses"] == 0
    for p in tmp_path.iterdir():
        if p.suffix == ".xla":
            p.unlink()
    fourth = _run(env)
    _check(fourth)
    assert fourth["misses"] == first["misses"] and fourth["preloaded"] == 0
    # TORCH_TPU_SESSION=0: no session, no preloading
    off = _run(dict(env, TORCH_TPU_SESSION="0"))
    _check(off)
    assert off["preloaded"] == 0 and off["disk_hits"] == first["misses"]


def test_concurrent_processes_share_one_directory(tmp_path):
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(tmp_path))
    env.pop("TORCH_TPU_DEFER_AND_FUSE", None)  # strict eager, as _run
    env.pop("TORCH_TPU_LAUNCH_BLOCKING", None)
    procs = [subprocess.Popen([sys.executable, "-c", PROGRAM], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    import json

    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        _check(json.loads(out.strip().splitlines()[-1]))
    assert not [p for p in tmp_path.iterdir() if ".tmp." in p.name]  # no leftovers
    after = _run({"TORCH_TPU_CACHE_DIR": str(tmp_path)})
    assert after["misses"] == 0 and after["disk_hits"] + after["preloaded"] > 0


def test_clear_cache_in_memory_and_on_disk(tmp_path):
    code = PROGRAM + """
import torch_tpu, json
removed = torch_tpu.clear_cache(disk=True)
s = torch.tpu.cache_stats()
print(json.dumps({"y": [], "misses": s["misses"], "disk_hits": removed, "entries": s["entries"],
                  "evictions": 0, "dir": s["dir"]}))
"""
    out = _run({"TORCH_TPU_CACHE_DIR": str(tmp_path)}, code)
    assert out["entries"] == 0 and out["misses"] == 0 and out["disk_hits"] > 0
    assert not [p for p in tmp_path.iterdir() if p.suffix == ".xla"]


def test_cache_statistics_from_torch_tpu_module():
    s = torch.tpu.cache_stats()
    assert set(s) >= {"hits", "misses", "disk_hits", "entries", "evictions", "compile_seconds", "dir"}
    assert s == torch_tpu.cache_stats() or s["hits"] <= torch_tpu.cache_stats()["hits"]
