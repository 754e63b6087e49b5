"""What instruction-set extensions a shared object's code uses (issue 35), read on the host from the files the
in-image probe copied out: pyelftools finds the executable sections and the symbols, iced-x86 decodes x86-64
code (each instruction names the CPUID features it needs), Capstone decodes AArch64 code (each instruction
names its feature groups: SVE2, LSE, ...). Nothing here decodes an instruction by hand.

A file that asks the CPU what it can do (a CPUID or XGETBV instruction, or a symbol of a dispatcher such as
libgcc's __cpu_model, cpuinfo or getauxval) chooses its code path at run time: what it holds beyond a level
is the path for newer CPUs, reported and not refused. torch's CPU kernels and OpenSSL work this way;
DeepSpeed's CPU ops do not: their SIMD width is fixed when they are compiled.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from pathlib import Path

from builder.core import cpubaseline

# At most this much code is decoded per file: a DeepSpeed op holds well under 5 MiB; a file beyond it is
# reported as not read rather than slowing every validation by minutes.
MAX_CODE_BYTES = 64 << 20
SHF_EXECINSTR = 0x4


@dataclass
class FileIsa:
    """The extensions one file's code uses: {feature: [count, first address, symbol or ""]}."""

    path: str
    machine: str = ""
    instructions: int = 0
    features: dict = field(default_factory=dict)
    dispatch: str = ""        # why the file is taken to choose its code at run time; "" where it does not
    error: str = ""           # why it was not read (not ELF, too large, ...)

    def to_json(self) -> dict:
        return {"path": self.path, "machine": self.machine, "instructions": self.instructions,
                "features": self.features, "dispatch": self.dispatch, "error": self.error}


class _Symbols:
    """The function symbol an address lies in, from .symtab (or .dynsym where the file is stripped)."""

    def __init__(self, elf):
        rows = []
        for name in (".symtab", ".dynsym"):
            sec = elf.get_section_by_name(name)
            if sec is None:
                continue
            for sym in sec.iter_symbols():
                if sym["st_info"]["type"] == "STT_FUNC" and sym["st_value"] and sym.name:
                    rows.append((sym["st_value"], sym["st_size"], sym.name))
            if rows:
                break
        rows.sort()
        self.starts = [r[0] for r in rows]
        self.rows = rows

    def at(self, address: int) -> str:
        i = bisect.bisect_right(self.starts, address) - 1
        if i >= 0:
            start, size, name = self.rows[i]
            if address < start + max(size, 1):
                return name
        return ""


def _dispatch_symbol(elf) -> str:
    wanted = cpubaseline.dispatch_symbols()
    for name in (".dynsym", ".symtab"):
        sec = elf.get_section_by_name(name)
        if sec is None:
            continue
        for sym in sec.iter_symbols():
            if sym.name in wanted:
                return f"it refers to {sym.name}"
    return ""


def _code(elf):
    for sec in elf.iter_sections():
        if sec["sh_flags"] & SHF_EXECINSTR and sec["sh_type"] == "SHT_PROGBITS" and sec["sh_size"]:
            yield sec["sh_addr"], sec.data()


def _x86(elf, out: FileIsa, symbols: _Symbols) -> None:
    from iced_x86 import CpuidFeature, Decoder, Instruction, Mnemonic
    names = {v: k for k, v in vars(CpuidFeature).items() if not k.startswith("_") and isinstance(v, int)}
    asks = {getattr(Mnemonic, m) for m in cpubaseline.dispatch_instructions() if hasattr(Mnemonic, m)}
    seen: dict = {}
    instr = Instruction()
    for address, data in _code(elf):
        decoder = Decoder(64, data, ip=address)
        while decoder.can_decode:
            decoder.decode_out(instr)
            out.instructions += 1
            if instr.mnemonic in asks and not out.dispatch:
                out.dispatch = f"it asks the CPU ({instr:n} at {instr.ip:#x})"
            for feature in instr.cpuid_features():
                name = names.get(feature, str(feature))
                row = seen.get(name)
                if row is None:
                    seen[name] = [1, instr.ip]
                else:
                    row[0] += 1
    out.features = {k: [n, f"{a:#x}", symbols.at(a)] for k, (n, a) in seen.items()}


