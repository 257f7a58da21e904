"""Our PJRT C API declarations against the ABI description shipped by pypjrt."""

import pytest
import torch

import torch_tpu  # noqa: F401

abi = pytest.importorskip("pypjrt._abi.pjrt_0_114")


def layout():
    facts = {}
    for line in str(torch.ops.torch_tpu._abi_layout()).splitlines():
        kind, name, value = line.split()
        facts[(kind, name)] = int(value)
    return facts


def test_every_slot_offset_matches():
    facts = layout()
    slots = {n: v for (k, n), v in facts.items() if k == "slot"}
    assert len(slots) == len(abi.SLOT), "we declare a different number of PJRT_Api slots"
    for name, index in abi.SLOT.items():
        assert slots[name] == abi.VTABLE_OFFSET + 8 * index, name


def test_api_struct_size():
    assert layout()[("size", "PJRT_Api")] == abi.PJRT_Api_STRUCT_SIZE


def test_struct_sizes_and_fields_match():
    facts = layout()
    checked = 0
    for (kind, name), value in facts.items():
        if kind == "size" and name != "PJRT_Api":
            assert value == __import__("ctypes").sizeof(getattr(abi, name)), name
            checked += 1
        elif kind == "field":
            struct, member = name.split(".")
            assert value == getattr(getattr(abi, struct), member).offset, name
            checked += 1
    assert checked > 100


def test_enum_values_match():
    for (kind, name), value in layout().items():
        if kind == "enum":
            assert value == getattr(abi, name), name
