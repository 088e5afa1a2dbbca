"""Model FLOPs utilisation: the GPU's dense bf16 peak, read from its name, and 6·N·tokens/s over it.

Not a bench: the helper ``bench_sft_gpu.py`` and ``bench_rl_gpu.py`` share (``from mfu import ...``).
The peaks are the vendors' dense (no sparsity) bf16 tensor-core figures, in TFLOP/s.
"""

from __future__ import annotations

# Most specific name first: "H100 PCIe" and "H100 NVL" before "H100" (the SXM part).
PEAK_BF16_TFLOPS: tuple[tuple[str, float], ...] = (
    ("GB200", 2500.0),
    ("B200", 2250.0),
    ("GH200", 989.4),
    ("H200", 989.4),
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.4),
    ("H800", 989.4),
    ("A100", 312.0),
    ("A800", 312.0),
    ("L40S", 362.1),
    ("L40", 181.0),
    ("L4", 121.0),
    ("A10G", 70.0),
    ("A10", 125.0),
    ("RTX 6000 Ada", 364.2),
    ("RTX A6000", 154.8),
    ("RTX 4090", 165.2),
    ("RTX 3090", 71.0),
    ("MI300X", 1307.4),
)


def peak_tflops(device_name: str | None) -> float | None:
    """The dense bf16 peak of the GPU named ``device_name`` (as ``torch.cuda.get_device_name`` says
    it), or ``None`` for a GPU not in the table (or no GPU): MFU is then not reported."""
    if not device_name:
        return None
    name = device_name.upper()
    for key, peak in PEAK_BF16_TFLOPS:
        if key.upper() in name:
            return peak
    return None


def mfu(tokens_per_s: float, parameters: int, peak: float) -> float:
    """6 FLOPs per parameter per trained-or-not token (forward + backward; attention's quadratic
    term left out, as PaLM's appendix B does for short sequences) over the peak in TFLOP/s."""
    return 6.0 * parameters * tokens_per_s / (peak * 1e12)
