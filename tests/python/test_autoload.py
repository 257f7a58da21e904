"""Device-backend autoload: `import torch` alone brings the tpu device up, in
fresh processes that never name torch_tpu (torchrun scripts, spawned
DataLoader workers), and TORCH_DEVICE_BACKEND_AUTOLOAD=0 leaves torch as it is."""

import subprocess
import sys

from conftest import run_python, run_torchrun

_NO_IMPORT = r"""
import sys, torch
assert "torch_tpu" in sys.modules, "import torch did not load torch_tpu"
# The runtime starts on first use, not at import.
assert not torch.ops.torch_tpu._started()
x = torch.arange(6.0, device="tpu").reshape(2, 3)
assert x.device == torch.device("tpu", 0), x.device
assert (x * 2).sum().item() == 30.0
assert torch.tpu.is_available() and torch.tpu.device_count() >= 1
assert torch.accelerator.current_accelerator().type == "tpu"
print("ok")
"""


def test_import_torch_alone_brings_up_the_tpu_device_lazily():
    out = run_python(_NO_IMPORT, timeout=180)
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr


def test_importing_torch_tpu_first_still_works():
    """`import torch_tpu` before torch reaches the entry point while the
    package is still being imported."""
    out = run_python("import torch_tpu, torch; print(torch.ones(2, device='tpu').sum().item())", timeout=180)
    assert out.returncode == 0 and out.stdout.strip() == "2.0", out.stdout + out.stderr


def test_autoload_off_leaves_torch_untouched():
    code = r"""
import sys, torch
assert "torch_tpu" not in sys.modules
assert not hasattr(torch, "tpu")
try:
    torch.device("tpu")
    raise AssertionError("tpu known without torch_tpu")
except RuntimeError as e:
    assert "tpu" in str(e)
import torch_tpu
assert torch.ones(2, device="tpu").sum().item() == 2.0
print("ok")
"""
    out = run_python(code, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, timeout=180)
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr


_SPAWNED_LOADER = r"""
import torch
from torch.utils.data import DataLoader, Dataset


class OnDevice(Dataset):
    # Runs in the spawned worker, which imports torch and this script only.
    def __len__(self):
        return 4

    def __getitem__(self, i):
        t = torch.full((3,), float(i), device="tpu") * 2 + 1
        return t.cpu(), torch.tpu.device_count()


if __name__ == "__main__":
    loader = DataLoader(OnDevice(), batch_size=2, num_workers=2, multiprocessing_context="spawn", timeout=120)
    batches = [b for b in loader]
    values = torch.cat([b[0] for b in batches])
    assert values.tolist() == [[2.0 * i + 1] * 3 for i in range(4)], values
    assert all(int(c) >= 1 for b in batches for c in b[1])
    print("ok")
"""


def test_spawned_dataloader_worker_has_the_device(tmp_path):
    script = tmp_path / "loader.py"
    script.write_text(_SPAWNED_LOADER)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


_TORCHRUN = r"""
import os, sys, torch, torch.distributed as dist
# Written for CUDA with the device swapped: torch_tpu is never imported by name.
local_rank = int(os.environ["LOCAL_RANK"])
torch.tpu.set_device(local_rank)
dist.init_process_group("tpu")
t = torch.full((2,), float(dist.get_rank() + 1), device=f"tpu:{local_rank}")
dist.all_reduce(t)
assert t.cpu().tolist() == [3.0, 3.0], t
with open(os.path.join(os.environ["RESULTS"], f"rank{dist.get_rank()}"), "w") as f:
    f.write(f"{'torch_tpu' in sys.modules} {t.device}")
dist.destroy_process_group()
"""


def test_torchrun_script_without_the_import_uses_the_tpu_backend(tmp_path):
    r = run_torchrun(_TORCHRUN, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(2):
        assert (tmp_path / f"rank{rank}").read_text() == f"True tpu:{rank}"
