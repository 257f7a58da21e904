"""Bad input gets a clear error of PyTorch's own type; nothing crashes and
no other tensor is touched. Missing lowerings name the op and the fallback."""

import os
import subprocess
import textwrap

import pytest
import torch

import torch_tpu
from conftest import run_python

CASES = [
    ("mm shapes", lambda d: torch.mm(torch.ones(2, 3, device=d), torch.ones(4, 5, device=d))),
    ("broadcast", lambda d: torch.ones(2, 3, device=d) + torch.ones(4, 5, device=d)),
    ("dim range", lambda d: torch.ones(2, 3, device=d).sum(5)),
    ("cat sizes", lambda d: torch.cat([torch.ones(2, 3, device=d), torch.ones(2, 4, device=d)])),
    ("view size", lambda d: torch.ones(6, device=d).view(4, 2)),
    ("index range", lambda d: torch.ones(3, device=d)[5]),
    ("bitwise float", lambda d: torch.ones(3, device=d) & torch.ones(3, device=d)),
    ("mean of ints", lambda d: torch.ones(3, dtype=torch.int64, device=d).mean()),
    ("in-place cast", lambda d: torch.ones(3, dtype=torch.int64, device=d).add_(0.5)),
    ("in-place broadcast", lambda d: torch.ones(3, 1, device=d).add_(torch.ones(3, 4, device=d))),
    ("mm dtypes", lambda d: torch.mm(torch.ones(2, 2, device=d), torch.ones(2, 2, dtype=torch.float64, device=d))),
    ("neg bool", lambda d: -torch.ones(2, dtype=torch.bool, device=d)),
    ("fill_ non-scalar", lambda d: torch.ones(3, device=d).fill_(torch.ones(2, device=d))),
]


@pytest.mark.parametrize("name,fn", CASES, ids=[c[0] for c in CASES])
def test_same_error_type_as_cpu(name, fn):
    with pytest.raises(Exception) as cpu_err:
        fn("cpu")
    keep = torch.arange(4.0, device="tpu")
    with pytest.raises(Exception) as tpu_err:
        fn("tpu")
    assert type(tpu_err.value) is type(cpu_err.value), (tpu_err.value, cpu_err.value)
    assert torch.equal(keep.cpu(), torch.arange(4.0))  # other tensors are untouched


def test_shape_error_message_names_the_shapes():
    with pytest.raises(RuntimeError, match=r"2x3 and 4x5"):
        torch.mm(torch.ones(2, 3, device="tpu"), torch.ones(4, 5, device="tpu"))


# An op with no lowering (the LDL factorization of a symmetric matrix).
UNLOWERED_OP = "aten::linalg_ldl_factor_ex.out"


def test_missing_lowering_names_op_and_fallback():
    x = torch.randn(4, 4, device="tpu")
    with pytest.raises(NotImplementedError) as e:
        torch.linalg.ldl_factor(x)
    msg = str(e.value)
    assert UNLOWERED_OP in msg and "tpu" in msg
    assert "TORCH_TPU_CPU_FALLBACK=1" in msg and "set_cpu_fallback(True)" in msg


def test_cpu_fallback_is_opt_in_and_counted():
    assert not torch_tpu.cpu_fallback_enabled()
    x = torch.randn(4, 4)
    x = x @ x.T + torch.eye(4)
    torch_tpu.set_cpu_fallback(True)
    try:
        before = torch_tpu.cpu_fallback_counts().get(UNLOWERED_OP, 0)
        y = torch.linalg.ldl_factor(x.to("tpu"))[0]
        assert y.device.type == "tpu"
        torch.testing.assert_close(y.cpu(), torch.linalg.ldl_factor(x)[0])
        assert torch_tpu.cpu_fallback_counts()[UNLOWERED_OP] == before + 1
    finally:
        torch_tpu.set_cpu_fallback(False)
    with pytest.raises(NotImplementedError):
        torch.linalg.ldl_factor(x.to("tpu"))


def test_cpu_fallback_from_environment():
    r = run_python(
        "import torch, torch_tpu\n"
        "y = torch.linalg.ldl_factor(torch.eye(3, device='tpu'))\n"
        "print(torch_tpu.cpu_fallback_counts())\n",
        env={"TORCH_TPU_CPU_FALLBACK": "1"},
    )
    assert r.returncode == 0, r.stderr
    assert UNLOWERED_OP in r.stdout


