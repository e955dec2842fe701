"""The machine a run trains on, and the training precision ``auto`` resolves to there.

CPUs differ between machines: some compute bf16 natively and faster than fp32, others emulate it, where a bf16
matmul is ~35x slower (AVX2 only; ``../shared/notes/cpu-precision.md``), and the ISA flags alone do not tell which:
a 2-core Xeon with AVX-512 BF16 (no AMX) trained the world base model slower in bf16 (1.49 vs 2.01 step/s), while
a 2-core AMD EPYC with AVX-512 BF16 (no AMX) ran the world training step 1.76x faster in bf16 (180 vs 316 ms,
``benchmarks/train_step.py``). So on a CPU ``auto`` **measures**: bf16 only where oneDNN has bf16 kernels
(``torch.ops.mkldnn._is_mkldnn_bf16_supported()``, which honours ``ONEDNN_MAX_CPU_ISA``) and a small autocast probe
(:func:`cpu_bf16_speedup`: forward + backward of a 512-1024-512 MLP on 256 rows, fastest rounds) runs at least
:data:`BF16_MIN_SPEEDUP` times faster in bf16 than in fp32; the verdict is measured once per machine and kept
(:func:`probe_cache`), so runs on one machine do not flip with its load. On CUDA ``auto`` picks bf16 where the device supports
it; anywhere else fp32.

Every training summary (``metrics/<p>/train/*.json``) and every benchmark JSON records :func:`machine_info`: CPU
model, the ISA flags that decide matmul speed, the ISA caps in the environment, torch's threads and kernel
capability, oneDNN's bf16 support, the probe's speed-up, and the CUDA device when one is used. Nothing here imports
torch at module level.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

__all__ = ["ISA_FLAGS", "ISA_ENV", "BF16_MIN_SPEEDUP", "cpu_model_and_flags", "amx_usable", "probe_cache",
           "cpu_bf16_speedup",
           "native_bf16", "resolve_precision", "machine_info"]

#: the /proc/cpuinfo flags recorded (the ones that decide fp32 / bf16 matmul speed)
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16")
#: environment variables that cap the ISA (or the threads) torch, oneDNN and MKL use
ISA_ENV = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY",
           "OMP_NUM_THREADS", "MKL_NUM_THREADS")
#: bf16 autocast must run the probe at least this many times faster than fp32 for ``auto`` to pick it on a CPU
#: (measured: 1.4-2.0 on the AMD EPYC above, 0.47 there under ``ONEDNN_MAX_CPU_ISA=AVX512_CORE``, 0.03 under ``AVX2``)
BF16_MIN_SPEEDUP = 1.2
#: ``ONEDNN_MAX_CPU_ISA`` values that still let oneDNN use AMX (oneDNN's names; unset means "all")
_AMX_CAPS = ("ALL", "DEFAULT", "AVX512_CORE_AMX", "AVX512_CORE_AMX_FP16", "AVX10_1_512_AMX", "AVX10_1_512_AMX_FP16",
             "AVX10_2_512_AMX_2")


def cpu_model_and_flags(cpuinfo: str = "/proc/cpuinfo") -> tuple[str | None, set[str]]:
    """The first CPU's ``model name`` and ``flags`` from ``cpuinfo`` (``(platform.processor() or None, set())``
    where the file is absent: not Linux)."""
    model, flags = None, set()
    try:
        with open(cpuinfo) as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model is None:
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return model or platform.processor() or None, flags


def amx_usable(flags: set[str], env: dict[str, str] | None = None) -> bool:
    """True when the CPU has AMX bf16 tiles (``amx_bf16`` and ``amx_tile`` in ``flags``) and no oneDNN ISA cap
    in ``env`` (default ``os.environ``) forbids them."""
    env = os.environ if env is None else env
    if not {"amx_bf16", "amx_tile"} <= flags:
        return False
    cap = (env.get("ONEDNN_MAX_CPU_ISA") or env.get("DNNL_MAX_CPU_ISA") or "ALL").strip().upper()
    return cap in _AMX_CAPS


_SPEEDUP: dict[str, float | None] = {}  # machine key -> speed-up measured or read in this process


def _machine_key() -> str:
    """What the probe's verdict depends on: CPU model and flags, torch version and threads, the ISA caps."""
    import torch

    model, flags = cpu_model_and_flags()
    caps = ",".join(f"{k}={os.environ[k]}" for k in ISA_ENV if k in os.environ)
    return f"{model}|{' '.join(f for f in ISA_FLAGS if f in flags)}|torch {torch.__version__}|" \
           f"threads {torch.get_num_threads()}|{caps}"


