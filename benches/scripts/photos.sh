#!/usr/bin/env bash
# Real photos for the decoder comparison: the photographs among KDE Plasma's wallpapers
# (Debian's plasma-workspace-wallpapers, 2560x1600), and from each of them, with Pillow
# (what torchvision's ImageFolder decodes with): ImageNet-sized (500x375, quality 90) in
# every chroma layout, progressive, grey and CMYK; COCO-sized (640x480); the 4 MP
# originals re-saved baseline and progressive; and 12 MP (4000x3000) upscales.
#
#   benches/scripts/photos.sh DIR   # then: LOADER_PHOTOS=DIR cargo bench -p loader-benches --bench decoder
set -euo pipefail
out=${1:?usage: photos.sh DIR}
python=${PYTHON:-python3}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download plasma-workspace-wallpapers >/dev/null && dpkg-deb -x ./*.deb x)
"$python" - "$work/x/usr/share/wallpapers" "$out" <<'PY'
import pathlib, sys
from PIL import Image
src, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
names = ["Autumn", "BytheWater", "ColdRipple", "ColorfulCups", "EveningGlow", "FallenLeaf",
         "Kite", "OneStandsOut", "Path"]
for n in names:
    im = Image.open(src / n / "contents/images/2560x1600.jpg").convert("RGB")
    def save(kind, img, **kw):
        d = out / kind
        d.mkdir(exist_ok=True)
        img.save(d / f"{n}.jpg", **kw)
    small = im.resize((500, 375), Image.BICUBIC)
    save("imagenet_420", small, quality=90)
    save("imagenet_progressive", small, quality=90, progressive=True)
    save("imagenet_422", small, quality=90, subsampling=1)
    save("imagenet_444", small, quality=90, subsampling=0)
    save("imagenet_grey", small.convert("L"), quality=90)
    save("imagenet_cmyk", small.convert("CMYK"), quality=90)
    save("coco_420", im.resize((640, 480), Image.BICUBIC), quality=90)
    save("photo_4mp", im, quality=92)
    save("photo_4mp_progressive", im, quality=92, progressive=True)
    save("photo_12mp", im.resize((4000, 3000), Image.BICUBIC), quality=92)
PY
echo "photos in $out: $(ls "$out" | tr '\n' ' ')"
