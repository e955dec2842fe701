"""Precision ``auto`` and the machine record (issue 27): bf16 only where it is native and measured faster."""

import torch

from concrete_jungle import machine
from concrete_jungle.params import LoopParams

AMX = {"avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}


def test_amx_usable_needs_the_tiles_and_no_isa_cap():
    assert machine.amx_usable(AMX, env={})
    assert machine.amx_usable(AMX, env={"ONEDNN_MAX_CPU_ISA": "avx512_core_amx"})
    assert not machine.amx_usable(AMX, env={"ONEDNN_MAX_CPU_ISA": "AVX2"})  # the cap that mimics an AVX2-only CPU
    assert not machine.amx_usable(AMX, env={"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"})
    assert not machine.amx_usable(AMX - {"amx_bf16"}, env={})
    # AVX-512 BF16 without AMX: measured slower in bf16 than fp32 (world base model 1.49 vs 2.01 step/s)
    assert not machine.amx_usable({"avx2", "avx512f", "avx512_bf16"}, env={})


def test_resolve_precision_keeps_explicit_values_and_resolves_auto_by_measurement(monkeypatch):
    assert machine.resolve_precision("fp32", "cpu") == "fp32"
    assert machine.resolve_precision("bf16", "cpu") == "bf16"
    for speedup, want in [(1.76, "bf16"), (1.2, "bf16"), (1.19, "fp32"), (0.95, "fp32"), (0.03, "fp32"),
                          (None, "fp32")]:  # None: no bf16 kernels (ONEDNN_MAX_CPU_ISA=AVX2 reports that)
        monkeypatch.setattr(machine, "cpu_bf16_speedup", lambda s=speedup: s)
        assert machine.resolve_precision("auto", torch.device("cpu")) == want, speedup
    assert machine.resolve_precision("auto", "meta") == "fp32"


def test_the_probe_leaves_the_rng_alone_and_is_measured_once(monkeypatch):
    monkeypatch.setattr(machine, "_SPEEDUP", {})
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    first = machine.cpu_bf16_speedup()
    assert torch.equal(torch.rand(3), expected)
    assert first is None or first > 0
    assert machine._SPEEDUP == {torch.get_num_threads(): first}
    monkeypatch.setitem(machine._SPEEDUP, torch.get_num_threads(), 9.0)
    assert machine.cpu_bf16_speedup() == 9.0  # cached per thread count


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
    monkeypatch.setattr(machine, "cpu_bf16_speedup", lambda: 1.5)
    assert machine.machine_info()["bf16_speedup"] == 1.5
    quiet = machine.machine_info(timing=False)  # training metrics: the verdict, not a timing
    assert quiet["bf16_faster"] is True and "bf16_speedup" not in quiet
