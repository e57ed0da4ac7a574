"""The kernels built for aarch64 (NEON, dot products, i8mm) checked against their portable C results.

    python tools/kernel_check.py            # every aarch64 build under qemu against this machine's portable build

tools/kernel_check.c runs every kernel (float32 and each block format's products, attention,
the elementwise operations) on fixed inputs and checks each against a double-precision reference.
This builds it with backend/kernels/*.c natively with the portable C paths (the reference build),
and for aarch64 with Debian's GCC cross compiler for each of ARM_BUILDS and with clang where it is
installed (Apple's compiler is a clang); each aarch64 build runs under qemu-user with every feature
the emulator has (-cpu max). A build passes when its own checks pass, its quantized bytes equal the
reference build's, and its outputs are within TOLERANCE of the reference build's.
Nothing here measures speed: emulation is correctness only. On an ARM machine the driver built
natively checks that CPU's own build against the double-precision references:
    cc -O3 -pthread -std=gnu11 -Ibackend/kernels backend/kernels/*.c tools/kernel_check.c -lm && ./a.out /tmp/out

The tools are Debian's gcc-aarch64-linux-gnu and qemu-user (`tools()` names what is missing).
Builds are kept under the cache folder, keyed by the sources and flags.
"""
from __future__ import annotations

import hashlib
import os
import platform
import shutil
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "backend" / "kernels"
DRIVER = Path(__file__).with_suffix(".c")
CROSS = "aarch64-linux-gnu-gcc"
QEMU = ("qemu-aarch64", "qemu-aarch64-static")
SYSROOT = "/usr/aarch64-linux-gnu"   # Debian's aarch64 libc, for qemu's -L
# The aarch64 targets checked: NEON alone (every aarch64 CPU), and Armv8.6-A, which adds the dot
# products, i8mm and bf16, plus SVE (Graviton 3 has them all; Apple M2 all but SVE; -mcpu=native gives them).
ARM_BUILDS = {"armv8-a (neon)": ["-march=armv8-a"],
              "armv8.6-a+sve (neon, dotprod, i8mm, bf16, sve)": ["-march=armv8.6-a+sve"]}
# Largest difference from the reference build, relative to the largest reference output of a
# check: the builds differ only in the order of their float additions (about 1e-6 seen).
TOLERANCE = 2e-5


@dataclass(slots=True)
class Outcome:
    """One build's run: its report lines, its recorded outputs by check, its exit status."""
    name: str
    text: str
    records: dict[str, list[float]]
    returncode: int

    @property
    def isa(self) -> str:
        return self.text.splitlines()[0] if self.text else ""


def tools() -> tuple[list[str], str]:
    """(the qemu command with its sysroot, '') when the cross compiler and qemu-user are here, else ([], why not)."""
    qemu = next((q for q in QEMU if shutil.which(q)), None)
    missing = [name for name, found in ((CROSS, shutil.which(CROSS)), ("qemu-aarch64", qemu)) if not found]
    if missing:
        return [], f"{' and '.join(missing)} not installed (Debian: apt-get install gcc-aarch64-linux-gnu qemu-user)"
    if not Path(SYSROOT).is_dir():
        return [], f"no aarch64 libc at {SYSROOT} (Debian: apt-get install libc6-dev-arm64-cross)"
    return [qemu, "-L", SYSROOT, "-cpu", "max"], ""