# AArch64: Capstone decodes every instruction, but its feature groups stay empty for SVE, SVE2, LSE and
# dot-product instructions (Capstone 5.0.9: ld1w {z0.s}, ldadd, sdot and eor3 z0.d all have no group). So
# an instruction's extension is read from what Capstone decoded: its mnemonic and its registers. SVE: any
# Z or P register operand (or an SVE-only mnemonic such as rdvl); SVE2: an SVE instruction whose mnemonic
# SVE (the first) has not (Arm A64 ISA, "SVE2 instructions"; NEON forms of the same words use V registers).
_SVE_REG = re.compile(r"(?<![\w.])[zp]\d{1,2}(?:\.[bhsdq]|/[zm]|\b)")
_SVE_ONLY = frozenset("rdvl addvl addpl cntb cnth cntw cntd incb inch incw incd decb dech decw decd setffr rdffr "
                      "wrffr".split())
_SVE2 = frozenset("""adclb adclt addhnb addhnt bcax bdep bext bgrp bsl bsl1n bsl2n cadd cdot cmla eor3 eorbt eortb
    histcnt histseg match nbsl nmatch pmullb pmullt raddhnb raddhnt rax1 rshrnb rshrnt rsubhnb rsubhnt saba sabalb
    sabalt sabdlb sabdlt sadalp saddlb saddlbt saddlt saddwb saddwt sbclb sbclt shadd shrnb shrnt shsub shsubr sli
    smlalb smlalt smlslb smlslt smullb smullt sqcadd sqdmlalb sqdmlalbt sqdmlalt sqdmlslb sqdmlslbt sqdmlslt
    sqdmullb sqdmullt sqrdcmlah sqrshrnb sqrshrnt sqrshrunb sqrshrunt sqshrnb sqshrnt sqshrunb sqshrunt sqxtnb
    sqxtnt sqxtunb sqxtunt srhadd sri srsra sshllb sshllt ssra ssublb ssublbt ssublt ssubltb ssubwb ssubwt subhnb
    subhnt uaba uabalb uabalt uabdlb uabdlt uadalp uaddlb uaddlt uaddwb uaddwt uhadd uhsub uhsubr umlalb umlalt
    umlslb umlslt umullb umullt uqrshrnb uqrshrnt uqshrnb uqshrnt uqxtnb uqxtnt urhadd ursra ushllb ushllt usra
    usublb usublt usubwb usubwt whilege whilegt whilehi whilehs whilerw whilewr xar""".split())
_LSE = re.compile(r"^(?:casp?|ldadd|ldclr|ldeor|ldset|ldsmax|ldsmin|ldumax|ldumin|swp|stadd|stclr|steor|stset|"
                  r"stsmax|stsmin|stumax|stumin)(?:a|l|al)?[bh]?$")
_NEON_GROUPS = {"sdot": "DOTPROD", "udot": "DOTPROD", "sqrdmlah": "RDM", "sqrdmlsh": "RDM",
                "smmla": "MatMulInt8", "ummla": "MatMulInt8", "usmmla": "MatMulInt8", "usdot": "MatMulInt8",
                "sudot": "MatMulInt8", "bfdot": "BF16", "bfmmla": "BF16", "bfmlalb": "BF16", "bfmlalt": "BF16",
                "bfcvt": "BF16", "bfcvtn": "BF16", "bfcvtn2": "BF16", "aese": "AES", "aesd": "AES", "aesmc": "AES",
                "aesimc": "AES", "eor3": "SHA3", "bcax": "SHA3", "rax1": "SHA3", "xar": "SHA3", "sha512h": "SHA3",
                "sha512h2": "SHA3", "sha512su0": "SHA3", "sha512su1": "SHA3", "sm4e": "SM4", "sm4ekey": "SM4"}
_HALF = re.compile(r"(?<![\w.])h\d{1,2}\b|\.[48]h\b")