def probe_cache() -> Path:
    """The per-machine record of the probe's verdicts: ``$CONCRETE_JUNGLE_CACHE`` or ``$XDG_CACHE_HOME`` /
    ``~/.cache`` + ``concrete_jungle/bf16_probe.json`` (``{machine key: speed-up}``)."""
    root = os.environ.get("CONCRETE_JUNGLE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "concrete_jungle")
    return Path(root) / "bf16_probe.json"


def cpu_bf16_speedup() -> float | None:
    """fp32 time / bf16-autocast time of a small probe on this CPU with torch's current threads: forward and backward
    of a 512-1024-512 GELU MLP on 256 rows (the shapes of the world model's blocks), interleaved, 11 rounds after a
    warm-up, the **fastest** round of each (load only adds time, so the minimum is what the CPU can do); stops early
    when bf16 is over 10x slower (an emulating CPU). None where oneDNN has no bf16 kernels (under
    ``ONEDNN_MAX_CPU_ISA=AVX2``, say). Measured **once per machine**: the verdict is kept in :func:`probe_cache`
    under the machine key (CPU model, flags, torch version and threads, ISA caps), so every training stage of every
    run on that machine resolves ``auto`` alike, whatever else loads the machine (delete the file to measure anew).
    About 0.3 s on a quiet native-bf16 CPU, a few seconds on a loaded one; the caller's RNG, grad mode and threads
    are left as they were."""
    import json
    import time

    import torch

    key = _machine_key()
    if key in _SPEEDUP:
        return _SPEEDUP[key]
    try:
        supported = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        supported = False
    if not supported:
        _SPEEDUP[key] = None
        return None
    cache = probe_cache()
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if isinstance(known, dict) and isinstance(known.get(key), (int, float)):
        _SPEEDUP[key] = float(known[key])
        return _SPEEDUP[key]
    mlp = x = None

    def run(bf16: bool) -> float:
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            y = mlp(x).float().sum()
        y.backward()
        return time.perf_counter() - t0

    times: dict[bool, list[float]] = {False: [], True: []}
    with torch.random.fork_rng(devices=[]), torch.enable_grad():  # the caller's RNG and grad mode are kept
        torch.manual_seed(0)
        mlp = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 512))
        x = torch.randn(256, 512)
        run(False), run(True)  # warm-up
        for _ in range(11):
            for bf16 in (False, True):
                times[bf16].append(run(bf16))
            if times[True][-1] > 10 * times[False][-1]:
                break
    _SPEEDUP[key] = round(min(times[False]) / min(times[True]), 3)
    try:  # atomically, so concurrent stages never read half a file
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**(known if isinstance(known, dict) else {}), key: _SPEEDUP[key]}, indent=1))
        os.replace(tmp, cache)
    except OSError:  # a read-only home: measured again by the next process
        pass
    return _SPEEDUP[key]


def native_bf16(device: Any) -> bool:
    """Whether training in bf16 on ``device`` (a ``torch.device`` or its string) is native and faster than fp32:
    CUDA with bf16 support; a CPU where :func:`cpu_bf16_speedup` is at least :data:`BF16_MIN_SPEEDUP`; False on
    any other device."""
    import torch

    kind = torch.device(device).type
    if kind == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    if kind != "cpu":
        return False
    speedup = cpu_bf16_speedup()
    return speedup is not None and speedup >= BF16_MIN_SPEEDUP


def resolve_precision(precision: str, device: Any) -> str:
    """The precision a run computes in: ``"fp32"`` / ``"bf16"`` as given; ``"auto"``: ``"bf16"`` where
    :func:`native_bf16` holds for ``device``, else ``"fp32"``.

    Raises:
        ValueError: ``precision`` is none of ``fp32``, ``bf16``, ``auto`` (names the value).
    """
    if precision in ("fp32", "bf16"):
        return precision
    if precision == "auto":
        return "bf16" if native_bf16(device) else "fp32"
    raise ValueError(f"precision must be 'fp32', 'bf16' or 'auto', got {precision!r}")


def machine_info(device: Any = None, timing: bool = True) -> dict:
    """What a timing or a trained result depends on: ``{"cpu_model", "isa_flags": [present flags of ISA_FLAGS],
    "isa_env": {capping variable: value}, "cpus", "torch", "torch_threads", "torch_cpu_capability",
    "mkldnn_bf16", "bf16_speedup" (:func:`cpu_bf16_speedup`), "amx_usable", "cuda_device" (name of ``device`` when
    it is CUDA, else None), "python", "machine"}`` (the torch fields None when torch cannot be imported).
    ``timing=False`` (training metrics, which re-runs on one machine reproduce byte for byte): ``"bf16_speedup"``
    is replaced by ``"bf16_faster"``, the probe's verdict (speed-up >= :data:`BF16_MIN_SPEEDUP`; None without bf16
    kernels)."""
    model, flags = cpu_model_and_flags()
    info: dict[str, Any] = {
        "cpu_model": model, "isa_flags": [f for f in ISA_FLAGS if f in flags],
        "isa_env": {k: os.environ[k] for k in ISA_ENV if k in os.environ}, "cpus": os.cpu_count(),
        "amx_usable": amx_usable(flags), "python": platform.python_version(), "machine": platform.machine()}
    try:
        import torch
    except ImportError:  # a benchmark without torch still records the CPU
        return {**info, "torch": None, "torch_threads": None, "torch_cpu_capability": None, "mkldnn_bf16": None,
                "bf16_speedup": None, "cuda_device": None}
    try:
        mkldnn_bf16 = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        mkldnn_bf16 = None
    speedup = cpu_bf16_speedup()
    cuda = None
    if device is not None and torch.device(device).type == "cuda" and torch.cuda.is_available():
        cuda = torch.cuda.get_device_name(torch.device(device))
    return {**info, "torch": str(torch.__version__), "torch_threads": torch.get_num_threads(),
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(), "mkldnn_bf16": mkldnn_bf16,
            **({"bf16_speedup": speedup} if timing else
               {"bf16_faster": None if speedup is None else speedup >= BF16_MIN_SPEEDUP}), "cuda_device": cuda}
