"""The compatibility catalog shipped with imgbuild (builder/data/catalog.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from packaging.version import Version

from .yamlsrc import load_file

CATALOG_FILE = Path(__file__).parent / "data" / "catalog.yaml"


@dataclass(frozen=True)
class Gpu:
    name: str
    cc: str
    min_cuda: Version
    max_cuda_major: int | None
    source: str
    verified: bool

    @property
    def sm(self) -> str:
        return self.cc.replace(".", "")


@cache
def gpus() -> dict[str, Gpu]:
    data = load_file(CATALOG_FILE).data["gpus"]
    return {name: Gpu(name=name, cc=rec["cc"], min_cuda=Version(rec["min_cuda"]),
                      max_cuda_major=rec.get("max_cuda_major"), source=rec["source"],
                      verified=bool(rec.get("verified")))
            for name, rec in data.items()}