def build(compiler: list[str], flags: list[str], cache: Path) -> Path:
    """The driver and the kernels compiled with these flags (kept in cache, keyed by sources and flags)."""
    sources = [*sorted(KERNELS.glob("*.c")), DRIVER]
    from backend.kernels import compile_flags
    common = [f for f in compile_flags(compiler) if f not in ("-shared", "-fPIC")] + ["-w"]   # the kernels' own
    digest = hashlib.sha256(" ".join([*compiler, *common, *flags]).encode())
    for f in [*sources, *sorted(KERNELS.glob("*.h"))]:
        digest.update(f.name.encode() + f.read_bytes())
    target = cache / f"kernel-check-{digest.hexdigest()[:16]}"
    if target.exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.partial")   # two runs building at once do not collide
    done = subprocess.run([*compiler, *flags, *common, f"-I{KERNELS}", *map(str, sources), "-lm", "-o", str(partial)],
                          capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise RuntimeError(f"{' '.join(compiler + flags)} failed: {done.stderr.strip()[-2000:]}")
    partial.replace(target)
    return target


def run(name: str, binary: Path, prefix: list[str], out: Path) -> Outcome:
    """Run one build, its outputs written to out."""
    done = subprocess.run([*prefix, str(binary), str(out)], capture_output=True, text=True, timeout=600)
    records = read_records(out.read_bytes()) if out.exists() else {}
    return Outcome(name, done.stdout + done.stderr, records, done.returncode)


def read_records(data: bytes) -> dict[str, list[float]]:
    """The driver's output file: (32-byte name, int64 count, count float32) records."""
    records, at = {}, 0
    while at < len(data):
        name = data[at:at + 32].rstrip(b"\0").decode()
        (count,) = struct.unpack_from("<q", data, at + 32)
        records[name] = list(struct.unpack_from(f"<{count}f", data, at + 40))
        at += 40 + 4 * count
    return records


def differences(got: Outcome, reference: Outcome) -> list[str]:
    """What keeps got from passing against the reference build, in words (empty: it passes)."""
    problems = [] if got.returncode == 0 else [f"its own checks failed (exit {got.returncode}):\n{got.text}"]
    missing = sorted(set(reference.records) - set(got.records))
    if missing:
        problems.append(f"no output for {', '.join(missing)}")
    for name, want in reference.records.items():
        have = got.records.get(name)
        if have is None:
            continue
        if len(have) != len(want):
            problems.append(f"{name}: {len(have)} values, the reference has {len(want)}")
        elif name.startswith("quantize"):
            if have != want:
                problems.append(f"{name}: bytes differ from the reference build's")
        else:
            top = max(max(abs(w) for w in want), 1e-30)
            worst = max(abs(h - w) if h == h else float("inf") for h, w in zip(have, want))
            if worst / top > TOLERANCE:
                problems.append(f"{name}: differs from the reference build by {worst / top:.3g} "
                                f"(tolerance {TOLERANCE})")
    return problems


def reference_flags() -> list[str]:
    """This machine's portable build: the plain C paths (no vector intrinsics) where the CPU is x86."""
    return ["-march=x86-64"] if platform.machine() in ("x86_64", "AMD64") else []


def arm_builds() -> dict[str, tuple[list[str], list[str]]]:
    """The builds to check: {name: (compiler, flags)}, GCC's for each of ARM_BUILDS, and clang's
    Armv8.6-A where clang is installed (Apple's compiler is a clang: its vector extensions and NEON
    headers are its own)."""
    builds = {f"gcc {name}": ([CROSS], flags) for name, flags in ARM_BUILDS.items()}
    if shutil.which("clang"):
        builds["clang armv8.6-a"] = (["clang", "--target=aarch64-linux-gnu"], ["-march=armv8.6-a"])
    return builds


def check_arm(cache: Path) -> dict[str, list[str]]:
    """Every arm_builds() build under qemu against the portable build: {build: its problems}."""
    prefix, why = tools()
    if why:
        raise RuntimeError(why)
    native = shutil.which("cc") or shutil.which("gcc")
    if native is None:
        raise RuntimeError("no native C compiler for the reference build")
    builds = arm_builds()
    with ThreadPoolExecutor() as pool:   # the builds are separate compiler processes: side by side
        portable = pool.submit(build, [native], reference_flags(), cache)
        arm = {name: pool.submit(build, compiler, flags, cache) for name, (compiler, flags) in builds.items()}
        reference = run("portable", portable.result(), [], cache / "portable.out")
        if reference.returncode:
            raise RuntimeError(f"the portable build fails its own checks:\n{reference.text}")
        binaries = {name: job.result() for name, job in arm.items()}
        # each emulated run is its own qemu process writing its own file: side by side too
        runs = {name: pool.submit(run, name, binary, prefix, cache / f"arm-{i}.out")
                for i, (name, binary) in enumerate(binaries.items())}
        outcomes = {name: job.result() for name, job in runs.items()}
    return {f"{name}: {outcome.isa}": differences(outcome, reference) for name, outcome in outcomes.items()}


def main() -> int:
    from backend.kernels import cache_folder
    try:
        results = check_arm(cache_folder() / "kernel-check")
    except RuntimeError as e:
        print(f"kernel check: {e}")
        return 2
    for name, problems in results.items():
        print(f"{name}: {'ok' if not problems else 'FAILED'}")
        for p in problems:
            print(f"  {p}")
    return 1 if any(results.values()) else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
