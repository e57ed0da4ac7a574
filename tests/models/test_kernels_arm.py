"""The kernels built for aarch64 pass their checks under emulation (tools/kernel_check.py).

Where Debian's aarch64 cross compiler and qemu-user are installed, each ARM build (NEON alone;
Armv8.6-A with dot products, i8mm and bf16) runs every kernel on fixed inputs under qemu and must
match its double-precision references, write the same quantized bytes as this machine's portable C
build and stay within the tolerance of its outputs. Elsewhere the test skips and says which tool
is missing. The comparison itself is checked on any machine with made-up outcomes.
"""
import pytest

from tools import kernel_check

PREFIX, MISSING = kernel_check.tools()


def outcome(records, returncode=0, text="isa NEON: neon\n0 failed\n"):
    return kernel_check.Outcome("build", text, records, returncode)


@pytest.mark.skipif(bool(MISSING), reason=f"the aarch64 checks need emulation: {MISSING}")
def test_every_arm_build_matches_the_portable_build_under_qemu(tmp_path_factory):
    from backend.kernels import cache_folder
    results = kernel_check.check_arm(cache_folder() / "kernel-check")
    assert len(results) == len(kernel_check.arm_builds()) >= len(kernel_check.ARM_BUILDS)
    assert any("dotprod" in name and "i8mm" in name for name in results), results   # the features were compiled in
    assert all("NEON" in name for name in results), results
    failed = {name: problems for name, problems in results.items() if problems}
    assert not failed, failed


def test_the_comparison_names_each_way_a_build_can_differ():
    reference = outcome({"quantize q8_0": [1.0, 2.0], "qlinear q8_0 n=1": [10.0, -20.0], "rms_norm": [1.0]})
    assert kernel_check.differences(outcome(dict(reference.records)), reference) == []
    close = outcome({"quantize q8_0": [1.0, 2.0], "qlinear q8_0 n=1": [10.0001, -20.0], "rms_norm": [1.0]})
    assert kernel_check.differences(close, reference) == []   # 5e-6 of the largest output
    bad = outcome({"quantize q8_0": [1.0, 3.0], "qlinear q8_0 n=1": [10.1, float("nan")]}, returncode=1,
                  text="qlinear q8_0 n=1 FAIL\n1 failed\n")
    problems = kernel_check.differences(bad, reference)
    assert problems[0].startswith("its own checks failed (exit 1)") and "1 failed" in problems[0]
    assert "no output for rms_norm" in problems
    assert "quantize q8_0: bytes differ from the reference build's" in problems
    assert any(p.startswith("qlinear q8_0 n=1: differs from the reference build by inf") for p in problems), problems


def test_the_driver_file_is_read_record_by_record():
    import struct
    data = b"".join(name.encode().ljust(32, b"\0") + struct.pack(f"<q{len(v)}f", len(v), *v)
                    for name, v in [("rotary", [0.5, -1.0]), ("empty", []), ("silu_mul", [2.0])])
    assert kernel_check.read_records(data) == {"rotary": [0.5, -1.0], "empty": [], "silu_mul": [2.0]}


def test_missing_tools_are_named_with_the_packages_to_install(monkeypatch):
    monkeypatch.setattr(kernel_check.shutil, "which", lambda name: None)
    prefix, why = kernel_check.tools()
    assert prefix == [] and why.startswith("aarch64-linux-gnu-gcc and qemu-aarch64 not installed")
    assert "gcc-aarch64-linux-gnu qemu-user" in why


# /proc/cpuinfo's Features lines of the ARM CPUs users have (abridged).
GRAVITON3 = ("fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop "
             "sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca pacg dcpodp svei8mm svebf16 "
             "i8mm bf16 dgh rng")
GRAVITON2 = "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp ssbs"
CORTEX_A72 = "fp asimd evtstrm crc32 cpuid"   # a Raspberry Pi 4: NEON without the dot products


@pytest.mark.parametrize("features, expected, march", [
    (GRAVITON3, "NEON yes, dotprod yes, i8mm yes, SVE yes, BF16 yes", "-march=armv8.2-a+fp16+dotprod+i8mm+bf16+sve"),
    (GRAVITON2, "NEON yes, dotprod yes, i8mm no, SVE no, BF16 no", "-march=armv8.2-a+fp16+dotprod"),
    (CORTEX_A72, "NEON yes, dotprod no, i8mm no, SVE no, BF16 no", "-march=armv8.2-a")])
def test_doctor_names_an_arm_cpus_features_and_the_build_tries_mcpu_native_first(monkeypatch, features, expected,
                                                                                   march):
    from backend import kernels
    from backend.cli import doctor
    monkeypatch.setattr(kernels, "_cpu_flags", lambda: f"Features\t: {features}")
    monkeypatch.delenv("PHASESCOPE_KERNELS_ARCH", raising=False)
    text = doctor._cpu_item().text
    assert text.endswith(expected) and "AVX" not in text, text
    assert kernels._arches() == [["-mcpu=native"], ["-march=native"], [march], []]
    monkeypatch.setenv("PHASESCOPE_KERNELS_ARCH", "-march=armv8-a")   # the user's choice alone
    assert kernels._arches() == [["-march=armv8-a"]]


