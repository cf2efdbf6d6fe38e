"""How far the loader's pixels are from torchvision's on PIL's decode, exact and with
``draft=True``: Resize(256) + CenterCrop(224) + ToTensor, mean absolute difference in 8-bit
levels per image, summarised per kind of file (docs/python.md, "Decode modes").

    python benches/peers/draft_pixels.py DIR   # DIR from benches/scripts/photos.sh
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "crates/python/tests"))
from test_decode_modes import T, native_and_torchvision  # noqa: E402


def main() -> None:
    root = Path(sys.argv[1])
    spec = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor()])
    for kind in sorted(p for p in root.iterdir() if p.is_dir()):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / kind.name
            shutil.copytree(kind, folder / "images")  # ImageFolder: one class folder
            exact = native_and_torchvision(folder, spec, draft=False)
            draft = native_and_torchvision(folder, spec, draft=True)
        print(f"{kind.name}: exact mean {sum(exact) / len(exact):.3f} max {max(exact):.3f} | "
              f"draft mean {sum(draft) / len(draft):.3f} max {max(draft):.3f}")


if __name__ == "__main__":
    main()
