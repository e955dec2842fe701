"""Precision ``auto`` and the machine record (issue 27): bf16 only where it is native and measured faster."""

import json

import pytest
import torch

from concrete_jungle import machine
from concrete_jungle.params import LoopParams

AMX = {"avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}


@pytest.fixture(autouse=True)
def _own_probe_cache(tmp_path, monkeypatch):
    """The probe's per-machine record goes to a test folder (tests fake CPUs and caps), measured afresh."""
    monkeypatch.setenv("CONCRETE_JUNGLE_CACHE", str(tmp_path / "probe"))
    monkeypatch.setattr(machine, "_SPEEDUP", {})


def test_amx_usable_needs_the_tiles_and_no_isa_cap():
    assert machine.amx_usable(AMX, env={})
    assert machine.amx_usable(AMX, env={"ONEDNN_MAX_CPU_ISA": "avx512_core_amx"})
    assert not machine.amx_usable(AMX, env={"ONEDNN_MAX_CPU_ISA": "AVX2"})  # the cap that mimics an AVX2-only CPU
    assert not machine.amx_usable(AMX, env={"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"})
    assert not machine.amx_usable(AMX - {"amx_bf16"}, env={})
    # no tiles (recorded as information; `auto` decides by measurement, not by these flags)
    assert not machine.amx_usable({"avx2", "avx512f", "avx512_bf16"}, env={})


def test_resolve_precision_keeps_explicit_values_and_resolves_auto_by_measurement(monkeypatch):
    assert machine.resolve_precision("fp32", "cpu") == "fp32"
    assert machine.resolve_precision("bf16", "cpu") == "bf16"
    for speedup, want in [(1.76, "bf16"), (1.2, "bf16"), (1.19, "fp32"), (0.95, "fp32"), (0.03, "fp32"),
                          (None, "fp32")]:  # None: no bf16 kernels (ONEDNN_MAX_CPU_ISA=AVX2 reports that)
        monkeypatch.setattr(machine, "cpu_bf16_speedup", lambda s=speedup: s)
        assert machine.resolve_precision("auto", torch.device("cpu")) == want, speedup
    assert machine.resolve_precision("auto", "meta") == "fp32"


def test_the_probe_keeps_rng_and_grad_mode_and_is_measured_once_per_machine(monkeypatch, tmp_path):
    monkeypatch.setenv("CONCRETE_JUNGLE_CACHE", str(tmp_path))
    monkeypatch.setattr(machine, "_SPEEDUP", {})
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    with torch.no_grad():  # a caller under no_grad still gets a measurement
        first = machine.cpu_bf16_speedup()
        assert not torch.is_grad_enabled()
    assert torch.equal(torch.rand(3), expected)
    key = machine._machine_key()
    assert machine._SPEEDUP == {key: first}
    if first is None:  # no bf16 kernels here: nothing measured, nothing kept
        assert not (tmp_path / "bf16_probe.json").exists()
        return
    assert first > 0 and json.loads((tmp_path / "bf16_probe.json").read_text()) == {key: first}
    # another process on this machine reads the verdict instead of measuring under whatever load it meets
    monkeypatch.setattr(machine, "_SPEEDUP", {})
    (tmp_path / "bf16_probe.json").write_text(json.dumps({key: 0.5, "other machine": 3.0}))
    assert machine.cpu_bf16_speedup() == 0.5
    assert machine.resolve_precision("auto", "cpu") == "fp32"


def test_resolve_precision_names_a_bad_value():
    try:
        machine.resolve_precision("fp16", "cpu")
    except ValueError as err:
        assert "'fp16'" in str(err)
    else:
        raise AssertionError("fp16 was accepted")


def test_auto_is_the_default_training_precision():
    assert LoopParams().precision == "auto"


def test_machine_info_records_cpu_flags_threads(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: fpu avx2 fma avx512f avx512_bf16\n"
                       "processor\t: 1\nmodel name\t: other\nflags\t\t: fpu\n")
    assert machine.cpu_model_and_flags(str(cpuinfo)) == ("Test CPU 9000", {"fpu", "avx2", "fma", "avx512f",
                                                                           "avx512_bf16"})
    monkeypatch.setattr(machine, "cpu_model_and_flags", lambda: ("Test CPU 9000", {"fpu", "avx2", "fma"}))
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    info = machine.machine_info()
    assert info["cpu_model"] == "Test CPU 9000" and info["isa_flags"] == ["avx2", "fma"]
    assert info["isa_env"]["ONEDNN_MAX_CPU_ISA"] == "AVX2" and info["amx_usable"] is False
    assert info["torch_threads"] == torch.get_num_threads() and info["cuda_device"] is None
    assert type(info["torch"]) is str  # plain str: summaries are pickled with weights_only loads
    monkeypatch.setattr(machine, "cpu_bf16_speedup", lambda: 1.5)
    assert machine.machine_info()["bf16_speedup"] == 1.5
    quiet = machine.machine_info(timing=False)  # training metrics: the verdict, not a timing
    assert quiet["bf16_faster"] is True and "bf16_speedup" not in quiet