def test_an_x86_cpu_keeps_its_units_and_march_native_on_any_machine(monkeypatch):
    from backend import kernels
    from backend.kernels import arm
    flags = {"fpu", "avx2", "fma", "avx512f", "avx512bw", "avx512vl"}
    assert not arm.is_arm(flags, machine="aarch64")   # the flags decide, not the name
    assert arm.is_arm(set(), machine="arm64") and not arm.is_arm(set(), machine="x86_64")
    assert kernels.cpu_units(flags)["AVX-512"] and "NEON" not in kernels.cpu_units(flags)
    assert arm.march(flags) == []
    monkeypatch.setattr(kernels, "_cpu_flags", lambda: "flags\t\t: " + " ".join(flags))
    monkeypatch.delenv("PHASESCOPE_KERNELS_ARCH", raising=False)
    assert kernels._arches() == [["-march=native"], []]


def test_apple_silicon_features_come_from_sysctl_as_linux_names_them():
    from backend.kernels import arm
    m2 = ("hw.optional.arm.AdvSIMD: 1\nhw.optional.arm.FEAT_FP16: 1\nhw.optional.arm.FEAT_DotProd: 1\n"
          "hw.optional.arm.FEAT_I8MM: 1\nhw.optional.arm.FEAT_BF16: 1\nhw.optional.arm.FEAT_SVE: 0\n")
    assert arm.darwin_flags(m2) == ["asimd", "asimdhp", "asimddp", "i8mm", "bf16"]
    assert arm.units(set(arm.darwin_flags(m2))) == {"NEON": True, "dotprod": True, "i8mm": True, "SVE": False,
                                                   "BF16": True}


def test_a_benchmark_tables_machine_line_names_an_arm_cpus_units(monkeypatch):
    from bench import common
    monkeypatch.setattr(common, "_cpuinfo", lambda: ["processor\t: 0", f"Features\t: {GRAVITON2}", "CPU part\t: 0xd0c"])
    assert common.cpu_units() == ["neon", "dotprod"]
    monkeypatch.setattr(common, "_cpuinfo", lambda: [f"Features\t: {CORTEX_A72}"])
    assert common.cpu_units() == ["neon"]


def test_clang_builds_contract_only_within_statements_so_the_quantizers_pragma_holds(tmp_path):
    """Clang's -ffp-contract=fast ignores quant.c's pragma (its K-quant bytes differed from GCC's and
    llama.cpp's under qemu); Apple's cc is a clang, so the build asks the compiler what it is."""
    from backend import kernels
    fake = tmp_path / "cc"
    fake.write_text("#!/bin/sh\necho 'Apple clang version 15.0.0 (clang-1500.3.9.4)'\n")
    fake.chmod(0o755)
    flags = kernels.compile_flags([str(fake)])
    assert "-ffp-contract=on" in flags and "-ffp-contract=fast" not in flags
    assert kernels.compile_flags([str(tmp_path / "missing-gcc")]) == kernels.FLAGS   # not a clang: as it was
    assert "-ffp-contract=fast" in kernels.FLAGS


@pytest.mark.skipif(bool(MISSING) or kernel_check.shutil.which("clang") is None,
                    reason=f"needs clang and the aarch64 tools: {MISSING or 'clang not installed'}")
def test_an_arm_clang_that_refuses_march_native_still_builds_the_kernels_for_the_cpu(tmp_path, monkeypatch):
    """clang for aarch64 refuses -march=native (as Apple's did); the build's first try, -mcpu=native, is taken."""
    import subprocess
    from backend import kernels
    clang = ["clang", "--target=aarch64-linux-gnu"]
    source = tmp_path / "t.c"
    source.write_text("int x;\n")
    refused = subprocess.run([*clang, "-march=native", "-c", str(source), "-o", str(tmp_path / "t.o")],
                             capture_output=True, text=True)
    assert refused.returncode != 0 and "native" in refused.stderr
    monkeypatch.setenv("CC", " ".join(clang))
    monkeypatch.delenv("PHASESCOPE_KERNELS_ARCH", raising=False)
    monkeypatch.setattr(kernels, "_cpu_flags", lambda: f"Features\t: {GRAVITON3}")
    # -O0: which architecture flag the compiler takes is checked, not the optimizer's code
    monkeypatch.setattr(kernels, "FLAGS", ["-O0" if f == "-O3" else f for f in kernels.FLAGS])
    built = kernels.build(tmp_path / "cache")
    assert kernels._flags_file(built).read_text() == "-mcpu=native"
    assert "-ffp-contract=on" in kernels.compile_flags(clang)