def test_missing_plugin_is_a_clear_error():
    r = run_python(
        "import torch, torch_tpu\n"
        "print(torch.tpu.is_available())\n"
        "try:\n"
        "    torch.ones(2, device='tpu')\n"
        "except RuntimeError as e:\n"
        "    print('ERROR', e)\n",
        env={"TORCH_TPU_PJRT_PLUGIN": "/nonexistent/plugin.so"},
    )
    assert r.returncode == 0, r.stderr
    assert "False" in r.stdout
    assert "ERROR" in r.stdout and "/nonexistent/plugin.so" in r.stdout and "pip install" in r.stdout


def test_not_a_plugin_is_a_clear_error(tmp_path):
    bogus = tmp_path / "bogus.so"
    bogus.write_text("not an ELF file")
    r = run_python(
        "import torch, torch_tpu\n"
        "try:\n"
        "    torch.tpu.init()\n"
        "except RuntimeError as e:\n"
        "    print('ERROR', e)\n",
        env={"TORCH_TPU_PJRT_PLUGIN": str(bogus)},
    )
    assert "ERROR could not load PJRT plugin" in r.stdout, r.stdout + r.stderr


def test_unsupported_api_version_is_a_clear_error(tmp_path):
    src = tmp_path / "old_plugin.c"
    # A plugin claiming PJRT C API 0.10: only the version header matters.
    src.write_text(textwrap.dedent("""
        #include <stddef.h>
        struct Version { size_t struct_size; void* ext; int major; int minor; };
        struct Api { size_t struct_size; void* ext; struct Version version; void* slots[200]; };
        static struct Api api = { sizeof(struct Api), 0, { sizeof(struct Version), 0, 0, 10 } };
        const struct Api* GetPjrtApi(void) { return &api; }
    """))
    lib = tmp_path / "libold_plugin.so"
    cc = subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], capture_output=True, text=True)
    if cc.returncode != 0:
        pytest.skip("no C compiler: " + cc.stderr)
    r = run_python(
        "import torch, torch_tpu\n"
        "try:\n"
        "    torch.tpu.init()\n"
        "except RuntimeError as e:\n"
        "    print('ERROR', e)\n",
        env={"TORCH_TPU_PJRT_PLUGIN": str(lib)},
    )
    assert "ERROR" in r.stdout and "0.10" in r.stdout and "Install a newer plugin" in r.stdout, r.stdout + r.stderr


def test_unsupported_dtype_is_a_type_error():
    with pytest.raises(TypeError, match="not supported on the tpu device"):
        torch.empty(3, dtype=torch.complex32, device="tpu")
    with pytest.raises(TypeError, match="not supported on the tpu device"):
        torch.zeros(3, dtype=torch.float8_e8m0fnu, device="tpu")


def test_out_of_range_index_raises_instead_of_clamping():
    x = torch.arange(5.0, device="tpu")
    with pytest.raises(IndexError, match="out of bounds for dimension 0 with size 5"):
        x[torch.tensor([1, 7], device="tpu")].cpu()
    assert torch.equal(x[torch.tensor([1, -1], device="tpu")].cpu(), torch.tensor([1.0, 4.0]))
    with pytest.raises(RuntimeError, match="out of bounds"):  # CPU's gather raises RuntimeError
        torch.gather(x, 0, torch.tensor([5], device="tpu")).cpu()
    with pytest.raises(IndexError, match="Target out of bounds"):
        torch.nn.functional.cross_entropy(torch.randn(2, 3, device="tpu"), torch.tensor([0, 5], device="tpu")).item()


def test_reading_an_empty_result_reports_its_ops_failed_check():
    """A read raises the failed checks of the ops before it even when it
    reads no data (an empty view of an out-of-range gather), so the error
    comes at that read, not at some later one."""
    x = torch.zeros(3, device="tpu")
    fused = torch_tpu.get_execution_mode() == "fused"
    with pytest.raises(IndexError, match="index out of range in self"):
        x.index_select(0, torch.tensor([5], device="tpu"))[:0].cpu()
        if fused:  # (fused eager records the op: the error comes once it runs)
            torch_tpu.flush()
            torch.tpu.synchronize()
    assert (torch.ones(2, device="tpu") + 1).cpu().tolist() == [2.0, 2.0]  # nothing left pending


def test_debug_mode_raises_index_errors_at_the_op():
    w = torch.randn(4, 3, device="tpu")
    with torch_tpu.execution_mode("debug"):
        with pytest.raises(IndexError, match="index out of range in self"):
            torch.nn.functional.embedding(torch.tensor([9], device="tpu"), w)
    # nothing is left pending afterwards
    torch.tpu.synchronize()
