"""ARM CPUs (aarch64: Graviton, Ampere, Apple Silicon): their features, and the flags to build the kernels for them.

Linux reports an ARM CPU's features on /proc/cpuinfo's "Features" line (asimd, asimddp, i8mm, ...);
macOS has no /proc and answers sysctl's hw.optional.arm.FEAT_* instead, which `darwin_features_line`
turns into the same line. x86's `-march=native` is not what every ARM compiler takes (Apple's clang
refuses it; GCC and LLVM take `-mcpu=native`), so the build tries -mcpu=native, then -march=native,
then an -march built from the features the CPU reports, then the compiler's default (NEON, which every
aarch64 CPU has, without the dot products).
"""
from __future__ import annotations

import functools
import platform
import subprocess
import sys

MACHINES = ("aarch64", "arm64", "armv8l")
# What doctor reports of an ARM CPU: (name, the Features flags that make it).
UNITS = [("NEON", ("asimd",)), ("dotprod", ("asimddp",)), ("i8mm", ("i8mm",)), ("SVE", ("sve",)),
         ("BF16", ("bf16",))]
# Features flag -> the -march extension that lets the compiler use it.
EXTENSIONS = [("asimdhp", "fp16"), ("asimddp", "dotprod"), ("i8mm", "i8mm"), ("bf16", "bf16"), ("sve", "sve")]
# macOS sysctl names (hw.optional.arm.*) -> Linux's Features flags.
DARWIN = {"AdvSIMD": "asimd", "FEAT_FP16": "asimdhp", "FEAT_DotProd": "asimddp", "FEAT_I8MM": "i8mm",
          "FEAT_BF16": "bf16", "FEAT_SVE": "sve"}


def is_arm(flags: set[str] | None = None, machine: str | None = None) -> bool:
    """Whether this is an ARM CPU: by the flags it reports (asimd is aarch64's NEON), else the machine's name."""
    if flags:
        return "asimd" in flags
    return (machine or platform.machine()).lower() in MACHINES


def march(flags: set[str]) -> list[str]:
    """An -march for the features these Features flags name ([] when they do not say the CPU is ARM):
    Armv8.2-A, which every ARM CPU with dot products implements, plus each extension the CPU has."""
    if "asimd" not in flags:
        return []
    return ["-march=armv8.2-a" + "".join(f"+{ext}" for flag, ext in EXTENSIONS if flag in flags)]


def arches(flags: set[str]) -> list[list[str]]:
    """The architecture flags to try in turn on an ARM machine whose CPU reports these flags."""
    probed = march(flags)
    return [["-mcpu=native"], ["-march=native"], *([probed] if probed else []), []]


def units(flags: set[str]) -> dict[str, bool]:
    """Which of UNITS a CPU with these Features flags has."""
    return {name: all(f in flags for f in needs) for name, needs in UNITS}


@functools.cache
def darwin_features_line() -> str:
    """macOS on Apple Silicon: the CPU's features as a Linux Features line ('' elsewhere, or unreadable)."""
    if sys.platform != "darwin" or not is_arm():
        return ""
    try:
        done = subprocess.run(["sysctl", *(f"hw.optional.arm.{name}" for name in DARWIN)],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return "Features\t: " + " ".join(dict.fromkeys(["asimd", *darwin_flags(done.stdout)]))   # NEON: every aarch64


def darwin_flags(sysctl_output: str) -> list[str]:
    """sysctl's "hw.optional.arm.FEAT_DotProd: 1" lines -> the Linux flags of the features set to 1."""
    found = []
    for line in sysctl_output.splitlines():
        name, _, value = line.partition(":")
        flag = DARWIN.get(name.strip().rpartition(".")[2])
        if flag and value.strip() == "1":
            found.append(flag)
    return found