def arm64_features(mnemonic: str, op_str: str) -> tuple:
    """The extensions one decoded AArch64 instruction needs, by the catalog's names (cpu_levels)."""
    if _SVE_REG.search(op_str) or mnemonic in _SVE_ONLY or mnemonic.startswith(("whilel", "ptrue", "pfalse")):
        if mnemonic in _SVE2:
            return ("SVE", "SVE2")
        if mnemonic.startswith(("aes", "sm4")):
            return ("SVE", "SVE2", "SVE2AES" if mnemonic.startswith("aes") else "SVE2SM4")
        return ("SVE",)
    if _LSE.match(mnemonic):
        return ("LSE",)
    if mnemonic.startswith("crc32"):
        return ("CRC",)
    if mnemonic.startswith(("sha1", "sha256")):
        return ("SHA2",)
    found = _NEON_GROUPS.get(mnemonic)
    if found:
        return (found,)
    if mnemonic.startswith("f") and _HALF.search(op_str) and not mnemonic.startswith(("fmov", "fcvt")):
        return ("FULLFP16",)
    return ()


def _arm64(elf, out: FileIsa, symbols: _Symbols) -> None:
    import capstone
    md = capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)
    md.skipdata = True        # literal pools between functions: skipped, not the end of the section
    seen: dict = {}
    for address, data in _code(elf):
        for addr, _size, mnemonic, op_str in md.disasm_lite(data, address):
            if mnemonic == ".byte":      # skipped data
                continue
            out.instructions += 1
            for name in arm64_features(mnemonic, op_str):
                row = seen.get(name)
                if row is None:
                    seen[name] = [1, addr]
                else:
                    row[0] += 1
    out.features = {k: [n, f"{a:#x}", symbols.at(a)] for k, (n, a) in seen.items()}


def read(path: Path, shown: str | None = None) -> FileIsa:
    """The extensions the code of one ELF shared object uses. shown: the file's path in the image."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    out = FileIsa(path=shown or str(path))
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            out.machine = elf["e_machine"]
            size = sum(sec["sh_size"] for sec in elf.iter_sections()
                       if sec["sh_flags"] & SHF_EXECINSTR and sec["sh_type"] == "SHT_PROGBITS")
            if size > MAX_CODE_BYTES:
                out.error = f"not read: {size >> 20} MiB of code (the limit is {MAX_CODE_BYTES >> 20} MiB)"
                return out
            out.dispatch = _dispatch_symbol(elf)
            symbols = _Symbols(elf)
            if out.machine == "EM_X86_64":
                _x86(elf, out, symbols)
            elif out.machine == "EM_AARCH64":
                _arm64(elf, out, symbols)
            else:
                out.error = f"not read: {out.machine} code"
    except (ELFError, OSError, ValueError) as exc:
        out.error = f"not read: {str(exc)[:200]}"
    return out


@dataclass(frozen=True)
class Finding:
    path: str
    feature: str       # the catalog's name (AVX512F, SVE2)
    count: int
    address: str
    symbol: str

    def __str__(self) -> str:
        where = f"{self.address}" + (f" in {self.symbol}" if self.symbol else "")
        return f"{cpubaseline.pretty(self.feature)} ({self.count} instruction{'s' if self.count != 1 else ''}, first at {where})"


def beyond(files: list, level: cpubaseline.Level) -> tuple[dict, dict]:
    """({path: [Finding]} of files whose code goes beyond the level and never asks the CPU: refused;
    {path: [Finding]} of files that go beyond it but dispatch at run time: reported)."""
    refused, dispatched = {}, {}
    for f in files:
        found = [Finding(f["path"], name, row[0], row[1], row[2]) for name, row in sorted(f["features"].items())
                 if cpubaseline.beyond(name, level)]
        if found:
            found.sort(key=lambda x: _severity(x.feature, level.platform))
            (dispatched if f["dispatch"] else refused)[f["path"]] = found
    return refused, dispatched


def _severity(feature: str, platform: str) -> tuple:
    """Beyond every level first (AMX), then the highest level needed (AVX-512F before AVX2)."""
    needed = cpubaseline.needs(feature, platform)
    return (0, 0, feature) if needed is None else (1, -needed.rank, feature)
